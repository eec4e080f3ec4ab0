"""A round over the ranges a worker serves, as a package of named steps.

- ``range_rounds``: ``RangeRounds`` (one shard range: its index of vigils, planning, deciding, writing) and
  ``run_round``, the one entry point that runs a round over the ranges one worker serves;
- ``index``: the vigils of a range in memory (``VigilIndex``), kept current from the database incrementally;
- ``plan``: what one round is about to poke; ``report``: what it did (``RoundResult``);
- ``poke`` and ``bounded_poke``: answering the due vigils' checks (one catalog call per table, ``poke()`` for user
  sensors, each within ``poke_timeout``).
"""
