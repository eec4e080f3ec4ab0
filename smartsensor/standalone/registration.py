"""`submit`'s registration (the standalone door): a DAG file's sensors, rendered for one execution date, become
task_instance rows (``service/task_rows``: attr_dict, exec_dict, hashcode, shardcode), routed to smart_pending (shard
workers) or scheduled (classic mode), all in one transaction."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable

from smartsensor.config import Config
from smartsensor.domain.clock import as_utc, iso
from smartsensor.domain.rows import TaskRow
from smartsensor.domain.states import State
from smartsensor.ports import InsertConflict, RegistrationStore
from smartsensor.sensors.base import BaseSensor
from smartsensor.sensors.errors import SensorDefinitionError
from smartsensor.sensors.validation import validate_id
from smartsensor.service.task_rows import served_here, task_row

log = logging.getLogger(__name__)


EARLIEST_DATE = datetime(1900, 1, 1, tzinfo=timezone.utc)
LATEST_DATE = datetime(2999, 12, 31, tzinfo=timezone.utc)


def validate_execution_date(value: Any) -> datetime:
    """An execution date a task can be registered for: a day (midnight UTC) between 1900-01-01 and 2999-12-31, as
    an aware UTC datetime (a naive one is read as UTC: a DAG file's or a caller's plain day).

    Bounded so that templates (``prev_ds``, ``next_ds``, ``macros.ds_add``) and stored dates never
    overflow; a time of day is refused because the same DAG on the same day would otherwise register
    a second set of task instances.
    """
    if not isinstance(value, datetime):
        raise SensorDefinitionError(f"execution date must be a date, got {type(value).__name__}")
    if value.tzinfo is not None and value.utcoffset() != timedelta(0):
        raise SensorDefinitionError(f"execution date must be a day in UTC, got {value.isoformat()}")
    value = as_utc(value)
    if value.time() != datetime.min.time():
        raise SensorDefinitionError(f"execution date must be a day (YYYY-MM-DD, no time of day), got {iso(value)}")
    if not EARLIEST_DATE <= value <= LATEST_DATE:
        raise SensorDefinitionError(
            f"execution date must be between {EARLIEST_DATE.date()} and {LATEST_DATE.date()}, got {value.date()}"
        )
    return value


@dataclass(frozen=True)
class Registered:
    """Outcome of registering one task instance."""

    dag_id: str
    task_id: str
    execution_date: datetime
    state: str
    hashcode: int
    shardcode: int
    created: bool
    reason: str


def route(sensor: BaseSensor, cfg: Config) -> tuple[State, str]:
    """(state, reason): smart_pending when the shard workers serve ``sensor`` (``task_rows.served_here``), else
    scheduled, a classic run, with the reason why."""
    served, reason = served_here(sensor, cfg)
    return (State.SMART_PENDING if served else State.SCHEDULED), reason


def build_row(
    sensor: BaseSensor,
    dag_id: str,
    execution_date: datetime,
    cfg: Config,
    fileloc: str | None = None,
) -> tuple[TaskRow, str]:
    """The task_instance row for ``sensor`` on ``execution_date`` (its persist fields rendered for that day, as
    templates) and the routing reason."""
    dag_id = validate_id("dag_id", dag_id)
    rendered = sensor.rendered(execution_date)
    state, reason = route(rendered, cfg)
    return task_row(rendered, dag_id, execution_date, state, cfg, fileloc), reason


def register(
    store: RegistrationStore,
    sensors: Iterable[tuple[str, BaseSensor]],
    execution_date: datetime,
    cfg: Config,
    clear: bool = False,
    fileloc: str | None = None,
) -> list[Registered]:
    """Register (dag_id, sensor) pairs for one execution date, idempotently, in ONE transaction.

    Every row is built and validated before the store is touched; then one statement finds the
    rows that exist and the new ones are inserted in bulk, so a registration killed or failing half-way
    leaves nothing behind, on SQLite as on Postgres. An existing row is left as it is (a waiting or
    finished task is never reset) unless ``clear``.
    """
    execution_date = validate_execution_date(execution_date)
    built = [build_row(sensor, dag_id, execution_date, cfg, fileloc) for dag_id, sensor in sensors]
    seen: set[tuple[str, str]] = set()
    for row, _ in built:
        key = (row.dag_id, row.task_id)
        if key in seen:
            raise SensorDefinitionError(f"task {row.task_id!r} of DAG {row.dag_id!r} is given twice")
        seen.add(key)
    try:
        return _register_rows(store, built, execution_date, clear)
    except InsertConflict:  # another registration inserted some of these rows meanwhile: they exist now
        log.info("another registration inserted some of these task instances at the same time; retrying once")
        return _register_rows(store, built, execution_date, clear)


def registered_states(store: RegistrationStore, dag_id: str, execution_date: datetime) -> dict[str, str]:
    """{task_id: state} of the task instances of ``dag_id`` on ``execution_date``: what ``register`` made of its
    sensors, as it stands now (the benchmark waits on it for its probes' ends). 1 statement."""
    found = store.read_states(execution_date, [dag_id])
    return {task_id: state for (_, task_id), state in found.items()}


def _register_rows(
    store: RegistrationStore, built: list[tuple[TaskRow, str]], execution_date: datetime, clear: bool
) -> list[Registered]:
    """Register the built rows (``RegistrationStore.register_rows``, one transaction) and say what became of each."""
    existing = store.register_rows([row for row, _ in built], execution_date, clear)
    out: list[Registered] = []
    for row, reason in built:
        key = (row.dag_id, row.task_id)
        state, created = row.state, key not in existing
        if not created:
            if clear:
                reason = f"cleared; {reason}"
            else:
                state, reason = existing[key], "already registered"
        out.append(
            Registered(row.dag_id, row.task_id, execution_date, state, row.hashcode, row.shardcode, created, reason)
        )
    return out
