"""What ``smartsensor status`` reads, and the per-round rows workers write for it.

The stuck-task queries (``waiting_after_landing``, ``waiting_start_by_exec``, ``count_started_before``,
``oldest_started_before``) are aggregates: one row per distinct exec_dict at most reaches Python, never one per
waiting task. ``service.status.collect_stuck`` defines what they count. ``waiting_by_range`` (the waiting
tasks and distinct checks per shard range) is one too: one row per range. ``read_status`` and ``read_stuck`` send
them, and the rest of what `status` shows, on one connection."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Sequence

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Integer,
    and_,
    case,
    delete,
    func,
    insert,
    literal_column,
    not_,
    or_,
    select,
    text,
    union_all,
    update,
)

from smartsensor.adapters.sql import leases as lease_sql, tasks as task_sql
from smartsensor.adapters.sql.tasks import in_range
from smartsensor.domain.states import State
from smartsensor.domain.status_rows import (  # noqa: F401 - named here too, where the queries are
    Cutoffs,
    OverdueTask,
    PastLimits,
    StatusRows,
    StuckRows,
    WaitingCounts,
)
from smartsensor.schema.models import WAITING_PREDICATE, task_instance as TI, worker as WK, worker_round as WR


def record_round(
    conn: Connection,
    range_rounds_id: str,
    hostname: str,
    pid: int,
    shard_min: int,
    shard_max: int,
    now: datetime,
    seconds: float,
    summary_json: str,
) -> None:
    """Upsert a range rounds' last round for `smartsensor status` (2 statements at most)."""
    values = dict(
        hostname=hostname,
        pid=pid,
        shard_min=shard_min,
        shard_max=shard_max,
        last_round_at=now,
        last_round_seconds=seconds,
        last_round_json=summary_json,
    )
    if conn.execute(update(WR).where(WR.c.range_rounds_id == range_rounds_id).values(**values)).rowcount == 0:
        conn.execute(insert(WR).values(range_rounds_id=range_rounds_id, **values))


def count_by_state(conn: Connection) -> dict[str, int]:
    """Task instances per state (1 statement)."""
    return {s or "none": n for s, n in conn.execute(select(TI.c.state, func.count()).group_by(TI.c.state))}


_TOTAL = -2  # the row of all waiting tasks; -1 groups the tasks in no range given


def _int(value: int) -> ColumnElement[int]:
    """An integer written into the statement: the same SQL text for every call with the same ranges, and no bind
    parameter per range (SQLite caps them)."""
    return literal_column(str(int(value)), Integer)


def waiting_by_range(conn: Connection, ranges: Sequence[tuple[int, int]]) -> WaitingCounts:
    """Waiting smart tasks and their distinct hashcodes, in all and per ``(lo, hi)`` range of shardcodes (a task
    counts in the first range with lo <= shardcode < hi; one in none, stranded or NULL, counts in all only).
    Aggregated in the database, never a row per task: len(ranges) + 2 rows at most. 1 statement, one scan: the
    waiting tasks grouped by (range, hashcode), a CASE over the ranges giving the range (``p``, one row per
    distinct check of a range), then ``p`` grouped by range UNION ALL ``p`` as a whole."""
    whens = [(and_(*in_range(_int(lo), _int(hi))), _int(i)) for i, (lo, hi) in enumerate(ranges)]
    rng = case(*whens, else_=_int(-1)) if whens else None  # GROUP BY -1 would name a column: no range, no key
    p = (
        select((_int(-1) if rng is None else rng).label("rng"), TI.c.hashcode, func.count().label("n"))
        .where(TI.c.state.in_(State.SMART_WAITING))
        .group_by(*([] if rng is None else [rng]), TI.c.hashcode)
        .cte("p")
    )
    null_hash = func.max(case((p.c.hashcode.is_(None), 1), else_=0))  # COUNT(DISTINCT) skips NULL; a set does not
    rows = conn.execute(
        union_all(
            select(p.c.rng, func.sum(p.c.n), func.count()).group_by(p.c.rng),
            select(_int(_TOTAL), func.sum(p.c.n), func.count(p.c.hashcode.distinct()) + null_hash),
        )
    ).all()
    per_range = {int(i): (int(n), int(h)) for i, n, h in rows if i >= 0}
    tasks, distinct = next(((int(n or 0), int(h or 0)) for i, n, h in rows if i == _TOTAL), (0, 0))
    return WaitingCounts(tasks, distinct, per_range)


