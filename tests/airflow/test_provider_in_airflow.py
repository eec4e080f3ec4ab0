"""The provider inside real Airflow 2.10 and 3.x: it imports, is listed as a provider, keeps Airflow's
constructor arguments and template fields, and its trigger survives ``serialize()`` → classpath → rebuild."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from scripts.airflow.stack import airflow_env, version_of
from tests.support.airflow_helpers import INSIDE, airflow_venvs

pytestmark = pytest.mark.slow


def seen_inside(venv: Path, tmp_path: Path, script: str) -> dict[str, Any]:
    """Run ``tests/airflow/inside/<script>`` with the venv's python; the JSON line it printed last."""
    proc = subprocess.run(
        [str(venv / "bin" / "python"), str(INSIDE / script)],
        env=airflow_env(venv, tmp_path),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("venv", airflow_venvs(), ids=version_of)
def test_provider_checks_inside_airflow(venv: Path, tmp_path: Path) -> None:
    seen = seen_inside(venv, tmp_path, "provider_checks.py")
    assert seen["airflow"] == version_of(venv)
    assert seen["serialize"] == {
        "classpath": "smartsensor_airflow.triggers.SmartSensorTrigger",
        "kwargs": {
            "key": {"dag_id": "d", "task_id": "t", "run_id": "r", "map_index": -1, "try_number": 2},
            "conn_id": "smartsensor_default",
            "poll_interval": 3.0,
            "end_from_trigger": False,
            "settle": 5.0,
            "deadline": None,
            "fallback_grace": None,
        },
        "round_trip_equal": True,
    }
    assert seen["json_kwargs"] is True
    assert seen["template_fields"] == {
        "named": ["partition_names"],
        "hive": ["schema", "table", "partition", "metastore_conn_id"],
    }
    assert seen["named_exec"] == {
        "poke_interval": 30.0,
        "timeout": 600.0,
        "soft_fail": True,
        "exponential_backoff": False,
    }
    assert seen["named_poll_interval"] == 10.0
    assert seen["hive_persist"] == {"table": "db.events", "partition": {"ds": "2026-11-22", "hr": "00"}}
    assert seen["str_partition_names"] == "TypeError: partition_names must be an array of strings"
    # The Hive provider's own expectations of parse_partition_name.
    assert seen["parse_partition_name"] == [["db", "t", "ds=1/hr=2"], ["default", "t", "ds=1"], ["a", "b.c", "x=1"]]
    assert seen["parse_bad"].startswith("ValueError: Could not parse db.t")
    assert seen["default_partition"] == "ds='{{ ds }}'"
    assert seen["end_from_trigger"] is True  # no listener plugins here
    assert seen["smartsensor_imported"] == []
    assert seen["provider_listed"] is True


@pytest.mark.parametrize("venv", airflow_venvs(), ids=version_of)
def test_the_policy_routes_only_airflows_own_enabled_sensors(venv: Path, tmp_path: Path) -> None:
    seen = seen_inside(venv, tmp_path, "policy_checks.py")
    assert "enabled=False" in seen["defaults"] and "fallback_grace=120.0" in seen["defaults"]
    assert seen["enabled"] is True
    assert seen["errors"] == {
        "use_smart_sensor": "[smartsensor] use_smart_sensor = 'maybe': expected True or False",
        "sensors_enabled": "[smartsensor] sensors_enabled names S3KeySensor: the policy routes "
        "NamedHivePartitionSensor, HivePartitionSensor, MetastorePartitionSensor",
        "poll_interval": "[smartsensor] poll_interval = 'soon': expected a number of seconds",
        "zero_interval": "[smartsensor] poll_interval must be above 0 seconds",
    }
    plain = {
        "named": "NamedHivePartitionSensor",
        "filter": "HivePartitionSensor",
        "param_off": "NamedHivePartitionSensor",
        "subclass": "MySensor",
        "drop_in": "NamedHivePartitionSensor",
    }
    assert seen["disabled"] == plain
    assert seen["tagged_off"] == plain
    assert seen["bad_setting"] == plain  # a setting it cannot read leaves every task as Airflow's own
    assert seen["enabled_routes"] == {
        **plain,
        "named": "NamedHivePartitionSensor via smartsensor",
        "filter": "HivePartitionSensor via smartsensor",
    }
    assert seen["routed_named"] == {
        "is_airflows": True,
        "class": "airflow.providers.apache.hive.sensors.named_hive_partition.NamedHivePartitionSensor",
        "template_fields": ["partition_names"],
        "parse": ["db", "t", "ds=1"],
        "settings": ["smartsensor_default", 4.0, 30.0],
        "persist": {"partition_names": ["db.t/ds={{ ds }}"]},
        "again": False,
    }
    assert seen["routed_filter_persist"] == {"table": "db.t", "partition": {"ds": "1"}}
    assert seen["valve"] == {
        "found": "found at 20 s",
        "timeout": "AirflowSensorTimeout at 25 s",
        "soft_fail": "AirflowSkipException at 25 s",
    }
    assert seen["seconds_left"] == [500.0, 0.0, 600.0]
