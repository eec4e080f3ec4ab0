"""What ``airflow report`` reads of an Airflow metadata database (``ports.AirflowSensorHistory``; the SQL reader is
``adapters.sql.airflow_history``, its memory twin ``adapters.memory_airflow_history``), typed, with no storage behind
it: the tries of Hive sensor tasks, their pokes, and the settings serialized DAGs hold; and what both readers make of
Airflow's rows the same way (the sensor operators, a try read twice, a serialized DAG's JSON, UTC times).
``service.savings`` computes the report from them."""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterator, Mapping

SENSOR_OPERATORS = ("NamedHivePartitionSensor", "HivePartitionSensor", "MetastorePartitionSensor")


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


def sensor_try(row: Mapping[str, Any]) -> SensorTry:
    """A try as read from its ``task_instance`` or ``task_instance_history`` row (by column name)."""
    return SensorTry(
        TiKey(row["dag_id"], row["task_id"], row["run_id"], int(row["map_index"])),
        int(row["try_number"] or 0),
        row["operator"],
        row["state"],
        as_utc(row["start_date"]),
        as_utc(row["end_date"]),
        as_utc(row["queued_dttm"]),
        row["next_method"],
    )


def merge_tries(current: list[SensorTry], earlier: list[SensorTry]) -> list[SensorTry]:
    """Every try once: a try in the history (a finished try's record) wins over a task instance row left at the
    same try number (cleared, not started again)."""
    tries: dict[tuple[TiKey, int], SensorTry] = {(t.key, t.try_number): t for t in earlier}
    for one in current:
        tries.setdefault((one.key, one.try_number), one)
    return sorted(
        tries.values(), key=lambda t: (t.key.dag_id, t.key.task_id, t.key.run_id, t.key.map_index, t.try_number)
    )


def serialized_settings(data: Any, compressed: bytes | None) -> Iterator[tuple[str, TaskSettings]]:
    """(task_id, its settings) of the sensors a ``serialized_dag`` row holds: its ``data`` (JSON), else its
    ``data_compressed`` (zlib)."""
    return _sensor_settings(_serialized(data, compressed))


def _serialized(data: Any, compressed: bytes | None) -> Any:
    if data is None and compressed is not None:
        try:
            return json.loads(zlib.decompress(bytes(compressed)))
        except (zlib.error, ValueError):
            return None
    return parse_json(data)


def _sensor_settings(doc: Any) -> Iterator[tuple[str, TaskSettings]]:
    """The tasks of a serialized DAG (``{"__version": …, "dag": {"tasks": [{"__type": "operator", "__var": {…}}]}}``)
    with a poke_interval or a mode. Neither 2.10.5 nor 3.3.2 serializes poke_interval; a sensor class that adds it
    to its serialized fields is read."""
    dag = doc.get("dag") if isinstance(doc, dict) else None
    tasks = dag.get("tasks") if isinstance(dag, dict) else None
    for task in tasks if isinstance(tasks, list) else []:
        var = task.get("__var", task) if isinstance(task, dict) else None
        if not isinstance(var, dict) or not isinstance(var.get("task_id"), str):
            continue
        interval = _seconds(var.get("poke_interval"))
        reschedule = var.get("reschedule")
        if interval is not None or isinstance(reschedule, bool):
            yield var["task_id"], TaskSettings(interval, reschedule if isinstance(reschedule, bool) else None)


def _seconds(value: Any) -> float | None:
    """A serialized number of seconds, or a serialized timedelta (``{"__type": "timedelta", "__var": seconds}``)."""
    if isinstance(value, dict) and value.get("__type") == "timedelta":
        value = value.get("__var")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1e9:
        return float(value)
    return None


def parse_json(value: Any) -> Any:
    """A JSON column's value: parsed from text or bytes (None when it is not JSON), else as the driver gave it."""
    if isinstance(value, (bytes, str)):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def as_utc(value: Any) -> datetime | None:
    """An aware UTC datetime (Airflow writes UTC; SQLite gives it back naive)."""
    if not isinstance(value, datetime):
        return None
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)
