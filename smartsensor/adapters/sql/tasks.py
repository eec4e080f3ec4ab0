"""Task-instance queries, by name, that several callers share: registration (both doors), the shard round, the
claim of a scheduled task, dead runs (``status`` counts them), a user's change. The queries only the standalone
scheduler or a classic run sends live beside their stores (``scheduler_store``, ``classic_store``).

State changes are guarded, idempotent updates (``... WHERE state IN (...)``): a second worker, a
retried round or a user's manual change is never overwritten. Each function documents how many
statements it sends; callers count them through ``smartsensor.adapters.sql.engine.statement_count``.
Lease, signal and status queries live next to this module (``leases``, ``signals``, ``status``).

The functions that take an ``Engine`` (at the end) are the operations the CLI calls: each opens its own connection or
transaction and sends the statements above, so that no caller holds one. The standalone door's operations are its
stores' methods (``registration_store``, ``scheduler_store``, ``classic_store``).
"""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any, Iterable, Sequence

from sqlalchemy import Connection, Engine, exists, func, insert, literal, or_, select, text, tuple_, update

from smartsensor.adapters.sql import channels as channel_sql
from smartsensor.domain import clock
from smartsensor.domain.clock import as_utc
from smartsensor.domain.keys import Cohort, CohortRows, Fence, TaskKey, VigilKey
from smartsensor.domain.rows import TaskRow, ZombieRow
from smartsensor.domain.states import State
from smartsensor.schema.models import (
    RUNNING_PREDICATE,
    WAITING_PREDICATE,
    UtcDateTime,
    shard_lease as SL,
    task_instance as TI,
)

# Stay far below SQLite's bound-parameter limit (32766) and keep Postgres plans cheap.
IN_CHUNK = 5000


def _fenced(stmt: Any, fence: "Fence | None", now: datetime) -> Any:
    """Add the lease check to a worker's UPDATE: same statement, so no window between check and write.

    On Postgres the check also takes a share lock on the lease row until the write commits, so a
    takeover (which must update that row) cannot slip in between the check and the commit: a
    worker paused after its UPDATE but before COMMIT either commits while it still owns the lease,
    or its session is ended (idle_in_transaction_session_timeout) and the write rolls back.
    SQLite ignores the lock clause; it serialises writers anyway.
    """
    if fence is None:
        return stmt
    return stmt.where(
        exists(
            select(SL.c.shard_min)
            .where(
                SL.c.shard_min == fence.shard_min,
                SL.c.owner == fence.owner,
                SL.c.epoch == fence.epoch,
                SL.c.expires_at > now,
            )
            .with_for_update(read=True)
        )
    )


def _kept_start(now: datetime) -> Any:
    """start_date kept when set, else ``now``: ``now`` bound as a time column (``UtcDateTime``), which a bare value
    in a SQL function is not."""
    return func.coalesce(TI.c.start_date, literal(now, UtcDateTime()))


def is_task(key: TaskKey) -> tuple[Any, Any, Any]:
    """The WHERE terms of one task instance, by primary key (the standalone door's stores' queries use it too)."""
    return TI.c.dag_id == key.dag_id, TI.c.task_id == key.task_id, TI.c.execution_date == key.execution_date


def update_task(conn: Connection, key: TaskKey, where: Sequence[Any], **values: Any) -> bool:
    """UPDATE one task instance (by key) setting ``values``, only while the ``where`` terms still hold (the state,
    try, claim or beat read): whether it changed. The guarded single-task writes of the scheduler and classic runs.
    1 statement."""
    return conn.execute(update(TI).where(*is_task(key), *where).values(**values)).rowcount == 1


def in_range(shard_min: Any, shard_max: Any) -> tuple[Any, Any]:
    """The WHERE terms of a shard range [shard_min, shard_max): lower bound inclusive, upper exclusive; a NULL
    shardcode is in no range. The one spelling of the range predicate (``status`` uses it too); the bounds are
    ints (bound parameters) or SQL expressions."""
    return TI.c.shardcode >= shard_min, TI.c.shardcode < shard_max


def _ended(new_state: str, now: datetime, error: str | None) -> dict[str, Any]:
    """The values a round writes to end a task's wait: the state, when, and the error if there is one."""
    values: dict[str, Any] = {"state": new_state, "end_date": now, "updated_at": now}
    if error is not None:
        values["error"] = error
    return values


