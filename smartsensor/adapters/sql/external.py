"""Queries on the keys of another scheduler's tasks (``external_task``) and the task instances they map to, and
``SqlExternalTryStore``, the external door's store (``ports.ExternalTryStore``): each operation in a transaction or
connection of its own, an IntegrityError (another registration got there first) raised as the port's
``InsertConflict``. A database away raises SQLAlchemy's own error, which the API answers 503."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Sequence

from sqlalchemy import Connection, Engine, insert, select, text, tuple_, update
from sqlalchemy.exc import IntegrityError

from smartsensor.adapters.sql import channels as channel_sql, tasks as task_sql
from smartsensor.adapters.sql.store_errors import any_error_unavailable
from smartsensor.domain.keys import ExternalKey
from smartsensor.domain.rows import ExternalRow, ExternalState, NewTry, Superseded, TaskRow, TryRegistration
from smartsensor.domain.states import State
from smartsensor.ports import InsertConflict
from smartsensor.schema.models import external_task as EX


def _is_key(key: ExternalKey) -> tuple[Any, ...]:
    """The WHERE clauses of one key's row."""
    return (
        EX.c.instance == key.instance,
        EX.c.dag_id == key.dag_id,
        EX.c.task_id == key.task_id,
        EX.c.run_id == key.run_id,
        EX.c.map_index == key.map_index,
    )


