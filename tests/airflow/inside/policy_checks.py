"""Run inside an Airflow venv (not by pytest): the cluster policy's routing and settings, and the safety valve's
wait, against the installed Airflow and Hive provider; prints one JSON line for test_provider_in_airflow.py."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import airflow

try:
    from airflow.sdk import DAG
except ImportError:  # Airflow 2
    from airflow import DAG
from airflow.exceptions import AirflowSensorTimeout, AirflowSkipException
from airflow.providers.apache.hive.sensors.hive_partition import HivePartitionSensor
from airflow.providers.apache.hive.sensors.named_hive_partition import NamedHivePartitionSensor

from smartsensor_airflow import policy, sensors
from smartsensor_airflow.fallback import seconds_left, wait_classically
from smartsensor_airflow.triggers import UNREACHABLE, SmartSensorTrigger

out: dict = {"airflow": airflow.__version__}


class Conf:
    """Airflow's conf.get(section, key, fallback=…) over a dict of [smartsensor] settings."""

    def __init__(self, **values: str) -> None:
        self.values = values

    def get(self, section: str, key: str, fallback: object = None) -> object:
        return self.values.get(key, fallback) if section == "smartsensor" else fallback


def setting_error(**values: str) -> str:
    try:
        policy.PolicySettings.read(Conf(**values))
    except policy.PolicySettingError as exc:
        return str(exc)
    return "accepted"


out["defaults"] = repr(policy.PolicySettings.read(Conf()))
out["enabled"] = policy.PolicySettings.read(
    Conf(use_smart_sensor="True", sensors_enabled="HivePartitionSensor")
).enabled
out["errors"] = {
    "use_smart_sensor": setting_error(use_smart_sensor="maybe"),
    "sensors_enabled": setting_error(sensors_enabled="NamedHivePartitionSensor, S3KeySensor"),
    "poll_interval": setting_error(poll_interval="soon"),
    "zero_interval": setting_error(poll_interval="0"),
}


class MySensor(NamedHivePartitionSensor):
    """A team's subclass: its own poke may do more, so the policy leaves it alone."""


def build(dag_id: str, **dag_args: object) -> DAG:
    with DAG(dag_id, start_date=datetime(2026, 1, 1), schedule=None, **dag_args) as dag:
        NamedHivePartitionSensor(task_id="named", partition_names=["db.t/ds={{ ds }}"], poke_interval=30)
        HivePartitionSensor(task_id="filter", table="t", schema="db", partition="ds='1'")
        NamedHivePartitionSensor(task_id="param_off", partition_names=["db.t/ds=1"], params={"smartsensor": False})
        MySensor(task_id="subclass", partition_names=["db.t/ds=1"])
        sensors.NamedHivePartitionSensor(task_id="drop_in", partition_names=["db.t/ds=1"])
    return dag


def routed(dag: DAG) -> dict[str, str]:
    for task in dag.tasks:
        policy.task_policy(task)
    return {t.task_id: t.operator_name for t in dag.tasks}


os.environ["AIRFLOW__SMARTSENSOR__USE_SMART_SENSOR"] = "False"
out["disabled"] = routed(build("off"))
os.environ["AIRFLOW__SMARTSENSOR__USE_SMART_SENSOR"] = "True"
os.environ["AIRFLOW__SMARTSENSOR__POLL_INTERVAL"] = "4"
os.environ["AIRFLOW__SMARTSENSOR__FALLBACK_GRACE"] = "30"
dag = build("on")
out["enabled_routes"] = routed(dag)
out["tagged_off"] = routed(build("tagged", tags=["smartsensor:off"]))
named = dag.get_task("named")
out["routed_named"] = {
    "is_airflows": isinstance(named, NamedHivePartitionSensor),
    "class": f"{type(named).__module__}.{type(named).__name__}",
    "template_fields": list(named.template_fields),
    "parse": list(named.parse_partition_name("db.t/ds=1")),
    "settings": [named.smartsensor_conn_id, named.smartsensor_poll_interval, named.smartsensor_fallback_grace],
    "persist": named.persist_values(),
    "again": policy.route(named, policy.PolicySettings.read()),  # a routed task is not routed twice
}
out["routed_filter_persist"] = dag.get_task("filter").persist_values()
# A setup that raises (here a poke_interval set after construction to what no sensor can use) must leave the task
# exactly as Airflow's own: its class, and none of smartsensor's attributes.
broken = build("half").get_task("named")
broken.poke_interval = "soon"
logging.disable(logging.CRITICAL)  # the policy logs the failure; the import must not fail
policy.task_policy(broken)
logging.disable(logging.NOTSET)
out["setup_raises"] = {
    "operator": broken.operator_name,
    "routed": isinstance(broken, sensors.SmartSensorMixin),
    "class": f"{type(broken).__module__}.{type(broken).__name__}",
    "set": sorted(n for n in vars(broken) if n.startswith("smartsensor_") or n == "end_from_trigger"),
}
os.environ["AIRFLOW__SMARTSENSOR__POLL_INTERVAL"] = "never"
logging.disable(logging.CRITICAL)  # the policy logs the bad setting; the import must not fail
out["bad_setting"] = routed(build("bad"))
logging.disable(logging.NOTSET)