def _chunks(items: Sequence[Any], size: int = IN_CHUNK) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def get_task(conn: Connection, dag_id: str, task_id: str, execution_date: datetime) -> TaskRow | None:
    """One task instance by primary key (1 statement)."""
    row = conn.execute(select(TI).where(*is_task(TaskKey(dag_id, task_id, execution_date)))).first()
    return TaskRow._make(row) if row else None


def existing_states(conn: Connection, execution_date: datetime, dag_ids: Iterable[str]) -> dict[tuple[str, str], str]:
    """{(dag_id, task_id): state} of the task instances of these DAGs on one execution date.
    1 statement per IN_CHUNK dag_ids."""
    out: dict[tuple[str, str], str] = {}
    for chunk in _chunks(sorted(set(dag_ids))):
        for dag_id, task_id, state in conn.execute(
            select(TI.c.dag_id, TI.c.task_id, TI.c.state).where(
                TI.c.execution_date == execution_date, TI.c.dag_id.in_(list(chunk))
            )
        ):
            out[(dag_id, task_id)] = state
    return out


def insert_tasks_bulk(conn: Connection, rows: Sequence[TaskRow]) -> None:
    """Insert new task instances: one executemany per IN_CHUNK rows (registration, benchmarks)."""
    for chunk in _chunks(list(rows)):
        conn.execute(insert(TI), [row.columns() for row in chunk])


def reset_task(conn: Connection, row: TaskRow) -> None:
    """Overwrite a task instance with a fresh registration (``submit --clear``; 1 statement)."""
    values = {k: v for k, v in row.columns().items() if k not in TaskKey._fields}
    conn.execute(update(TI).where(*is_task(row.key)).values(**values))


def list_tasks(conn: Connection, state: str | None = None, dag_id: str | None = None) -> list[TaskRow]:
    """Task instances, optionally filtered by state and dag_id, in key order (1 statement)."""
    query = select(TI).order_by(TI.c.dag_id, TI.c.task_id, TI.c.execution_date)
    if state is not None:
        query = query.where(TI.c.state == state)
    if dag_id is not None:
        query = query.where(TI.c.dag_id == dag_id)
    return [TaskRow._make(r) for r in conn.execute(query)]


def set_state(
    conn: Connection,
    key: TaskKey,
    new_state: str,
    from_states: Sequence[str] | None = None,
    now: datetime | None = None,
    error: str | None = None,
    try_number: int | None = None,
) -> bool:
    """Set one task's state (a user's manual change when ``from_states`` is None). 1 statement.

    ``try_number``: only while the task is still in that try (a run ending its own try never ends a
    later one that another process started after this one was given up for dead).
    """
    query = update(TI).where(*is_task(key))
    if from_states is not None:
        query = query.where(TI.c.state.in_(list(from_states)))
    if try_number is not None:
        query = query.where(TI.c.try_number == try_number)
    now = now or clock.now()
    values: dict[str, Any] = {"state": new_state, "updated_at": now}
    if new_state in State.FINISHED or new_state == State.UP_FOR_RETRY:
        values["end_date"] = now
    if from_states is None and new_state in (State.SCHEDULED, State.SMART_PENDING):
        # a user sending a task back to wait starts a fresh try: timeouts count from the next start
        values.update(start_date=None, end_date=None, hostname=None, error=None)
    if from_states is None and new_state == State.SMART_RUNNING:
        # a try that waits by hand has a start: its timeout and poke schedule count from it, and the workers'
        # index (which keys tasks by their start) picks it up at its next reconciliation. No worker started it
        # now: hostname is cleared, so that no reconciliation takes it for its own feed's start.
        values.update(start_date=_kept_start(values["updated_at"]), end_date=None, hostname=None)
    if error is not None:
        values["error"] = error
    return conn.execute(query.values(**values)).rowcount == 1


def mark_hashes(
    conn: Connection,
    hashcodes: Sequence[int],
    shard_min: int,
    shard_max: int,
    new_state: str,
    now: datetime,
    error: str | None = None,
    fence: Fence | None = None,
) -> int:
    """Every waiting task with one of ``hashcodes`` in the range → ``new_state``.

    Only for hashes whose tasks all share one vigil (no collision). 1 statement per IN_CHUNK hashes.
    """
    total = 0
    values = _ended(new_state, now, error)
    for chunk in _chunks(list(hashcodes)):
        total += conn.execute(
            _fenced(
                update(TI).where(
                    TI.c.hashcode.in_(list(chunk)),
                    *in_range(shard_min, shard_max),
                    TI.c.state.in_(State.SMART_WAITING),
                ),
                fence,
                now,
            ).values(**values)
        ).rowcount
    return total