def get_external(conn: Connection, key: ExternalKey, for_update: bool = False) -> ExternalRow | None:
    """The mapping row of ``key`` (1 statement; on Postgres ``for_update`` locks it until commit)."""
    query = select(EX).where(*_is_key(key))
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
            instance=key.instance,
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
    seen: ExternalRow,
    try_number: int,
    ti_task_id: str,
    ti_execution_date: datetime,
    now: datetime,
) -> bool:
    """Point ``key`` at the task instance of a new try (or of the same try's new check), if nobody moved it since
    ``seen`` was read: the same try and task instance (1 statement)."""
    return (
        conn.execute(
            update(EX)
            .where(
                *_is_key(key),
                EX.c.try_number == seen.try_number,
                EX.c.ti_task_id == seen.ti_task_id,
                EX.c.ti_execution_date == seen.ti_execution_date,
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
    unnest(CAST(:dags AS text[]), CAST(:tasks AS text[]), CAST(:runs AS text[]), CAST(:maps AS integer[]),
           CAST(:instances AS text[]))
        AS k(dag_id, task_id, run_id, map_index, instance)
    JOIN external_task e ON e.dag_id = k.dag_id AND e.task_id = k.task_id AND e.run_id = k.run_id
                        AND e.map_index = k.map_index AND e.instance = k.instance"""
_STATES_FROM_SQLITE = """
    json_each(:keys) AS k
    JOIN external_task e ON e.dag_id = json_extract(k.value, '$[0]') AND e.task_id = json_extract(k.value, '$[1]')
                        AND e.run_id = json_extract(k.value, '$[2]') AND e.map_index = json_extract(k.value, '$[3]')
                        AND e.instance = json_extract(k.value, '$[4]')"""
_STATES_SELECT = """
    SELECT e.dag_id, e.task_id, e.run_id, e.map_index, e.instance, e.try_number, t.state, t.error, t.hashcode
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
                "instances": [k.instance for k in unique],
            },
        )
    else:
        rows = conn.execute(STATES_SQLITE, {"keys": json.dumps([list(k) for k in unique])})
    return {
        ExternalKey(d, t, r, m, i): ExternalState(n, state, error, hashcode)
        for d, t, r, m, i, n, state, error, hashcode in rows
    }


def mapped_keys(conn: Connection, keys: Sequence[ExternalKey]) -> set[ExternalKey]:
    """Which of ``keys`` have a mapping row (1 statement)."""
    if not keys:
        return set()
    columns = (EX.c.dag_id, EX.c.task_id, EX.c.run_id, EX.c.map_index, EX.c.instance)
    rows = conn.execute(select(*columns).where(tuple_(*columns).in_([tuple(k) for k in keys])))
    return {ExternalKey(*row) for row in rows}


class SqlExternalTryStore:
    """``ports.ExternalTryStore`` on the metadata database (SQLite or PostgreSQL); any other database error is
    ``ports.StoreUnavailable`` (the API's 503), its message the database's."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def read_states(self, keys: Sequence[ExternalKey]) -> dict[ExternalKey, ExternalState]:
        """``external_states`` on a connection of its own (1 statement)."""
        with any_error_unavailable(), self.engine.connect() as conn:
            return external_states(conn, keys)

    def register_try(
        self, key: ExternalKey, try_number: int, row: TaskRow, logical_date: datetime | None, superseded: Superseded
    ) -> TryRegistration:
        """One transaction, on the key's mapping locked (``get_external(for_update=True)``): a try already
        registered with the same wait (``TaskRow.waits_as``), or an older try than the key's, writes nothing; a first
        or newer try, or the same try with another check, inserts ``row`` (NOTIFY pending for a smart_pending one, on
        PostgreSQL) and maps the key to it, inserting the mapping, or moving it after ending the previous task
        instance while it still waits (skipped, with ``superseded``'s error for the case). InsertConflict (nothing
        written: an IntegrityError, or the mapping moved) when another registration inserted or moved the key
        meanwhile.
        Statements: 1; 2 for the same try; 3-4 for a new key, 4-5 for a newer try or another check (the NOTIFY on
        PostgreSQL)."""
        with any_error_unavailable():
            try:
                with self.engine.begin() as conn:
                    return _register_try(conn, key, try_number, row, logical_date, superseded)
            except IntegrityError as exc:
                raise InsertConflict(str(exc)) from exc

    def register_new_tries(self, tries: Sequence[NewTry]) -> set[ExternalKey]:
        """One transaction for many first registrations: the tries whose key has no mapping yet get their task
        instance and mapping (NOTIFY pending for the smart_pending ones, on PostgreSQL); a key that has one is left to
        ``register_try``. The keys registered; InsertConflict (an IntegrityError, nothing written) when another
        registration inserted one of them meanwhile, or ``tries`` names a key twice. Statements: 1 when every key is
        mapped, else 4 whatever the number of tries (up to ``tasks.IN_CHUNK`` rows a statement)."""
        with any_error_unavailable():
            try:
                with self.engine.begin() as conn:
                    return _register_new_tries(conn, tries)
            except IntegrityError as exc:
                raise InsertConflict(str(exc)) from exc


def _register_try(
    conn: Connection,
    key: ExternalKey,
    try_number: int,
    row: TaskRow,
    logical_date: datetime | None,
    superseded: Superseded,
) -> TryRegistration:
    """``SqlExternalTryStore.register_try``'s statements, in its transaction (an InsertConflict rolls it back)."""
    mapped = get_external(conn, key, for_update=True)
    if mapped is not None and mapped.try_number > try_number:
        return TryRegistration(mapped.try_number, None)
    same_try = mapped is not None and mapped.try_number == try_number
    if mapped is not None and same_try:
        ti = task_sql.get_task(conn, *mapped.ti_key)
        if ti is not None and ti.waits_as(row):
            return TryRegistration(try_number, ti)
        # Another wait under the same key and try (a run created again, a reset Airflow, another deployment
        # without its own instance name): a new task instance, never the old one's verdict.
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
        error=superseded.other_check if same_try else superseded.newer_try,
    )
    if not move_external(conn, key, mapped, try_number, row.task_id, now, now):
        raise InsertConflict(f"external_task {tuple(key)} moved meanwhile: a concurrent registration")
    return TryRegistration(mapped.try_number, None)


def _register_new_tries(conn: Connection, tries: Sequence[NewTry]) -> set[ExternalKey]:
    """``SqlExternalTryStore.register_new_tries``'s statements, in its transaction."""
    mapped = mapped_keys(conn, [t.key for t in tries])
    new = [t for t in tries if t.key not in mapped]
    if not new:
        return set()
    task_sql.insert_tasks_bulk(conn, [t.row for t in new])
    channel_sql.notify_pending(conn, [t.row.shardcode for t in new if t.row.state == State.SMART_PENDING])
    conn.execute(
        insert(EX),
        [
            {
                "instance": t.key.instance,
                "dag_id": t.key.dag_id,
                "task_id": t.key.task_id,
                "run_id": t.key.run_id,
                "map_index": t.key.map_index,
                "try_number": t.try_number,
                "logical_date": t.logical_date,
                "ti_task_id": t.row.task_id,
                "ti_execution_date": t.row.execution_date,
                "registered_at": t.row.execution_date,
            }
            for t in new
        ],
    )
    return {t.key for t in new}
