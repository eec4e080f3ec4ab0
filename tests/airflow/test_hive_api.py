"""Issue 32, item 3: the public API of Airflow's Hive sensors, kept. A DAG or a helper that uses what Airflow's
``NamedHivePartitionSensor``, ``HivePartitionSensor`` and ``MetastorePartitionSensor`` offer (constructor arguments
and defaults, attributes, ``template_fields``, ``ui_color``, ``parse_partition_name``, ``poke``) gets the same from
smartsensor's drop-ins and from tasks the cluster policy routes, in each pinned Airflow with its Hive provider.

The expectations are those of the Hive provider's own tests of these sensors that need no live Hive
(tests/airflow/inside/hive_api_checks.py names them and evaluates each on the three variants); ``EXPECTED`` holds
the value an upstream test (or the newest provider, 9.7.1) names. Left out on purpose: ``run``/``execute`` (it
needs Airflow's database, and the drop-ins' execute registers with smartsensor and defers: their point), and the
drop-ins' extra arguments (``smartsensor_*``, ``end_from_trigger``, ``deferrable``), which Airflow's classes do not
take.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from scripts.airflow.stack import airflow_env, version_of
from tests.support.airflow_helpers import INSIDE, airflow_venvs

pytestmark = pytest.mark.slow

DS = "2015-01-01"
BABYNAMES = "static_babynames_partitioned"
METASTORE_FIELDS_NEWEST = ["sql", "hook_params", "parameters", "conn_id", "partition_name", "table", "schema"]


def parsed(value: list[str] | str) -> dict[str, Any]:
    """parse_partition_name's outcome, called on the class and on a task."""
    one = value if isinstance(value, str) else {"type": "tuple", "value": value}
    return {"class": one, "task": one}


EXPECTED: dict[str, Any] = {
    # test_named_hive_partition.py
    "named.template_fields": ["partition_names"],
    "named.ui_color": "#8d99ae",
    "named.task_type": {"task_type": "NamedHivePartitionSensor", "is_sensor": True},
    "named.base_sensor_args": {"timeout": 600.0, "mode": "reschedule", "soft_fail": True, "exponential_backoff": True},
    "named.defaults": {
        "metastore_conn_id": "metastore_default",
        "poke_interval": 180.0,
        "hook": None,
        "next_index_to_poke": 0,
    },
    "named.attributes": {
        "partition_names": [f"airflow.{BABYNAMES}/ds={DS}"],
        "poke_interval": 1.0,
        "hook_is_given": True,
        "task_id": "test_poke_existing",
    },
    "named.parse_correct": parsed(["default", "users", "ds=2016-01-01/state=IT"]),
    "named.parse_default_schema": parsed(["default", "users", "ds=2016-01-01/state=IT"]),
    "named.parse_periods": parsed(["schema", "table", "part1=this.can.be.an.issue/part2=ok"]),
    # The upstream test matches this message, its missing space included.
    "named.parse_incorrect": parsed("ValueError: Could not parse incorrect.nameinto table, partition"),
    "named.poke_existing": {"poke": True, "asked": [["airflow", BABYNAMES, f"ds={DS}"]]},
    "named.poke_non_existing": {"poke": False, "asked": [["airflow", BABYNAMES, "ds=2015-01-02"]]},
    "named.poke_multiple_rendered": {
        "poke": True,
        "asked": [["airflow", BABYNAMES, f"ds={DS}"], ["airflow", f"{BABYNAMES}2", f"ds={DS}"]],
    },
    "named.poke_partition": {"result": True, "asked": [["db", "events", "ds=1/hr=2"]]},
    "named.str_at_construction": {"partition_names": "airflow.t/ds=1"},
    "named.str_at_poke": "TypeError: partition_names must be an array of strings",
    # test_hive_partition.py
    "hive.template_fields": ["schema", "table", "partition", "metastore_conn_id"],
    "hive.ui_color": "#C5CAE9",
    "hive.task_type": {"task_type": "HivePartitionSensor", "is_sensor": True},
    "hive.base_sensor_args": {"timeout": 600.0, "mode": "reschedule", "soft_fail": True, "exponential_backoff": True},
    "hive.defaults": {
        "table": f"airflow.{BABYNAMES}",
        "partition": "ds='{{ ds }}'",
        "schema": "default",
        "metastore_conn_id": "metastore_default",
        "poke_interval": 180.0,
    },
    "hive.empty_partition": {"None": "ds='{{ ds }}'", "''": "ds='{{ ds }}'"},
    "hive.rendered": {
        "schema": "default",
        "table": f"airflow.{BABYNAMES}",
        "partition": f"ds='{DS}'",
        "metastore_conn_id": f"metastore_{DS}",
    },
    "hive.poke": {
        "poke": True,
        "asked": [
            ["HiveMetastoreHook", "metastore_default"],
            ["check_for_partition", "airflow", BABYNAMES, f"ds='{DS}'"],
        ],
    },
    # test_metastore_partition.py and test_metastore_partition_refactor.py
    "metastore.template_fields": METASTORE_FIELDS_NEWEST,
    "metastore.ui_color": "#8da7be",
    "metastore.task_type": {"task_type": "MetastorePartitionSensor", "is_sensor": True},
    "metastore.base_sensor_args": {
        "timeout": 600.0,
        "mode": "reschedule",
        "soft_fail": True,
        "exponential_backoff": True,
    },
    "metastore.init": {"table": "my_table", "partition_name": "ds=2023-01-01", "schema": "my_schema"},
    "metastore.conn_id": {"given": "my_conn", "default": "metastore_mysql"},
    "metastore.defaults": {"schema": "default", "poke_interval": 60.0},  # BaseSensorOperator's: it sets none
    "metastore.sql_args": {
        "conn_id": "test_connection_id",
        "table": f"airflow.{BABYNAMES}",
        "partition_name": f"ds={DS}",
    },
    "metastore.poke_sql": {
        "poke": True,
        "asked": [{"table": "my_table", "schema": "my_schema", "partition_name": "ds=2023-01-01"}],
    },
    "metastore.poke_table_split": {
        "poke": False,
        "asked": [{"table": "other_table", "schema": "other_schema", "partition_name": "ds=2023-01-01"}],
    },
    "metastore.rendered": {"partition_name": f"ds={DS}", "table": "db.events", "schema": "other"},
}

