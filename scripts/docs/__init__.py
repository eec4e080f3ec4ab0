"""The documentation site's build: reference pages generated from the code (``gen_reference``)."""
