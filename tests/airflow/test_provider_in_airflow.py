"""The provider inside real Airflow 2.10 and 3.x: it imports, is listed as a provider, keeps Airflow's
constructor arguments and template fields, and its trigger survives ``serialize()`` → classpath → rebuild."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timezone
from pathlib import Path

import pytest

from scripts.airflow.stack import airflow_env, run_airflow, version_of
from tests.support.airflow_databases import AirflowDatabases
from tests.support.airflow_helpers import airflow_venvs, seen_inside

pytestmark = [pytest.mark.slow, pytest.mark.every_version]  # the provider's compatibility layer, on each version


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
            "try_started": None,
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
    assert seen["setup_raises"] == {  # risk: the class swapped before a setup that raised
        "operator": "NamedHivePartitionSensor",
        "routed": False,
        "class": "airflow.providers.apache.hive.sensors.named_hive_partition.NamedHivePartitionSensor",
        "set": [],
    }
    assert seen["valve"] == {
        "found": "found at 20 s",
        "timeout": "AirflowSensorTimeout at 25 s",
        "soft_fail": "AirflowSkipException at 25 s",
    }
    assert seen["seconds_left"] == [500.0, 0.0, 600.0]
    assert seen["trigger_timed_out"] == {  # whether Airflow's scheduler or the trigger saw the timeout first
        "execution_timeout": "AirflowTaskTimeout",  # retries apply (3.x's sensors would fail for good)
        "execution_timeout_soft_fail": "AirflowSkipException",
        "routed_execution_timeout": "AirflowTaskTimeout",
        "backstop": "AirflowSensorTimeout",  # the trigger's own timeout, the task's timeout plus a grace
        "backstop_before_execution_timeout": "AirflowSensorTimeout",
        "trigger_failure": "TaskDeferralError",  # not a timeout: Airflow's own handling
    }
    assert seen["valve_resume"] == {  # risk: a resume that resets ti.start_date must not restart the valve's clock
        "carried": True,
        "left_from_resume": 600,
        "left_from_first": 100,
        "left_when_start_date_kept": 100,
    }


@pytest.mark.parametrize("venv", airflow_venvs(), ids=version_of)
def test_which_tasks_start_in_the_triggerer_as_airflow_serializes_them(venv: Path, tmp_path: Path) -> None:
    """Every drop-in and policy-routed task starts in the triggerer, but for the ones the trigger could not render
    (a 2.10 triggerer has no DAG: only the run's own variables), a mapped task, and the opt-outs; each task has
    its own StartTriggerArgs, and the trigger renders a check as Airflow would."""
    seen = seen_inside(venv, tmp_path, "start_checks.py")
    two_ten = version_of(venv).startswith("2.")
    assert seen["starts"] == {
        "plain": True,
        "params": True,
        "macro": True,
        "run_conf": not two_ten,  # dag_run: Airflow's own context on 3.3, not in the 2.10 trigger's
        "user_macro": False,  # user_defined_macros are not serialized: no triggerer has them
        "unreadable": False,  # a filter smartsensor cannot check: the execute path says so
        "opted_out": False,
        "limited": True,
        "mapped": False,
        "routed": True,
        "kept": False,  # [smartsensor] start_from_trigger = False
        "missing": True,  # a param the run lacks: the trigger's rendering fails as Airflow's does (below)
        "missing_db": True,
    }
    assert seen["reasons"]["user_macro"] == "its partition uses the DAG's user-defined macros or filters"
    if two_ten:
        assert seen["reasons"]["run_conf"] == "its partition_names uses dag_run, which a 2.10 triggerer cannot give"
    plain = seen["plain"]
    assert plain["classpath"] == "smartsensor_airflow.triggers.SmartSensorStartTrigger"
    assert plain["next_method"] == "execute_complete"
    assert plain["timeout"] == 600 + 60  # the task's timeout and a margin: a backstop behind the service's verdict
    assert plain["kwargs"]["fields"] == {"partition_names": ["db.t/ds={{ ds }}"]}
    assert plain["kwargs"]["exec_values"] == {
        "poke_interval": 30.0,
        "timeout": 600.0,
        "soft_fail": False,
        "exponential_backoff": False,
    }
    assert seen["limited_execution_timeout"] == 30.0
    assert seen["routed_class"] == "NamedHivePartitionSensor"
    assert seen["per_instance"] is True
    assert seen["round_trip"] is True
    assert seen["rendered"] == seen["rendered_by_airflow"]
    assert seen["rendered"] == {"partition_names": ["db.t/ds=2026-11-22", "db.t/ds=2026-11-21/x=2026-01-02"]}
    assert seen["rendered_native"] == {"partition_names": ["db.t/ds=2026-11-22"]}
    # The DAG's template rules travel with the trigger: Airflow's StrictUndefined by default, so a name the context
    # lacks fails the trigger's rendering as it fails Airflow's (the try then runs execute on a worker, where Airflow
    # renders and fails it); never "" (which made `partition {}`, any partition, or the `default` database).
    assert plain["kwargs"]["undefined"] == seen["plain_undefined"] == "jinja2.runtime.StrictUndefined"
    for task_id in ("missing", "missing_db"):
        assert seen["strict"][task_id] == {
            "airflow": "UndefinedError",
            "trigger": "UndefinedError",
            "trigger_check": "UndefinedError",
        }, task_id
    assert seen["strict_native"] == "UndefinedError"  # render_template_as_native_obj: the same refusal
    # A DAG that asks for lenient rendering gets it in the trigger too, with its plain environment options.
    lenient = seen["lenient"]
    assert lenient["trigger"] == lenient["airflow"] == {"partition_names": ["db.t/ds=2026-11-22"]}
    assert (lenient["starts"], lenient["undefined"]) == (True, "jinja2.runtime.Undefined")
    assert lenient["jinja_options"] == {"keep_trailing_newline": True}
    # Rules that cannot travel as data take the execute path, where Airflow renders.
    assert seen["not_carried"] == {
        "own": "its DAG's template_undefined (__main__.OwnUndefined) is not one of jinja2's or Airflow's",
        "own_starts": False,
        "delimited": "its DAG's jinja_environment_kwargs set variable_end_string, which the triggerer does not carry",
        "delimited_starts": False,
    }
    if not two_ten:  # once its check is rendered, a trigger started on 3.x lets the DAG Airflow loaded for it go
        assert seen["dag_held_before_release"] is True
        assert seen["dag_released"] is True
        assert seen["ids_kept"] == ["starts", "plain", "r", 1]
    # A parked task carries its check in a field of its own: the scheduler sees no start arguments (2.10 would build
    # each try's template context for them), and the parking pool. An opted-out or unreadable task does not park.
    parked_pool = {"carries_check": True, "start_trigger_args": None, "scheduler_start_args": None}
    for task_id in ("plain", "macro"):
        assert seen["parked_serialized"][task_id] == {
            **parked_pool,
            "scheduler_starts": False,
            "scheduler_pool": "smartsensor_parked",
        }, task_id
    for task_id in ("opted_out", "unreadable"):
        assert seen["parked_serialized"][task_id]["carries_check"] is False, task_id
        assert seen["parked_serialized"][task_id]["scheduler_pool"] == "default_pool", task_id
    assert seen["older_parked_entry"] is True
    # A parked try's check, read from the serialized DAG's JSON and rendered with the run's row, is the start
    # trigger's (issue 55); a task on the execute path carries none; a run without a logical date has no ds.
    plain_check = ["NamedHivePartitionSensor", {"partition_names": ["db.t/ds=2026-11-22"]}]
    assert seen["parked"]["plain"] == {"check": plain_check, "trigger_check": plain_check}
    macro = seen["parked"]["macro"]
    assert macro["check"] == macro["trigger_check"]
    assert macro["check"][1] == {"partition_names": ["db.t/ds=2026-11-21"]}
    assert seen["parked"]["opted_out"] is None and seen["parked"]["unreadable"] is None
    assert seen["parked_no_logical_date"] == "UndefinedError"


# A sensor that defers once (Airflow's own time-delta trigger) and records the try's start_date as its execute and
# its resumed method see it.
RESUME_DAG = """
import json
import os
from datetime import datetime, timedelta

try:
    from airflow.sdk import DAG, BaseSensorOperator
    from airflow.providers.standard.triggers.temporal import TimeDeltaTrigger
except ImportError:  # Airflow 2
    from airflow import DAG
    from airflow.sensors.base import BaseSensorOperator
    from airflow.triggers.temporal import TimeDeltaTrigger


def stamp(when):
    return None if when is None else when.isoformat()


def record(**values):
    with open(os.environ["RESUME_RECORD"], "a") as out:
        out.write(json.dumps(values) + "\\n")


class Resumes(BaseSensorOperator):
    def execute(self, context):
        record(execute=stamp(context["ti"].start_date))
        self.defer(trigger=TimeDeltaTrigger(timedelta(seconds=2)), method_name="resumed")

    def resumed(self, context, event=None):
        record(resumed=stamp(context["ti"].start_date))


with DAG("resume_start_date", start_date=datetime(2026, 1, 1), schedule=None, catchup=False):
    Resumes(task_id="resumes")
"""


@pytest.mark.parametrize("venv", airflow_venvs(), ids=version_of)
def test_whether_a_resumed_try_keeps_its_start_date(
    venv: Path, tmp_path: Path, airflow_databases: AirflowDatabases
) -> None:
    """The safety valve counts a sensor's timeout from the try's start. Airflow's database keeps a resumed try's
    start_date (3.3's execution API leaves it alone when the try resumes from a deferral), but the task that
    `airflow dags test` resumes sees its resume time: the valve must not count from it, so the trigger carries
    the first start (test_the_policy_routes_only_airflows_own_enabled_sensors: valve_resume). 2.10's `dags test`
    gives the task no start_date at all, in either method: the valve then counts from the start the trigger carries."""
    record = tmp_path / "record.jsonl"
    env = airflow_env(venv, tmp_path, RESUME_RECORD=str(record))
    (tmp_path / "dags" / "resume_dag.py").write_text(RESUME_DAG)
    airflow_databases.new_sqlite(venv, tmp_path)
    run_airflow(venv, ["dags", "test", "resume_start_date", "2026-11-22"], env, timeout=300)
    seen: dict[str, str | None] = {}
    for line in record.read_text().splitlines():
        seen.update(json.loads(line))
    assert set(seen) == {"execute", "resumed"}, seen
    with sqlite3.connect(tmp_path / "airflow.db") as conn:
        (kept,) = conn.execute("SELECT start_date FROM task_instance WHERE dag_id = 'resume_start_date'").fetchone()
    if version_of(venv).startswith("2."):
        # 2.10's `dags test` records no start at all, and its task sees none: the valve has only the carried one.
        assert seen == {"execute": None, "resumed": None} and kept is None, (seen, kept)
        return
    first, resumed = (datetime.fromisoformat(str(seen[k])) for k in ("execute", "resumed"))
    kept_at = datetime.fromisoformat(kept).replace(tzinfo=timezone.utc)
    assert abs((kept_at - first).total_seconds()) < 1  # the database: the first start, kept across the resume
    assert (resumed - first).total_seconds() >= 2  # what `dags test` gives the resumed task: its resume time