def mark_vigil(
    conn: Connection,
    vigil: VigilKey,
    shard_min: int,
    shard_max: int,
    new_state: str,
    now: datetime,
    error: str | None = None,
    fence: Fence | None = None,
) -> int:
    """Waiting tasks of one exact vigil (hash AND classpath AND attr_dict) in the range → ``new_state``.

    Used when two different vigils collide on a hash, so that they are never marked together.
    1 statement.
    """
    values = _ended(new_state, now, error)
    return conn.execute(
        _fenced(
            update(TI).where(
                TI.c.hashcode == vigil.hashcode,
                TI.c.classpath == vigil.classpath,
                TI.c.attr_dict == vigil.attr_dict,
                *in_range(shard_min, shard_max),
                TI.c.state.in_(State.SMART_WAITING),
            ),
            fence,
            now,
        ).values(**values)
    ).rowcount


COHORT_CHUNK = 1000  # cohorts per statement: 6 bound values each


def end_cohorts(
    conn: Connection,
    cohorts: Sequence[tuple[VigilKey, Cohort]],
    shard_min: int,
    shard_max: int,
    new_state: str,
    now: datetime,
    error: str | None = None,
    fence: Fence | None = None,
) -> int:
    """End the tries of these cohorts → ``new_state``: a timeout (up_for_retry, failed or skipped), or a cohort
    that cannot be planned (failed, with the reason).

    Guarded on the exact try the worker knows (state smart_running, try_number and start_date, the vigil and
    its exec settings), so a round that knew a try which was retried or reset by hand meanwhile never ends the
    newer try. 1 statement per COHORT_CHUNK cohorts.
    """
    total = 0
    values = _ended(new_state, now, error)
    rows = [(k.hashcode, k.classpath, k.attr_dict, c.exec_dict, c.start_date, c.try_number) for k, c in cohorts]
    # A cohort's exec_dict is '' for a NULL one (older versions, hand-written rows): compare it the same way.
    exec_dict = func.coalesce(TI.c.exec_dict, "")
    for chunk in _chunks(rows, COHORT_CHUNK):
        total += conn.execute(
            _fenced(
                update(TI).where(
                    TI.c.hashcode.in_({r[0] for r in chunk}),  # lets the planner use the hashcode index
                    tuple_(
                        TI.c.hashcode, TI.c.classpath, TI.c.attr_dict, exec_dict, TI.c.start_date, TI.c.try_number
                    ).in_(list(chunk)),
                    *in_range(shard_min, shard_max),
                    TI.c.state == State.SMART_RUNNING,
                ),
                fence,
                now,
            ).values(**values)
        ).rowcount
    return total


_COHORT_COLUMNS = (TI.c.hashcode, TI.c.classpath, TI.c.attr_dict, TI.c.exec_dict, TI.c.start_date, TI.c.try_number)


def _keep(text: str | None) -> str:
    """One copy of a string many tasks share; a NULL (a hand-written row) stays None, and fails its check alone."""
    return sys.intern(text) if isinstance(text, str) else text  # type: ignore[return-value]  # None kept on purpose


def _cohort_rows(rows: Iterable[Any]) -> CohortRows:
    """(vigil, cohort, count) from (hashcode, classpath, attr_dict, exec_dict, start_date, try_number[, count])."""
    counts: dict[tuple[Any, ...], int] = {}  # counted by the row's plain values; the keys are made once per cohort
    for h, cp, ad, ed, sd, tn, *n in rows:
        k = (h, cp, ad, ed or "", sd, tn)
        counts[k] = counts.get(k, 0) + (n[0] if n else 1)
    return [
        (VigilKey(h, _keep(cp), _keep(ad)), Cohort(_keep(ed), sd, tn), n)
        for (h, cp, ad, ed, sd, tn), n in counts.items()
    ]


