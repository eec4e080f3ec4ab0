"""Real Airflow installs for tests/airflow: the cached venvs scripts/airflow_env.sh builds, as test parameters.
Running Airflow itself (its environment, commands, components, states) is scripts/airflow/stack.py, which the
demo uses too."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from scripts.airflow.stack import airflow_env
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


def seen_inside(venv: Path, home: Path, script: str, timeout: float = 300) -> dict[str, Any]:
    """Run ``tests/airflow/inside/<script>`` with the venv's python (Airflow's environment, ``home`` as
    $AIRFLOW_HOME); the JSON line it printed last. Fails with its stderr unless it exits 0."""
    proc = subprocess.run(
        [str(venv / "bin" / "python"), str(INSIDE / script)],
        env=airflow_env(venv, home),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))
