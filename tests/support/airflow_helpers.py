"""Real Airflow installs for tests/airflow: the cached venvs scripts/airflow_env.sh builds, an AIRFLOW_HOME per
test, and Airflow's own record of task states."""

from __future__ import annotations

import os
import sqlite3
import subprocess
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
        return [pytest.param(None, id="no-airflow", marks=pytest.mark.skip(
            reason="the Airflow venvs are built by ./scripts/test.sh (e.g. ./scripts/test.sh -m airflow)"))]
    venvs = [Path(v) for v in named]
    missing = [str(v) for v in venvs if not (v / "bin" / "airflow").exists()]
    if missing:
        raise RuntimeError(f"SMARTSENSOR_AIRFLOW_VENVS names Airflow venvs that do not exist: {missing}; "
                           f"./scripts/test.sh builds them")
    return venvs


def airflow_env(venv: Path, home: Path, **extra: str) -> dict[str, str]:
    """An environment for Airflow commands: its venv first on PATH, nothing of smartsensor's (no PYTHONPATH,
    no SMARTSENSOR_*), examples off, DAGs from ``home/dags``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SMARTSENSOR", "AIRFLOW", "PYTHON", "VIRTUAL_ENV", "PYSPARK"))}
    (home / "dags").mkdir(parents=True, exist_ok=True)
    env.update(PATH=f"{venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}", AIRFLOW_HOME=str(home),
               AIRFLOW__CORE__LOAD_EXAMPLES="False", AIRFLOW__CORE__DAGS_FOLDER=str(home / "dags"),
               PYTHONWARNINGS="ignore")
    env.update(extra)
    return env


def version_of(venv: Path) -> str:
    """``airflow-3.1.8`` → ``3.1.8`` (how scripts/airflow_env.sh names the venvs)."""
    return venv.name.split("-", 1)[1]


def run_airflow(venv: Path, args: list[str], env: dict[str, str], timeout: float = 300,
                check: bool = True) -> subprocess.CompletedProcess[str]:
    """``airflow *args`` in ``venv``; with ``check``, fail with its output unless it exits 0."""
    proc = subprocess.run([str(venv / "bin" / "airflow"), *args], env=env, capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"airflow {args} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


def task_states(home: Path, dag_id: str) -> dict[str, str | None]:
    """Airflow's task_instance states of ``dag_id`` (one run), read from its SQLite database."""
    with sqlite3.connect(home / "airflow.db") as conn:
        return dict(conn.execute("SELECT task_id, state FROM task_instance WHERE dag_id = ?", (dag_id,)).fetchall())
