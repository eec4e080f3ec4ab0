"""Airflow names that moved between 2.10 and 3.x, imported from where the running Airflow has them."""

from __future__ import annotations

try:  # Airflow 3: the Task SDK
    from airflow.sdk import BaseHook, BaseSensorOperator
except ImportError:  # Airflow 2.10
    from airflow.hooks.base import BaseHook
    from airflow.sensors.base import BaseSensorOperator

from airflow.exceptions import AirflowException, AirflowFailException, AirflowSkipException
from airflow.triggers.base import BaseTrigger, TriggerEvent

__all__ = [
    "AirflowException",
    "AirflowFailException",
    "AirflowSkipException",
    "BaseHook",
    "BaseSensorOperator",
    "BaseTrigger",
    "TriggerEvent",
]
