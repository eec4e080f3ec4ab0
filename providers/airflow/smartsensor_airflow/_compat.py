"""Airflow names that moved between 2.10 and 3.x, imported from where the running Airflow has them."""

from __future__ import annotations

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
    "has_listeners",
]