def worker_rounds(conn: Connection) -> list[dict[str, Any]]:
    """Every range rounds' last round (1 statement)."""
    return [dict(r) for r in conn.execute(select(WR).order_by(WR.c.shard_min, WR.c.range_rounds_id)).mappings()]


def stranded_count(conn: Connection, limit: int) -> int:
    """Waiting or retrying smart tasks whose shardcode no worker serves: outside [0, limit), left by a
    smaller shard_code_upper_limit (``smartsensor db reshard`` fixes them). 1 statement."""
    return conn.execute(
        select(func.count())
        .select_from(TI)
        .where(
            TI.c.state.in_([*State.SMART_WAITING, State.UP_FOR_RETRY]),
            or_(TI.c.shardcode.is_(None), not_(and_(*in_range(0, limit)))),
        )
    ).scalar_one()


def forget_range_rounds(conn: Connection, range_rounds_id: str) -> None:
    """Drop a range rounds' status row (clean stop). 1 statement."""
    conn.execute(delete(WR).where(WR.c.range_rounds_id == range_rounds_id))


def list_workers(conn: Connection) -> list[dict[str, Any]]:
    """Every worker row (1 statement)."""
    return [dict(r) for r in conn.execute(select(WK).order_by(WK.c.started_at)).mappings()]


def waiting_after_landing(conn: Connection, cutoff: datetime) -> tuple[int, OverdueTask | None]:
    """Waiting tasks whose check landed at or before ``cutoff`` and that have waited since at or before it: their
    number, and the one due longest (due: the later of its check's first such landing and its wait's start). A
    task of the same check (hashcode, classpath, attr_dict) in ``success`` with ``end_date <= cutoff`` is a
    landing. 1 statement, set-wise: ``l``, the landings per check, only of the hashcodes that wait (the waiting
    tasks' distinct hashcodes, a semi-join the database drives from the smaller side: each hash probed once, not
    once per task); then the waiting tasks joined to ``l`` (few rows: only checks that landed), the count as a
    window over the rows, one row back."""
    s = TI.alias("s")
    since = func.coalesce(TI.c.start_date, TI.c.updated_at)
    # The first term repeats ti_waiting_shardcode's predicate word for word: SQLite uses a partial index only then.
    waits = (text(WAITING_PREDICATE), since <= cutoff)
    landed = (
        select(s.c.hashcode, s.c.classpath, s.c.attr_dict, func.min(s.c.end_date).label("landed"))
        .where(
            s.c.state == State.SUCCESS, s.c.end_date <= cutoff, s.c.hashcode.in_(select(TI.c.hashcode).where(*waits))
        )
        .group_by(s.c.hashcode, s.c.classpath, s.c.attr_dict)
        .subquery("l")
    )
    same_check = and_(
        TI.c.hashcode == landed.c.hashcode, TI.c.classpath == landed.c.classpath, TI.c.attr_dict == landed.c.attr_dict
    )
    w = (
        select(TI.c.dag_id, TI.c.task_id, TI.c.execution_date, since.label("since"), landed.c.landed)
        .select_from(TI.join(landed, same_check))
        .where(*waits)
        .subquery("w")
    )
    due = case((w.c.landed > w.c.since, w.c.landed), else_=w.c.since)
    row = conn.execute(
        select(w.c.dag_id, w.c.task_id, w.c.execution_date, due, func.count().over())
        .order_by(due, w.c.dag_id, w.c.task_id, w.c.execution_date)
        .limit(1)
    ).first()
    if row is None:
        return 0, None
    return row[4], (row[0], row[1], row[2], row[3])