def load_waiting_cohorts(conn: Connection, shard_min: int, shard_max: int) -> CohortRows:
    """The started (smart_running) tasks of [shard_min, shard_max), counted per vigil and cohort by the database:
    one row per cohort reaches Python, not one per task. Tasks without a start (rows of older versions or written
    by hand) come as cohorts whose start_date is None: ``adopt_unstarted`` gives them one. 1 statement. Fetched at
    once, not through a server-side cursor: a cursor makes PostgreSQL plan for its first rows
    (cursor_tuple_fraction), which made a W3 rebuild 47-61 s instead of 6-8 s."""
    # The first term repeats ti_waiting_shardcode's predicate word for word: SQLite uses a partial index only then.
    return _cohort_rows(
        conn.execute(
            select(*_COHORT_COLUMNS, func.count())
            .where(
                text(WAITING_PREDICATE),
                TI.c.state == State.SMART_RUNNING,
                *in_range(shard_min, shard_max),
            )
            .group_by(*_COHORT_COLUMNS)
        )
    )


def adopt_unstarted(
    conn: Connection, shard_min: int, shard_max: int, now: datetime, fence: Fence | None = None
) -> CohortRows:
    """Give a start to the range's smart_running tasks that have none (rows of older versions, or written by hand
    straight into the database), so that they have a try to count from and a place in the index; returns them
    per cohort. Sent only when a rebuild found such tasks. 1 statement."""
    return _cohort_rows(
        conn.execute(
            _fenced(
                update(TI).where(
                    text(WAITING_PREDICATE),
                    TI.c.state == State.SMART_RUNNING,
                    *in_range(shard_min, shard_max),
                    TI.c.start_date.is_(None),
                ),
                fence,
                now,
            )
            .values(start_date=now, updated_at=now)
            .returning(*_COHORT_COLUMNS)
        )
    )


# Other sessions' open transactions on this database, client backends only (autovacuum and the like stamp no rows).
# A role sees another role's xact_start only as a superuser or with pg_read_all_stats: give the workers' role that
# (or run every writer under it), else such a transaction is not seen and the index rebuild is the bound.
_OLDEST_OPEN = text(
    "SELECT min(xact_start) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
    "AND backend_type = 'client backend' AND xact_start IS NOT NULL"
)


def oldest_open_transaction(conn: Connection) -> datetime | None:
    """PostgreSQL: when the oldest transaction another session holds open began, aware UTC, or None. A
    reconciliation reads rows changed from there on next time, so that a transaction that commits long after the
    ``updated_at`` it stamped is still read. 1 statement (pg_stat_activity: a row per connection)."""
    oldest = conn.execute(_OLDEST_OPEN).scalar()
    if oldest is None:
        return None
    return as_utc(oldest)


def changed_cohorts(conn: Connection, shard_min: int, shard_max: int, since: datetime, starter: str) -> CohortRows:
    """The range's started (smart_running) tasks whose row changed at or after ``since``, per vigil and cohort: what
    a worker's reconciliation compares with its index (a set-state by hand, another process, `db reshard`). Rows
    ``starter`` started (its feed stamps ``hostname``, and start_date = updated_at) and nobody changed since are
    left out: that worker counted them as it started them, and a burst of a million starts is not read again. An
    index range scan of ti_running_updated: its cost follows the rows changed, not the rows waiting. 1 statement."""
    # The first term repeats ti_running_updated's predicate word for word: SQLite uses a partial index only then.
    return _cohort_rows(
        conn.execute(
            select(*_COHORT_COLUMNS, func.count())
            .where(
                text(RUNNING_PREDICATE),
                TI.c.updated_at >= since,
                *in_range(shard_min, shard_max),
                TI.c.start_date.is_not(None),
                or_(TI.c.hostname.is_(None), TI.c.hostname != starter, TI.c.updated_at != TI.c.start_date),
            )
            .group_by(*_COHORT_COLUMNS)
        )
    )


def start_pending_cohorts(
    conn: Connection, shard_min: int, shard_max: int, now: datetime, hostname: str, fence: Fence | None = None
) -> CohortRows:
    """smart_pending → smart_running for the range, stamping the start of this try, and returning what it started,
    per cohort: the tasks that arrived since the last round. 1 statement (an index probe when nothing is pending)."""
    started = _fenced(update(TI).where(TI.c.state == State.SMART_PENDING, *in_range(shard_min, shard_max)), fence, now)
    return _cohort_rows(
        conn.execute(
            started.values(
                state=State.SMART_RUNNING,
                start_date=_kept_start(now),
                hostname=hostname,
                updated_at=now,
            ).returning(*_COHORT_COLUMNS)
        )
    )


