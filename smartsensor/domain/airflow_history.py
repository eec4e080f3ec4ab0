"""What ``airflow report`` reads of an Airflow metadata database (``ports.AirflowSensorHistory``; the SQL reader is
``adapters.sql.airflow_history``), typed, with no storage behind it: the tries of Hive sensor tasks, their pokes,
and the settings serialized DAGs hold. ``service.savings`` computes the report from them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class TiKey:
    """A task instance: Airflow's (dag_id, task_id, run_id, map_index)."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int


@dataclass(frozen=True)
class Poke:
    """One ``task_reschedule`` row: a poke that found nothing and gave the slot back until ``reschedule_date``."""

    start: datetime
    end: datetime
    reschedule_date: datetime


@dataclass
class SensorTry:
    """One try of a Hive sensor task instance, from ``task_instance`` (the current try) or
    ``task_instance_history`` (earlier ones)."""

    key: TiKey
    try_number: int
    operator: str
    state: str | None
    start: datetime | None
    end: datetime | None
    queued: datetime | None
    next_method: str | None
    pokes: list[Poke] = field(default_factory=list)  # its task_reschedule rows, oldest first


@dataclass(frozen=True)
class TaskSettings:
    """What a serialized DAG says of one sensor task (None: not there)."""

    poke_interval: float | None
    reschedule: bool | None


@dataclass
class AirflowHistory:
    """What the report reads: every try of the period, rendered fields per task instance, settings per task."""

    airflow: int  # the schema's major version: 2 or 3
    tries: list[SensorTry]
    rendered: dict[TiKey, Any]
    settings: dict[tuple[str, str], TaskSettings]

    @property
    def poke_durations_recorded(self) -> bool:
        """Whether ``task_reschedule`` rows hold each poke's own start and end (2.x; 3.x stamps them at the end)."""
        return self.airflow < 3
