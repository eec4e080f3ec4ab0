"""What smartsensor checks for a task of each of Airflow's Hive sensor classes, read from the task's own
attributes (the same names on Airflow's sensors, on the drop-ins and on tasks routed by the cluster policy).

``check_of(class_name, task)`` → a ``RegisteredSensor``, ``(smartsensor class, persist values)``: the sensor class
the service knows the check by, and the rendered arguments it stores. A ``MetastorePartitionSensor`` waits for one
partition by its full name, so it is registered as a one-partition ``NamedHivePartitionSensor``: identical waits of
the two classes share one vigil (the service's group of tasks waiting on one distinct check).
"""

from __future__ import annotations

from typing import Any, Callable

from smartsensor_airflow.hive_filter import parse_partition_filter, split_table

# The sensor a task is registered as: (smartsensor class name, persist values), the ``sensor`` of a registration
# (``POST /api/v1/tasks``). Not smartsensor's ``sensors.checks.Check`` (one partition or path a sensor waits for).
RegisteredSensor = tuple[str, dict[str, Any]]


def named_check(task: Any) -> RegisteredSensor:
    """``partition_names`` (``"db.table/ds=1"``), a list once rendered."""
    names = task.partition_names
    if isinstance(names, str):
        raise TypeError("partition_names must be an array of strings")
    return "NamedHivePartitionSensor", {"partition_names": list(names)}


def hive_check(task: Any) -> RegisteredSensor:
    """``schema``, ``table`` (``db.table`` wins over ``schema``) and the ``partition`` filter's equalities."""
    table = ".".join(split_table(task.table, task.schema))
    return "HivePartitionSensor", {"table": table, "partition": parse_partition_filter(task.partition)}


def metastore_check(task: Any) -> RegisteredSensor:
    """``schema``, ``table`` (``db.table`` wins, as the Hive provider splits it) and one full ``partition_name``."""
    table = ".".join(split_table(task.table, task.schema))
    name = task.partition_name
    if not isinstance(name, str) or "=" not in name:
        raise TypeError(f"partition_name must be a partition's full name such as 'ds=2026-11-22', got {name!r}")
    return "NamedHivePartitionSensor", {"partition_names": [f"{table}/{name}"]}


def success_file_check(task: Any) -> RegisteredSensor:
    """``path``: smartsensor's own success-file sensor (no Hive provider counterpart)."""
    return "SuccessFileSensor", {"path": task.path}


# The attributes each check reads: what a task that starts in the triggerer hands its trigger, to render there.
CHECK_FIELDS: dict[str, tuple[str, ...]] = {
    "NamedHivePartitionSensor": ("partition_names",),
    "HivePartitionSensor": ("table", "schema", "partition"),
    "MetastorePartitionSensor": ("table", "schema", "partition_name"),
    "SuccessFileSensor": ("path",),
}

CHECKS: dict[str, Callable[[Any], RegisteredSensor]] = {
    "NamedHivePartitionSensor": named_check,
    "HivePartitionSensor": hive_check,
    "MetastorePartitionSensor": metastore_check,
    "SuccessFileSensor": success_file_check,
}


def check_of(class_name: str, task: Any) -> RegisteredSensor:
    """The check of ``task``, a sensor of Airflow's class ``class_name``. Raises TypeError or
    UnsupportedPartitionFilter (a ValueError) when its rendered arguments cannot be checked by smartsensor."""
    return CHECKS[class_name](task)