def waiting_start_by_exec(conn: Connection) -> list[tuple[str | None, datetime]]:
    """(exec_dict, earliest start) of the started waiting tasks, per distinct exec_dict: one row per set of exec
    settings, not per task. 1 statement (a scan of ti_waiting_shardcode)."""
    # The first term repeats ti_waiting_shardcode's predicate word for word: SQLite uses a partial index only then.
    return [
        (exec_dict, start)
        for exec_dict, start in conn.execute(
            select(TI.c.exec_dict, func.min(TI.c.start_date))
            .where(text(WAITING_PREDICATE), TI.c.start_date.is_not(None))
            .group_by(TI.c.exec_dict)
        )
    ]


def _started_before(exec_dict: str | None, cutoff: datetime) -> ColumnElement[bool]:
    same = TI.c.exec_dict.is_(None) if exec_dict is None else TI.c.exec_dict == exec_dict
    return and_(same, TI.c.start_date <= cutoff)


def count_started_before(conn: Connection, cutoffs: Sequence[tuple[str | None, datetime]]) -> int:
    """Waiting tasks that started at or before the cutoff of their exec_dict, over every (exec_dict, cutoff)
    given (one OR'ed term each; an exec_dict not given counts nothing). 1 statement, none for no cutoff."""
    if not cutoffs:
        return 0
    return conn.execute(
        select(func.count())
        .select_from(TI)
        .where(text(WAITING_PREDICATE), or_(*(_started_before(e, c) for e, c in cutoffs)))
    ).scalar_one()


def oldest_started_before(
    conn: Connection, exec_dict: str | None, cutoff: datetime
) -> tuple[str, str, datetime, datetime] | None:
    """(dag_id, task_id, execution_date, start_date) of the waiting task of ``exec_dict`` that started first, at
    or before ``cutoff`` (ties: the first key). 1 statement."""
    row = conn.execute(
        select(TI.c.dag_id, TI.c.task_id, TI.c.execution_date, TI.c.start_date)
        .where(text(WAITING_PREDICATE), _started_before(exec_dict, cutoff))
        .order_by(TI.c.start_date, TI.c.dag_id, TI.c.task_id, TI.c.execution_date)
        .limit(1)
    ).first()
    return None if row is None else (row[0], row[1], row[2], row[3])


def _stuck_rows(conn: Connection, landed_before: datetime, past_limits: PastLimits) -> StuckRows:
    """``waiting_after_landing`` and ``waiting_start_by_exec``; then, when ``past_limits`` names an exec_dict past
    its cutoff, ``count_started_before`` and ``oldest_started_before``. 2 statements, or 4."""
    after_landing = waiting_after_landing(conn, landed_before)
    cutoffs, worst = past_limits(waiting_start_by_exec(conn))
    if worst is None:
        return StuckRows(after_landing, (0, None))
    return StuckRows(after_landing, (count_started_before(conn, cutoffs), oldest_started_before(conn, *worst)))


def read_stuck(engine: Engine, landed_before: datetime, past_limits: PastLimits) -> StuckRows:
    """The stuck-task queries on one connection (2 statements, or 4: ``_stuck_rows``)."""
    with engine.connect() as conn:
        return _stuck_rows(conn, landed_before, past_limits)


def read_status(
    engine: Engine,
    landed_before: datetime,
    past_limits: PastLimits,
    ranges: Sequence[tuple[int, int]],
    zombie_cutoff: datetime,
    shard_limit: int,
) -> StatusRows:
    """Everything `status` reads, on one connection, in this order: the stuck-task queries (``read_stuck``), the
    tasks per state, the waiting tasks per range, the range rounds' last rounds, the leases, the workers, the
    classic runs that last heartbeated before ``zombie_cutoff`` and the tasks stranded outside [0, shard_limit).
    9 statements, 11 when a task waits past its time limit."""
    with engine.connect() as conn:
        return StatusRows(
            _stuck_rows(conn, landed_before, past_limits),
            count_by_state(conn),
            waiting_by_range(conn, ranges),
            worker_rounds(conn),
            lease_sql.load_leases(conn),
            list_workers(conn),
            task_sql.load_zombies(conn, zombie_cutoff),
            stranded_count(conn, shard_limit),
        )
