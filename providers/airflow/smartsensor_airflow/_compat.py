"""Airflow names that moved between 2.10 and 3.x, imported from where the running Airflow has them."""

from __future__ import annotations

import importlib
from typing import Any

try:  # Airflow 3: the Task SDK
    from airflow.sdk import BaseHook, BaseSensorOperator
except ImportError:  # Airflow 2.10
    from airflow.hooks.base import BaseHook
    from airflow.sensors.base import BaseSensorOperator

from airflow.exceptions import (
    AirflowException,
    AirflowSensorTimeout,
    AirflowSkipException,
    AirflowTaskTimeout,
)
from airflow.triggers.base import BaseTrigger, TaskSkippedEvent, TaskSuccessEvent, TriggerEvent

try:  # Airflow 3.x: the Task SDK's view of airflow.cfg (workers may not have airflow-core's)
    from airflow.sdk.configuration import conf as airflow_conf
except ImportError:
    from airflow.configuration import conf as airflow_conf

# Where Airflow's Hive provider defines its sensors.
HIVE_SENSOR_MODULES = {
    "NamedHivePartitionSensor": "airflow.providers.apache.hive.sensors.named_hive_partition",
    "HivePartitionSensor": "airflow.providers.apache.hive.sensors.hive_partition",
    "MetastorePartitionSensor": "airflow.providers.apache.hive.sensors.metastore_partition",
}


def hive_sensor_class(name: str) -> Any:
    """Airflow's own Hive sensor class ``name``; AirflowException with the install hint when the Hive provider is
    not installed in this environment."""
    module = HIVE_SENSOR_MODULES.get(name)
    if module is None:
        raise AirflowException(f"{name} has no counterpart in Airflow's Hive provider")
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as exc:
        raise AirflowException(
            f"checking without smartsensor needs Airflow's Hive provider where the task runs "
            f"(pip install apache-airflow-providers-apache-hive): {exc}"
        ) from None


def has_listeners() -> bool:
    """Whether this process has listener plugins (OpenLineage…): Airflow refuses a DAG whose task ends from the
    triggerer then, because listeners would not hear of that end."""
    try:
        from airflow.listeners.listener import get_listener_manager
    except ImportError:
        return False
    return bool(get_listener_manager().has_listeners)


__all__ = [
    "AirflowException",
    "AirflowSensorTimeout",
    "AirflowSkipException",
    "AirflowTaskTimeout",
    "BaseHook",
    "BaseSensorOperator",
    "BaseTrigger",
    "TaskSkippedEvent",
    "TaskSuccessEvent",
    "TriggerEvent",
    "airflow_conf",
    "has_listeners",
    "hive_sensor_class",
]
