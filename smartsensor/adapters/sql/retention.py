"""Retention queries: the deletes of ``smartsensor db prune`` and of ``serve``'s retention job (``service.retention``).

Every delete is bounded and guarded. Bounded: the task instances and the Airflow keys are walked in primary-key
order, one window of at most ``size`` rows at a time (the window's end is the ``size``-th key after the previous
window's, read from the primary key's index, so a statement never touches more than ``size`` rows, and a whole pass
reads each row once, whatever share of the table is old); the outbox and the worker rounds by ``id IN (SELECT …
LIMIT size)``. Guarded: the statement that deletes repeats what makes a row eligible (an ended state, an end before
the cutoff, a table unwatched), so a row a user, a worker or a registration changed since it was looked at is kept,
and two pruners at once delete each row once between them. No index is needed beyond the primary keys: the windows
are primary-key ranges, and ``task_instance``'s partial indexes (the waiting states') stay untouched.

The functions on an ``Engine`` are the operations ``service.retention`` calls, each batch in a transaction of its
own; those on a ``Connection`` are the statements they are made of. Values travel as bound parameters only."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Sequence

from sqlalchemy import Column, Connection, Engine, and_, case, delete, exists, func, literal, select, tuple_, update

from smartsensor.adapters.sql.landings import WATCHED
from smartsensor.domain.landings import SETTLED
from smartsensor.domain.states import State
from smartsensor.domain.status_rows import Batch, Key
from smartsensor.schema.models import (
    UtcDateTime,
    asset_watch as AW,
    external_task as EX,
    landing_outbox as LO,
    shard_lease as SL,
    task_instance as TI,
    worker as WK,
    worker_round as WR,
)

ENDED = State.FINISHED  # success, failed, skipped: never waiting, running, scheduled or up for retry
TI_KEY: tuple[Column[Any], ...] = (TI.c.dag_id, TI.c.task_id, TI.c.execution_date)
EX_KEY: tuple[Column[Any], ...] = (
    EX.c.dag_id,
    EX.c.task_id,
    EX.c.run_id,
    EX.c.map_index,
    EX.c.instance,
)  # its primary key, instance included


def _at(cutoff: datetime) -> Any:
    """``cutoff`` bound as a time column (naive UTC in the table), beside a SQL function's result."""
    return literal(cutoff, UtcDateTime())


def _window(key: Sequence[Column[Any]], after: Key | None, end: Key | None) -> list[Any]:
    """The WHERE terms of the keys in (after, end]; None: unbounded on that side."""
    terms = []
    if after is not None:
        terms.append(tuple_(*key) > tuple_(*(literal(v, c.type) for v, c in zip(after, key, strict=True))))
    if end is not None:
        terms.append(tuple_(*key) <= tuple_(*(literal(v, c.type) for v, c in zip(end, key, strict=True))))
    return terms


def _ended_before(ti: Any, cutoff: datetime) -> Any:
    """A task instance in an ended state whose end (else its last change, else its registration) is before
    ``cutoff``."""
    return and_(ti.c.state.in_(ENDED), func.coalesce(ti.c.end_date, ti.c.updated_at, ti.c.execution_date) < _at(cutoff))


# -- statements ------------------------------------------------------------------------------------------


def window_end(conn: Connection, key: Sequence[Column[Any]], after: Key | None, size: int) -> Key | None:
    """The ``size``-th key after ``after`` in primary-key order (None: fewer are left), read from the primary key's
    index (1 statement)."""
    query = select(*key).where(*_window(key, after, None)).order_by(*key).offset(size - 1).limit(1)
    row = conn.execute(query).first()
    return tuple(row) if row is not None else None


def ended_tasks(conn: Connection, after: Key | None, end: Key | None, cutoff: datetime, dry_run: bool) -> int:
    """Delete the task instances of the window (after, end] that ended before ``cutoff``; how many (``dry_run``:
    count them) (1 guarded statement: a task sent back to wait meanwhile is not in an ended state, and is kept)."""
    where = [*_window(TI_KEY, after, end), _ended_before(TI, cutoff)]
    if dry_run:
        return int(conn.execute(select(func.count()).select_from(TI).where(*where)).scalar_one())
    return conn.execute(delete(TI).where(*where)).rowcount


