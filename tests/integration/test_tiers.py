"""The suite's tiers (tests/support/tier.py, tests/conftest.py): CI's run leaves out the extended tier, the older
Airflow version's runs among it; ``SMARTSENSOR_TIER=all`` (``./scripts/test.sh --all``) keeps everything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.common import ROOT
from tests.support.tier import version_key

MODULES = ["tests/airflow/test_dag_end_to_end.py", "tests/airflow/test_triggerer.py", "tests/process/test_bench.py"]


def collected(tmp_path: Path, tier: str) -> list[str]:
    """The node ids pytest collects from MODULES with two (empty) Airflow venvs named, under ``tier``."""
    venvs = []
    for version in ("2.10.5", "3.3.2"):
        venv = tmp_path / f"airflow-{version}"
        (venv / "bin").mkdir(parents=True)
        (venv / "bin" / "airflow").touch()
        venvs.append(str(venv))
    env = {**os.environ, "SMARTSENSOR_AIRFLOW_VENVS": " ".join(venvs), "SMARTSENSOR_TIER": tier}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", *MODULES],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return [line.strip() for line in proc.stdout.splitlines() if "::" in line]


def test_ci_leaves_out_the_extended_tier_and_the_older_airflows_runs_but_every_version_tests(tmp_path: Path) -> None:
    ci = collected(tmp_path / "ci", "ci")
    assert "tests/airflow/test_dag_end_to_end.py::test_dag_waits_through_smartsensor[2.10.5]" in ci  # every_version
    assert "tests/airflow/test_dag_end_to_end.py::test_dag_waits_through_smartsensor[3.3.2]" in ci
    assert not [node for node in ci if "test_triggerer" in node or "test_bench" in node], ci  # marked extended
    whole = collected(tmp_path / "all", "all")
    assert set(ci) < set(whole)
    assert (
        "tests/airflow/test_triggerer.py::test_one_states_request_per_interval_for_a_whole_triggerer[2.10.5]" in whole
    )
    assert "tests/process/test_bench.py::test_bench" in whole


@pytest.mark.parametrize(("older", "newer"), [("airflow-2.10.5", "airflow-3.3.2"), ("airflow-3.3.2", "airflow-3.10.0")])
def test_versions_compare_as_numbers(older: str, newer: str) -> None:
    assert version_key(older) < version_key(newer)
