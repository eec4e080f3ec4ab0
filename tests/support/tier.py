"""The suite's two tiers. CI (``.ci/run``, a plain ``./scripts/test.sh``) runs every test but those marked
``extended``; ``./scripts/test.sh --all`` (``SMARTSENSOR_TIER=all``) runs them too, with the several-host matrix and
the bigger example counts. What goes in the extended tier: the older Airflow version's runs of the Airflow tests
(CI runs every Airflow test on the newest supported version, and those marked ``every_version`` on each), the
scale and benchmark runs, the Airflow demo, and the costliest fault runs whose invariants a cheaper CI test holds
too. docs/testing.md lists them and says when to run the whole."""

from __future__ import annotations

import os

ALL = os.environ.get("SMARTSENSOR_TIER", "ci") == "all"


def examples(ci: int, extended: int) -> int:
    """A property test's example count: ``ci`` in CI's run, ``extended`` in the whole (``--all``)."""
    return extended if ALL else ci


def version_key(name: str) -> tuple[int, ...]:
    """``airflow-3.3.2`` → (3, 3, 2): venv names compared as versions."""
    return tuple(int(part) for part in name.removeprefix("airflow-").split(".") if part.isdigit())