def ended_keys(conn: Connection, after: Key | None, end: Key | None, cutoff: datetime, dry_run: bool) -> int:
    """Delete the Airflow keys of the window (after, end] registered before ``cutoff`` whose task instance ended
    before it, or is gone; how many (``dry_run``: count them) (1 guarded statement: a key moved to a newer try
    meanwhile points at a task instance that has not ended, and was registered after ``cutoff``)."""
    ti = TI.alias("t")
    own_task = and_(
        ti.c.dag_id == EX.c.dag_id, ti.c.task_id == EX.c.ti_task_id, ti.c.execution_date == EX.c.ti_execution_date
    )
    # One scalar subquery per key, by the task instance's primary key: 1 if it ended before the cutoff, 0 if not,
    # NULL if it is gone. (EXISTS … OR NOT EXISTS … would be planned by PostgreSQL as two hashed subplans, each a
    # scan of the whole task_instance per statement.)
    verdict = select(case((_ended_before(ti, cutoff), 1), else_=0)).where(own_task).limit(1).scalar_subquery()
    where = [*_window(EX_KEY, after, end), EX.c.registered_at < cutoff, func.coalesce(verdict, 1) == 1]
    if dry_run:
        return int(conn.execute(select(func.count()).select_from(EX).where(*where)).scalar_one())
    return conn.execute(delete(EX).where(*where)).rowcount


def idle_rounds(conn: Connection, cutoff: datetime, size: int, dry_run: bool) -> int:
    """Delete up to ``size`` last rounds (``worker_round``) older than ``cutoff``: ranges no worker has served since
    (1 guarded statement; ``dry_run``: count them all)."""
    old = WR.c.last_round_at < cutoff
    if dry_run:
        return int(conn.execute(select(func.count()).select_from(WR).where(old)).scalar_one())
    ids = select(WR.c.range_rounds_id).where(old).order_by(WR.c.range_rounds_id).limit(size)
    return conn.execute(delete(WR).where(WR.c.range_rounds_id.in_(ids), old)).rowcount


def dead_workers(conn: Connection, cutoff: datetime, size: int, dry_run: bool) -> int:
    """Delete up to ``size`` workers (``worker``) whose last heartbeat is before ``cutoff`` (a worker killed: one that
    stops cleanly deletes its own row) and that own no lease (1 guarded statement; ``dry_run``: count them all). A
    worker that comes back writes its row again at its next heartbeat."""
    owner = exists().where(SL.c.owner == WK.c.worker_id)
    dead = and_(func.coalesce(WK.c.heartbeat_at, WK.c.started_at) < _at(cutoff), ~owner)
    if dry_run:
        return int(conn.execute(select(func.count()).select_from(WK).where(dead)).scalar_one())
    ids = select(WK.c.worker_id).where(dead).order_by(WK.c.worker_id).limit(size)
    return conn.execute(delete(WK).where(WK.c.worker_id.in_(ids), dead)).rowcount


def unwatched_uris(conn: Connection, cutoff: datetime, after: str, size: int) -> list[str]:
    """Up to ``size`` watched tables after ``after`` (in ``uri`` order) that Airflow last listed before ``cutoff``
    (1 statement)."""
    query = select(AW.c.uri).where(AW.c.uri > after, AW.c.seen_at < cutoff, WATCHED).order_by(AW.c.uri).limit(size)
    return list(conn.execute(query).scalars())


def settled_landings_of(conn: Connection, uris: Sequence[str]) -> int:
    """How many settled outbox rows (baseline, delivered, rejected) ``uris`` have (1 statement)."""
    if not uris:
        return 0
    query = select(func.count()).select_from(LO).where(LO.c.uri.in_(list(uris)), LO.c.state.in_(SETTLED))
    return int(conn.execute(query).scalar_one())


