"""The HTTP entry point (``smartsensor serve``): versioned JSON endpoints over the same services as the CLI.

Stateless over the metadata database, so several can run behind a load balancer.
"""
