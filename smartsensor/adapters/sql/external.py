"""Queries on the keys of another scheduler's tasks (``external_task``) and the task instances they map to."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable, Sequence

from sqlalchemy import Connection, and_, insert, or_, select, update

from smartsensor.domain.keys import ExternalKey
from smartsensor.schema.models import ExternalTask, TaskInstance

EX = ExternalTask.__table__
TI = TaskInstance.__table__
STATES_CHUNK = 500  # keys per statement when reading states: 4 parameters each, far below SQLite's limit


def get_external(conn: Connection, key: ExternalKey, for_update: bool = False) -> dict[str, Any] | None:
    """The mapping row of ``key`` (1 statement; on Postgres ``for_update`` locks it until commit)."""
    query = select(EX).where(EX.c.dag_id == key.dag_id, EX.c.task_id == key.task_id, EX.c.run_id == key.run_id,
                             EX.c.map_index == key.map_index)
    row = conn.execute(query.with_for_update() if for_update else query).mappings().first()
    return dict(row) if row else None


def insert_external(conn: Connection, key: ExternalKey, try_number: int, logical_date: datetime | None,
                    ti_task_id: str, ti_execution_date: datetime, now: datetime) -> None:
    """Map a new key to its first task instance (1 statement; IntegrityError if another request did it first)."""
    conn.execute(insert(EX).values(dag_id=key.dag_id, task_id=key.task_id, run_id=key.run_id, map_index=key.map_index,
                                   try_number=try_number, logical_date=logical_date, ti_task_id=ti_task_id,
                                   ti_execution_date=ti_execution_date, registered_at=now))


def move_external(conn: Connection, key: ExternalKey, seen_try: int, try_number: int, ti_task_id: str,
                  ti_execution_date: datetime, now: datetime) -> bool:
    """Point ``key`` at the task instance of a new try, if nobody moved it since ``seen_try`` was read (1 statement)."""
    return conn.execute(update(EX).where(
        EX.c.dag_id == key.dag_id, EX.c.task_id == key.task_id, EX.c.run_id == key.run_id,
        EX.c.map_index == key.map_index, EX.c.try_number == seen_try,
    ).values(try_number=try_number, ti_task_id=ti_task_id, ti_execution_date=ti_execution_date,
             registered_at=now)).rowcount == 1


def external_states(conn: Connection, keys: Sequence[ExternalKey]) -> dict[ExternalKey, dict[str, Any]]:
    """{key: its mapping's try_number and its task instance's state, error, hashcode} for the keys that are
    mapped. One statement per STATES_CHUNK keys."""
    out: dict[ExternalKey, dict[str, Any]] = {}
    for chunk in _chunks(list(dict.fromkeys(keys)), STATES_CHUNK):
        match = or_(*(and_(EX.c.dag_id == k.dag_id, EX.c.task_id == k.task_id, EX.c.run_id == k.run_id,
                           EX.c.map_index == k.map_index) for k in chunk))
        rows = conn.execute(select(EX.c.dag_id, EX.c.task_id, EX.c.run_id, EX.c.map_index, EX.c.try_number,
                                   TI.c.state, TI.c.error, TI.c.hashcode, TI.c.try_number.label("ti_try"))
                            .select_from(EX.join(TI, and_(TI.c.dag_id == EX.c.dag_id, TI.c.task_id == EX.c.ti_task_id,
                                                          TI.c.execution_date == EX.c.ti_execution_date)))
                            .where(match)).mappings()
        for r in rows:
            out[ExternalKey(r["dag_id"], r["task_id"], r["run_id"], r["map_index"])] = {
                "try_number": r["try_number"], "state": r["state"], "error": r["error"], "hashcode": r["hashcode"]}
    return out


def _chunks(items: list[Any], size: int) -> Iterable[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]