def forget_unwatched(conn: Connection, uri: str, cutoff: datetime, size: int) -> tuple[int, bool]:
    """One batch of forgetting the table ``uri`` Airflow has not listed since before ``cutoff``: its watch loses
    its baseline (a later watch takes a new one: everything listed then goes in as its baseline), then up to
    ``size`` of its settled outbox rows go (the lowest ids first: a twin deletes the same ones), then, when none is
    left (an undelivered row keeps it), the watch is marked forgotten (``forgotten_at``: its row stays, so that a
    table watched again never has its history published again by ``publish_existing``). How many outbox rows went,
    and whether the watch was forgotten. 2-5
    statements, each guarded by the watch being still unlisted since before ``cutoff`` (on PostgreSQL, its row locked
    first: a refresh that lists it again, or a publisher that enqueues on it, waits for this transaction, then sees
    it without a baseline)."""
    stale = and_(AW.c.uri == uri, AW.c.seen_at < cutoff, WATCHED)
    if conn.execute(select(AW.c.uri).where(stale).with_for_update()).first() is None:
        return 0, False
    conn.execute(update(AW).where(stale, AW.c.baselined_at.is_not(None)).values(baselined_at=None))
    unbaselined = exists().where(stale, AW.c.baselined_at.is_(None))
    ids = select(LO.c.id).where(LO.c.uri == uri, LO.c.state.in_(SETTLED)).order_by(LO.c.id).limit(size)
    rows = conn.execute(delete(LO).where(LO.c.id.in_(ids), LO.c.state.in_(SETTLED), unbaselined)).rowcount
    if rows == size:
        return rows, False
    gone = conn.execute(
        update(AW)
        .where(stale, AW.c.baselined_at.is_(None), ~exists().where(LO.c.uri == uri))
        .values(forgotten_at=AW.c.seen_at)
    ).rowcount
    return rows, gone == 1


# -- operations ------------------------------------------------------------------------------------------


def prune_tasks_batch(engine: Engine, after: Key | None, size: int, cutoff: datetime, dry_run: bool) -> Batch:
    """One window of ``size`` task instances after ``after``: ``ended_tasks`` over it, in a transaction of its own
    (2 statements)."""
    with engine.begin() as conn:
        end = window_end(conn, TI_KEY, after, size)
        return Batch(ended_tasks(conn, after, end, cutoff, dry_run), end)


def prune_keys_batch(engine: Engine, after: Key | None, size: int, cutoff: datetime, dry_run: bool) -> Batch:
    """One window of ``size`` Airflow keys after ``after``: ``ended_keys`` over it, in a transaction of its own (2
    statements)."""
    with engine.begin() as conn:
        end = window_end(conn, EX_KEY, after, size)
        return Batch(ended_keys(conn, after, end, cutoff, dry_run), end)


def prune_workers(engine: Engine, cutoff: datetime, size: int, dry_run: bool) -> int:
    """``dead_workers`` in a transaction of its own (1 statement)."""
    with engine.begin() as conn:
        return dead_workers(conn, cutoff, size, dry_run)


def prune_rounds(engine: Engine, cutoff: datetime, size: int, dry_run: bool) -> int:
    """``idle_rounds`` in a transaction of its own (1 statement)."""
    with engine.begin() as conn:
        return idle_rounds(conn, cutoff, size, dry_run)


def watch_cutoff(engine: Engine, now: datetime, age: timedelta) -> datetime | None:
    """The cutoff of the watches: ``age`` before the newest listing of Airflow's on record (the newest
    ``seen_at``), or before ``now`` if that is earlier, so that an Airflow nobody could ask for a month forgets no
    table; None: nothing watched (1 statement)."""
    with engine.connect() as conn:
        newest: datetime | None = conn.execute(select(func.max(AW.c.seen_at))).scalar_one()
    return None if newest is None else min(now, newest) - age


def read_unwatched(engine: Engine, cutoff: datetime, after: str, size: int) -> list[str]:
    """``unwatched_uris`` on a connection of its own (1 statement)."""
    with engine.connect() as conn:
        return unwatched_uris(conn, cutoff, after, size)


def count_unwatched_landings(engine: Engine, uris: Sequence[str]) -> int:
    """``settled_landings_of`` on a connection of its own (1 statement)."""
    with engine.connect() as conn:
        return settled_landings_of(conn, uris)


def forget_unwatched_batch(engine: Engine, uri: str, cutoff: datetime, size: int) -> tuple[int, bool]:
    """``forget_unwatched`` in a transaction of its own."""
    with engine.begin() as conn:
        return forget_unwatched(conn, uri, cutoff, size)