def claim_scheduled(conn: Connection, key: TaskKey, now: datetime, hostname: str) -> bool:
    """scheduled → running for a classic-mode run; False if another process got there first. 1 statement.

    start_date is kept when set: a run handed back on SIGTERM continues its try, not a new one.
    """
    return update_task(
        conn,
        key,
        [TI.c.state == State.SCHEDULED],
        state=State.RUNNING,
        start_date=_kept_start(now),
        end_date=None,
        hostname=hostname,
        updated_at=now,
    )


def load_zombies(conn: Connection, cutoff: datetime) -> list[ZombieRow]:
    """`running` task instances whose run last heartbeated before ``cutoff`` (1 statement)."""
    columns = [TI.c[name] for name in ZombieRow._fields]
    return [
        ZombieRow._make(r)
        for r in conn.execute(select(*columns).where(TI.c.state == State.RUNNING, TI.c.updated_at < cutoff))
    ]


def keys_in_state(conn: Connection, state: str, limit: int | None = None) -> list[TaskKey]:
    """Keys of task instances in ``state``, oldest execution date first (1 statement)."""
    query = (
        select(TI.c.dag_id, TI.c.task_id, TI.c.execution_date)
        .where(TI.c.state == state)
        .order_by(TI.c.execution_date, TI.c.dag_id, TI.c.task_id)
    )
    if limit is not None:
        query = query.limit(limit)
    return [TaskKey(*r) for r in conn.execute(query)]


def reshard(conn: Connection, limit: int, now: datetime | None = None) -> int:
    """Recompute every row's shardcode as hashcode mod ``limit`` (after shard_code_upper_limit changed).

    Not a state change, so safe while workers run: their writes stay guarded by state (and try), a
    range-guarded success mark of a moved row simply misses it, and the new owner picks it up next
    round: its reconciliation reads rows by ``updated_at``, which is stamped here. 1 statement.
    """
    # ((h % n) + n) % n: SQL's % keeps the dividend's sign, Python's (used at registration) does not.
    wanted = ((TI.c.hashcode % limit) + limit) % limit
    return conn.execute(
        update(TI)
        .where(TI.c.hashcode.is_not(None), or_(TI.c.shardcode.is_(None), TI.c.shardcode != wanted))
        .values(shardcode=wanted, updated_at=now or clock.now())  # the new range's reconciliation sees it
    ).rowcount


# -- operations, each in a connection or transaction of its own -------------------------------------------------
# The CLI's.


def reshard_tasks(engine: Engine, limit: int) -> int:
    """``reshard`` in a transaction of its own (`db reshard`); how many rows moved (1 statement)."""
    with engine.begin() as conn:
        return reshard(conn, limit)


def read_tasks(engine: Engine, state: str | None = None, dag_id: str | None = None) -> list[TaskRow]:
    """``list_tasks`` on a connection of its own (1 statement)."""
    with engine.connect() as conn:
        return list_tasks(conn, state=state, dag_id=dag_id)


def set_state_by_hand(engine: Engine, key: TaskKey, new_state: str) -> bool:
    """A user's `set-state`, in one transaction: the state (``set_state`` without a guard), then, on PostgreSQL,
    NOTIFY the ended channel (any task) and, for ``smart_pending``, the pending one. False, and nothing more sent,
    when there is no such task. 1 statement on SQLite; 2 or 3 on PostgreSQL."""
    with engine.begin() as conn:
        if not set_state(conn, key, new_state):
            return False
        channel_sql.notify_ended(conn)
        if new_state == State.SMART_PENDING:
            channel_sql.notify_pending(conn)
        return True


# Classic runs: the standalone door's stores (``registration_store``, ``scheduler_store``, ``classic_store``) hold
# their operations; this one both the scheduler's and run-task's share.


def end_running_try(
    engine: Engine, key: TaskKey, new_state: str, now: datetime, error: str | None, try_number: int | None
) -> bool:
    """End a classic run's try, in a transaction of its own: running → ``new_state`` (``set_state`` guarded on
    `running` and, given, on ``try_number``); False if the task left `running` (or that try) meanwhile.
    1 statement."""
    with engine.begin() as conn:
        return set_state(conn, key, new_state, from_states=[State.RUNNING], now=now, error=error, try_number=try_number)