def valve(answers: list[bool], left: float, soft_fail: bool = False) -> str:
    """wait_classically with a clock that advances by each sleep: what it ended with, and the pokes made."""
    clock = [0.0]
    pokes = iter(answers)
    try:
        wait_classically(
            lambda: next(pokes),
            poke_interval=10,
            left=left,
            soft_fail=soft_fail,
            why="test",
            task="t",
            sleep=lambda s: clock.__setitem__(0, clock[0] + s),
            clock=lambda: clock[0],
        )
        return f"found at {clock[0]:g} s"
    except (AirflowSensorTimeout, AirflowSkipException) as exc:
        return f"{type(exc).__name__} at {clock[0]:g} s"


out["valve"] = {
    "found": valve([False, False, True], left=100),
    "timeout": valve([False] * 10, left=25),
    "soft_fail": valve([False] * 10, left=25, soft_fail=True),
}
now = datetime(2026, 11, 25, 12, 0, tzinfo=timezone.utc)
out["seconds_left"] = [
    seconds_left(600, now - timedelta(seconds=100), now),
    seconds_left(600, (now - timedelta(seconds=700)).replace(tzinfo=None), now),
    seconds_left(600, None, now),
]
# The valve after a resume: a resumed task whose start_date is its resume time (as `airflow dags test` gives it on
# 3.x) counts the timeout from the start its trigger carried, not from the resume.
first = datetime.now(timezone.utc) - timedelta(seconds=500)
resumed = SimpleNamespace(start_date=datetime.now(timezone.utc))
drop_in = sensors.NamedHivePartitionSensor(task_id="valve_resume", partition_names=["db.t/ds=1"], timeout=600)
trigger = SmartSensorTrigger(
    {"dag_id": "d", "task_id": "t", "run_id": "r", "map_index": -1, "try_number": 1},
    settle=0,
    try_started=first.timestamp(),
)
event = asyncio.run(trigger.resume(0.0, UNREACHABLE, "out of reach")).payload
out["valve_resume"] = {
    "carried": event.get("try_started") == first.timestamp(),
    "left_from_resume": round(drop_in.valve_seconds_left({"ti": resumed})),
    "left_from_first": round(drop_in.valve_seconds_left({"ti": resumed}, event.get("try_started"))),
    "left_when_start_date_kept": round(
        drop_in.valve_seconds_left({"ti": SimpleNamespace(start_date=first)}, event.get("try_started"))
    ),
}


# A trigger Airflow's scheduler timed out (it does at the try's execution_timeout, racing the trigger's own event):
# the try ends as that timeout says, as the trigger's event would have it end.
AIRFLOWS_ERROR = "Trigger timeout" if airflow.__version__.startswith("3.") else "Trigger/execution timeout"


def timed_out(task: object, error: str = AIRFLOWS_ERROR) -> str:
    try:
        task.resume_execution("__fail__", {"error": error}, {})  # type: ignore[attr-defined]
    except BaseException as exc:  # noqa: BLE001 - which one is what is checked (AirflowTaskTimeout is no Exception)
        return type(exc).__name__
    return "ended"


def limited(**kw: Any) -> sensors.NamedHivePartitionSensor:
    return sensors.NamedHivePartitionSensor(task_id="limited", partition_names=["db.t/ds=1"], retries=1, **kw)


with DAG("limited", start_date=datetime(2026, 1, 1), schedule=None):
    routed_limited = NamedHivePartitionSensor(
        task_id="routed_limited", partition_names=["db.t/ds=1"], execution_timeout=timedelta(seconds=8), retries=1
    )
policy.route(routed_limited, policy.PolicySettings(enabled=True))
out["trigger_timed_out"] = {
    "execution_timeout": timed_out(limited(timeout=600, execution_timeout=timedelta(seconds=8))),
    "execution_timeout_soft_fail": timed_out(
        limited(timeout=600, execution_timeout=timedelta(seconds=8), soft_fail=True)
    ),
    "routed_execution_timeout": timed_out(routed_limited),
    "backstop": timed_out(limited(timeout=600)),
    "backstop_before_execution_timeout": timed_out(limited(timeout=5, execution_timeout=timedelta(hours=1))),
    "trigger_failure": timed_out(limited(timeout=600), error="Trigger failure"),
}
print(json.dumps(out))
