"""Queries on the keys of another scheduler's tasks (``external_task``) and the task instances they map to.
``register_try`` and ``read_external_states`` are the external door's operations, each in a transaction or
connection of its own."""

from __future__ import annotations

import json
from datetime import datetime
from typing import NamedTuple, Sequence

from sqlalchemy import Connection, Engine, insert, select, text, update
from sqlalchemy.exc import IntegrityError

from smartsensor.adapters.sql import channels as channel_sql, tasks as task_sql
from smartsensor.domain.keys import ExternalKey
from smartsensor.domain.rows import ExternalRow, ExternalState, TaskRow
from smartsensor.domain.states import State
from smartsensor.schema.models import ExternalTask, TaskInstance

EX = ExternalTask.__table__
TI = TaskInstance.__table__


def get_external(conn: Connection, key: ExternalKey, for_update: bool = False) -> ExternalRow | None:
    """The mapping row of ``key`` (1 statement; on Postgres ``for_update`` locks it until commit)."""
    query = select(EX).where(
        EX.c.dag_id == key.dag_id,
        EX.c.task_id == key.task_id,
        EX.c.run_id == key.run_id,
        EX.c.map_index == key.map_index,
    )
    row = conn.execute(query.with_for_update() if for_update else query).first()
    return ExternalRow._make(row) if row else None


def insert_external(
    conn: Connection,
    key: ExternalKey,
    try_number: int,
    logical_date: datetime | None,
    ti_task_id: str,
    ti_execution_date: datetime,
    now: datetime,
) -> None:
    """Map a new key to its first task instance (1 statement; IntegrityError if another request did it first)."""
    conn.execute(
        insert(EX).values(
            dag_id=key.dag_id,
            task_id=key.task_id,
            run_id=key.run_id,
            map_index=key.map_index,
            try_number=try_number,
            logical_date=logical_date,
            ti_task_id=ti_task_id,
            ti_execution_date=ti_execution_date,
            registered_at=now,
        )
    )


def move_external(
    conn: Connection,
    key: ExternalKey,
    seen_try: int,
    try_number: int,
    ti_task_id: str,
    ti_execution_date: datetime,
    now: datetime,
) -> bool:
    """Point ``key`` at the task instance of a new try, if nobody moved it since ``seen_try`` was read (1 statement)."""
    return (
        conn.execute(
            update(EX)
            .where(
                EX.c.dag_id == key.dag_id,
                EX.c.task_id == key.task_id,
                EX.c.run_id == key.run_id,
                EX.c.map_index == key.map_index,
                EX.c.try_number == seen_try,
            )
            .values(
                try_number=try_number, ti_task_id=ti_task_id, ti_execution_date=ti_execution_date, registered_at=now
            )
        ).rowcount
        == 1
    )


# The keys go in as arrays (PostgreSQL) or one JSON document (SQLite) and are joined against the primary key:
# one statement whatever the number of keys, no OR chain to plan, nothing per key on this side.
_STATES_FROM_PG = """
    unnest(CAST(:dags AS text[]), CAST(:tasks AS text[]), CAST(:runs AS text[]), CAST(:maps AS integer[]))
        AS k(dag_id, task_id, run_id, map_index)
    JOIN external_task e ON e.dag_id = k.dag_id AND e.task_id = k.task_id AND e.run_id = k.run_id
                        AND e.map_index = k.map_index"""
_STATES_FROM_SQLITE = """
    json_each(:keys) AS k
    JOIN external_task e ON e.dag_id = json_extract(k.value, '$[0]') AND e.task_id = json_extract(k.value, '$[1]')
                        AND e.run_id = json_extract(k.value, '$[2]') AND e.map_index = json_extract(k.value, '$[3]')"""
_STATES_SELECT = """
    SELECT e.dag_id, e.task_id, e.run_id, e.map_index, e.try_number, t.state, t.error, t.hashcode
    FROM {keys}
    JOIN task_instance t
      ON t.dag_id = e.dag_id AND t.task_id = e.ti_task_id AND t.execution_date = e.ti_execution_date"""
STATES_PG = text(_STATES_SELECT.format(keys=_STATES_FROM_PG))
STATES_SQLITE = text(_STATES_SELECT.format(keys=_STATES_FROM_SQLITE))


def external_states(conn: Connection, keys: Sequence[ExternalKey]) -> dict[ExternalKey, ExternalState]:
    """{key: its mapping's try_number and its task instance's state, error, hashcode} for the keys that are
    mapped, in one statement."""
    unique = list(dict.fromkeys(keys))
    if not unique:
        return {}
    if conn.dialect.name == "postgresql":
        rows = conn.execute(
            STATES_PG,
            {
                "dags": [k.dag_id for k in unique],
                "tasks": [k.task_id for k in unique],
                "runs": [k.run_id for k in unique],
                "maps": [k.map_index for k in unique],
            },
        )
    else:
        rows = conn.execute(STATES_SQLITE, {"keys": json.dumps([list(k) for k in unique])})
    return {
        ExternalKey(d, t, r, m): ExternalState(n, state, error, hashcode)
        for d, t, r, m, n, state, error, hashcode in rows
    }


def read_external_states(engine: Engine, keys: Sequence[ExternalKey]) -> dict[ExternalKey, ExternalState]:
    """``external_states`` on a connection of its own (1 statement)."""
    with engine.connect() as conn:
        return external_states(conn, keys)


class TryRegistration(NamedTuple):
    """What ``register_try`` found: the try the key was at before (None: a new key), and that try's task instance
    when it is the try registered (then nothing was written)."""

    registered_try: int | None
    task: TaskRow | None


def register_try(
    engine: Engine,
    key: ExternalKey,
    try_number: int,
    row: TaskRow,
    logical_date: datetime | None,
    superseded_error: str,
) -> TryRegistration:
    """One transaction, on the key's mapping locked (``get_external(for_update=True)``): a try already registered,
    or an older one than the key's, writes nothing; a first or newer try inserts ``row`` (NOTIFY pending for a
    smart_pending one, on PostgreSQL) and maps the key to it, inserting the mapping, or moving it after ending the
    previous try's task while it still waits (skipped, ``superseded_error``). IntegrityError (nothing written)
    when another registration inserted or moved the key meanwhile. Statements: 1; 2 for the same try; 3-4 for a
    new key, 4-5 for a newer try (the NOTIFY on PostgreSQL)."""
    with engine.begin() as conn:
        mapped = get_external(conn, key, for_update=True)
        if mapped is not None and mapped.try_number > try_number:
            return TryRegistration(mapped.try_number, None)
        if mapped is not None and mapped.try_number == try_number:
            ti = task_sql.get_task(conn, *mapped.ti_key)
            assert ti is not None, "an external_task row always names an existing task instance"
            return TryRegistration(try_number, ti)
        now = row.execution_date
        task_sql.insert_tasks_bulk(conn, [row])
        if row.state == State.SMART_PENDING:
            channel_sql.notify_pending(conn, [row.shardcode])
        if mapped is None:
            insert_external(conn, key, try_number, logical_date, row.task_id, now, now)
            return TryRegistration(None, None)
        task_sql.set_state(
            conn,
            mapped.ti_key,
            State.SKIPPED,
            from_states=[*State.SMART_WAITING, State.UP_FOR_RETRY],
            now=now,
            error=superseded_error,
        )
        if not move_external(conn, key, mapped.try_number, try_number, row.task_id, now, now):
            raise IntegrityError("external_task moved meanwhile", None, Exception("concurrent registration"))
        return TryRegistration(mapped.try_number, None)
