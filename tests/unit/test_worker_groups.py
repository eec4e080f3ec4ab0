"""The suite on several pytest-xdist workers (./scripts/test.sh): tests/conftest.py gives one xdist group to the
tests that must share a worker, read here from a real collection of a few modules (a pytest subprocess, collection
only: nothing runs, no database, no Spark)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.common import ROOT
from tests.support.tier import version_key

# Prints each collected test's xdist group, or "-": loaded into the collecting pytest with -p.
SHOW_GROUPS = """
def pytest_collection_finish(session):
    for item in session.items:
        mark = item.get_closest_marker("xdist_group")
        print("GROUP", item.nodeid, mark.args[0] if mark else "-")
"""


def groups(tmp_path: Path, *paths: str, tier: str = "all") -> dict[str, str]:
    """Node id → group of the tests in ``paths`` that ``tier`` runs (tests/support/tier.py: "all", or "ci", which
    leaves the extended tier out), with two stand-in Airflow venvs named as test.sh names them."""
    venvs = [tmp_path / f"airflow-{version}" for version in ("2.10.5", "3.3.2")]
    for venv in venvs:
        (venv / "bin").mkdir(parents=True)
        (venv / "bin" / "airflow").touch()
    (tmp_path / "show_groups.py").write_text(SHOW_GROUPS)
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": f"{tmp_path}:{ROOT}",
        "SMARTSENSOR_AIRFLOW_VENVS": " ".join(map(str, venvs)),
        "SMARTSENSOR_TIER": tier,
    }
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "show_groups", *paths],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    found = dict(  # node ids may hold spaces; a group does not
        line.removeprefix("GROUP ").rsplit(" ", 1) for line in out.stdout.splitlines() if line.startswith("GROUP ")
    )
    assert found, out.stdout[-3000:]
    return found


def test_spark_each_airflow_version_and_each_shared_service_keep_one_worker(tmp_path: Path) -> None:
    found = groups(
        tmp_path,
        "tests/integration/test_classic.py",
        "tests/integration/test_catalog_backends.py",
        "tests/airflow/test_production_like.py",
        "tests/process/test_metastore_db_backend.py",
        "tests/process/test_metastore_oracle.py",
        "tests/process/test_metastore_postgres.py",
        "tests/unit/test_layers.py",
    )
    by_test = {node.split("::", 1)[1]: group for node, group in found.items()}
    # the one SparkSession: every test that asks for it, whatever its module
    assert by_test["test_run_task_success_after_landing[sqlite]"] == "spark"
    # the metastore services on PostgreSQL and MariaDB (session fixtures) with it: asked for by name or through the
    # oracle's backends (getfixturevalue), in one worker, so that each starts once a run
    assert by_test["test_the_first_start_creates_the_schema_hive_expects"] == "spark"
    oracle = {test: group for test, group in by_test.items() if test.startswith("test_every_backend_answers")}
    assert len(oracle) == 6 and set(oracle.values()) == {"spark"}, oracle
    backend = {test: group for test, group in by_test.items() if "database_backend" in test or "feed" in test}
    assert backend and set(backend.values()) == {"spark"}, backend  # its module fixture asks by name too
    # a module's metastore service, set up once
    assert by_test["test_thrift_caches_columns_and_lists_once_per_table"] == "tests.integration.test_catalog_backends"
    # one Airflow version's tests together, each version apart
    policy = {test: group for test, group in by_test.items() if test.startswith("test_with_the_policy_off")}
    assert sorted(policy.values()) == ["airflow-2.10.5", "airflow-3.3.2"], policy
    # the rest go wherever a worker is free
    assert {group for node, group in found.items() if node.startswith("tests/unit/")} == {"-"}
    assert set(found.values()) == {
        "spark",
        "tests.integration.test_catalog_backends",
        "airflow-2.10.5",
        "airflow-3.3.2",
        "-",
    }


def test_ci_leaves_out_the_extended_tier_and_the_older_airflows_runs_but_every_version_tests(tmp_path: Path) -> None:
    modules = (
        "tests/airflow/test_dag_end_to_end.py",
        "tests/airflow/test_provider_in_airflow.py",
        "tests/airflow/test_triggerer.py",
        "tests/process/test_bench.py",
    )
    ci = set(groups(tmp_path / "ci", *modules, tier="ci"))
    provider = "tests/airflow/test_provider_in_airflow.py::test_provider_checks_inside_airflow"
    assert {f"{provider}[2.10.5]", f"{provider}[3.3.2]"} <= ci  # every_version
    dag = "tests/airflow/test_dag_end_to_end.py::test_dag_waits_through_smartsensor"
    assert f"{dag}[2.10.5]" in ci and f"{dag}[3.3.2]" not in ci  # older_versions
    assert not [node for node in ci if "test_triggerer" in node or "test_bench" in node], ci  # marked extended
    whole = set(groups(tmp_path / "all", *modules, tier="all"))
    triggerer = "tests/airflow/test_triggerer.py::test_one_states_request_per_interval_for_a_whole_triggerer"
    assert (
        ci < whole
        and {
            f"{triggerer}[2.10.5]",
            f"{triggerer}[3.3.2]",
            f"{dag}[3.3.2]",
            "tests/process/test_bench.py::test_bench",
        }
        <= whole
    )


@pytest.mark.parametrize(("older", "newer"), [("airflow-2.10.5", "airflow-3.3.2"), ("airflow-3.3.2", "airflow-3.10.0")])
def test_airflow_versions_compare_as_numbers(older: str, newer: str) -> None:
    assert version_key(older) < version_key(newer)
