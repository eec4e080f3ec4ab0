"""Run inside an Airflow venv (not by pytest): checks the provider against the installed Airflow and prints one
JSON line with what it saw, for tests/airflow/test_provider_in_airflow.py to assert on."""

from __future__ import annotations

import importlib
import json
import sys

import airflow

from smartsensor_airflow import sensors
from smartsensor_airflow.triggers import SmartSensorTrigger

out: dict = {"airflow": airflow.__version__}

trigger = SmartSensorTrigger(
    {"dag_id": "d", "task_id": "t", "run_id": "r", "map_index": -1, "try_number": 2}, "smartsensor_default", 3
)
classpath, kwargs = trigger.serialize()
module, _, name = classpath.rpartition(".")
rebuilt = getattr(importlib.import_module(module), name)(**kwargs)  # what the triggerer does with a trigger row
out["serialize"] = {
    "classpath": classpath,
    "kwargs": kwargs,
    "round_trip_equal": rebuilt.serialize() == (classpath, kwargs),
}
out["json_kwargs"] = json.loads(json.dumps(kwargs)) == kwargs

named = sensors.NamedHivePartitionSensor(
    task_id="n", partition_names=["db.t/ds={{ ds }}"], poke_interval=30, timeout=600, soft_fail=True
)
hive = sensors.HivePartitionSensor(task_id="h", table="events", partition="ds='{{ ds }}' AND hr='00'", schema="db")
out["template_fields"] = {"named": list(named.template_fields), "hive": list(hive.template_fields)}
out["named_exec"] = named.exec_values()
out["named_poll_interval"] = named.smartsensor_poll_interval
hive.partition = "ds='2026-11-22' AND hr='00'"
out["hive_persist"] = hive.persist_values()
# A string is a whole-list template until rendered (Hive provider 9.6.1+): refused only once rendered.
text_names = sensors.NamedHivePartitionSensor(task_id="bad", partition_names="db.t/ds=1")  # type: ignore[arg-type]
try:
    text_names.persist_values()
    out["str_partition_names"] = "accepted"
except TypeError as exc:
    out["str_partition_names"] = f"TypeError: {exc}"
out["parse_partition_name"] = [
    list(sensors.NamedHivePartitionSensor.parse_partition_name(n)) for n in ("db.t/ds=1/hr=2", "t/ds=1", "a.b.c/x=1")
]
try:
    sensors.NamedHivePartitionSensor.parse_partition_name("db.t")
    out["parse_bad"] = "accepted"
except ValueError as exc:
    out["parse_bad"] = f"ValueError: {exc}"
out["default_partition"] = sensors.HivePartitionSensor(task_id="d", table="t", partition=None).partition
out["end_from_trigger"] = named.end_from_trigger

# The provider never imports smartsensor itself (it could not: Airflow 2.10 pins SQLAlchemy < 2).
out["smartsensor_imported"] = sorted(m for m in sys.modules if m == "smartsensor" or m.startswith("smartsensor."))
from airflow.providers_manager import ProvidersManager  # noqa: E402 - after the sys.modules snapshot above, which it would change

out["provider_listed"] = "smartsensor-airflow" in ProvidersManager().providers
print(json.dumps(out))
