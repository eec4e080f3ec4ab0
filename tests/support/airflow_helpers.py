"""Real Airflow installs for tests/airflow: the cached venvs scripts/airflow_env.sh builds, as test parameters.
Running Airflow itself (its environment, commands, components, states) is scripts/airflow/stack.py, which the
demo uses too."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.common import ROOT

INSIDE = ROOT / "tests" / "airflow" / "inside"  # scripts run by an Airflow venv's python, not by pytest


def airflow_venvs() -> list[Any]:
    """The venvs of the pinned Airflow versions, as test parameters. scripts/test.sh builds them and names them
    in SMARTSENSOR_AIRFLOW_VENVS; under plain pytest (no variable) the tests are skipped, saying how to run
    them, as the PostgreSQL cases are; a named venv that is missing is an error."""
    named = os.environ.get("SMARTSENSOR_AIRFLOW_VENVS", "").split()
    if not named:
        return [
            pytest.param(
                None,
                id="no-airflow",
                marks=pytest.mark.skipif(
                    not named,
                    reason="the Airflow venvs are built by ./scripts/test.sh (e.g. ./scripts/test.sh -m airflow)",
                ),
            )
        ]
    venvs = [Path(v) for v in named]
    missing = [str(v) for v in venvs if not (v / "bin" / "airflow").exists()]
    if missing:
        raise RuntimeError(
            f"SMARTSENSOR_AIRFLOW_VENVS names Airflow venvs that do not exist: {missing}; ./scripts/test.sh builds them"
        )
    return venvs