# Deliberate differences: what an older Hive provider does differently from the newest (9.7.1), which the drop-ins
# follow whatever provider is installed beside them. On an older provider (9.1.4, beside Airflow 2.10.5) the
# drop-in may give either the installed provider's value or the newest's; Airflow's own (and so the routed task,
# which is Airflow's own class) gives the installed provider's.
NEWEST = (9, 7, 1)
NEWER_PROVIDER: dict[str, str] = {
    # A whole-list template ("{{ params.parts }}" with render_template_as_native_obj) is a string until rendered:
    # newer providers refuse a string when they poke, not when the DAG file is parsed.
    "named.str_at_construction": "9.1.4 refuses a str partition_names in the constructor",
    "named.str_at_poke": "9.1.4 pokes a str partition_names character by character (ValueError)",
    "hive.template_fields": "9.1.4 does not template metastore_conn_id",
    "hive.rendered": "9.1.4 does not template metastore_conn_id",
    "metastore.template_fields": "9.1.4's templates its own three fields only, not SqlSensor's",
}

_seen: dict[Path, dict[str, Any]] = {}


def seen_in(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What hive_api_checks.py saw in ``venv`` (run once per venv)."""
    if venv not in _seen:
        home = tmp_path_factory.mktemp(f"hive-api-{version_of(venv)}")
        proc = subprocess.run(
            [str(venv / "bin" / "python"), str(INSIDE / "hive_api_checks.py")],
            env=airflow_env(venv, home, AIRFLOW__SMARTSENSOR__USE_SMART_SENSOR="True"),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        _seen[venv] = json.loads(proc.stdout.strip().splitlines()[-1])
    return _seen[venv]


def older_provider(seen: dict[str, Any]) -> bool:
    return tuple(int(p) for p in seen["hive_provider"].split(".")[:3]) < NEWEST


@pytest.mark.parametrize("venv", airflow_venvs(), ids=version_of)
def test_checks_ran_as_meant(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    seen = seen_in(venv, tmp_path_factory)
    assert seen["airflow"] == version_of(venv)
    assert sorted(seen["expectations"]) == sorted(EXPECTED)
    # The routed variant checks the policy only if the policy routed it.
    assert seen["routed"] == dict.fromkeys(
        ["NamedHivePartitionSensor", "HivePartitionSensor", "MetastorePartitionSensor"], "cluster policy"
    )


@pytest.mark.parametrize("expectation", sorted(EXPECTED))
@pytest.mark.parametrize("venv", airflow_venvs(), ids=version_of)
def test_airflows_own_meets_the_upstream_expectation(
    venv: Path, expectation: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The checks see in Airflow's own class what the upstream tests (or the newest provider) expect."""
    seen = seen_in(venv, tmp_path_factory)
    own = seen["expectations"][expectation]["airflow"]
    if expectation in NEWER_PROVIDER and older_provider(seen):
        # An older Hive provider differs here on purpose (NEWER_PROVIDER); the drop-in follows the newest one.
        assert seen["expectations"][expectation]["dropin"] == EXPECTED[expectation], NEWER_PROVIDER[expectation]
        return
    assert own == EXPECTED[expectation]


@pytest.mark.parametrize("expectation", sorted(EXPECTED))
@pytest.mark.parametrize("venv", airflow_venvs(), ids=version_of)
def test_routed_task_keeps_it(venv: Path, expectation: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """A routed task is Airflow's own class with smartsensor's execute: nothing else differs."""
    values = seen_in(venv, tmp_path_factory)["expectations"][expectation]
    assert values["routed"] == values["airflow"]


@pytest.mark.parametrize("expectation", sorted(EXPECTED))
@pytest.mark.parametrize("venv", airflow_venvs(), ids=version_of)
def test_dropin_keeps_it(venv: Path, expectation: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    seen = seen_in(venv, tmp_path_factory)
    values = seen["expectations"][expectation]
    dropin, own = values["dropin"], values["airflow"]
    allowed = [own]
    if expectation in NEWER_PROVIDER and older_provider(seen):
        allowed.append(EXPECTED[expectation])  # deliberate: the newest provider's behaviour (see NEWER_PROVIDER)
    assert dropin in allowed, f"drop-in: {dropin!r}; Airflow's own: {own!r}"
