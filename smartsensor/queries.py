"""Every query smartsensor sends to the metadata database, by name. The one storage seam.

State changes are guarded, idempotent updates (``... WHERE state IN (...)``): a second worker, a
retried round or a user's manual change is never overwritten. Each function documents how many
statements it sends; callers count them through ``smartsensor.db.statement_count``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Sequence

from sqlalchemy import Connection, delete, exists, func, insert, or_, select, text, tuple_, update
from sqlalchemy.exc import IntegrityError

from schema.models import PartitionSignal, ShardLease, State, TaskInstance, Worker, WorkerRound

TI = TaskInstance.__table__
WR = WorkerRound.__table__
SL = ShardLease.__table__
WK = Worker.__table__
SG = PartitionSignal.__table__


@dataclass(frozen=True)
class Fence:
    """A lease a worker writes under: its writes apply only while it still owns this epoch."""

    shard_min: int
    owner: str
    epoch: int


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
    return stmt.where(exists(select(SL.c.shard_min).where(
        SL.c.shard_min == fence.shard_min, SL.c.owner == fence.owner, SL.c.epoch == fence.epoch,
        SL.c.expires_at > now).with_for_update(read=True)))

# Stay far below SQLite's bound-parameter limit (32766) and keep Postgres plans cheap.
IN_CHUNK = 5000

TaskKey = tuple[str, str, datetime]
TryKey = tuple[str, str, datetime, int, datetime]  # a task key plus the try it is in: try_number, start_date


@dataclass(frozen=True)
class WaitingTask:
    """A task instance a shard worker is responsible for, as loaded at the start of a round."""

    dag_id: str
    task_id: str
    execution_date: datetime
    state: str
    try_number: int
    max_tries: int
    start_date: datetime | None
    classpath: str
    attr_dict: str
    exec_dict: str
    hashcode: int
    shardcode: int

    @property
    def key(self) -> TaskKey:
        return (self.dag_id, self.task_id, self.execution_date)

    @property
    def try_key(self) -> TryKey:
        """The key of this try: a later try or a reset (new start_date) has another one."""
        assert self.start_date is not None
        return (self.dag_id, self.task_id, self.execution_date, self.try_number, self.start_date)


def _chunks(items: Sequence[Any], size: int = IN_CHUNK) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


# -- registration ------------------------------------------------------------------------------

def get_task(conn: Connection, dag_id: str, task_id: str, execution_date: datetime) -> dict[str, Any] | None:
    """One task instance by primary key (1 statement)."""
    row = conn.execute(select(TI).where(
        TI.c.dag_id == dag_id, TI.c.task_id == task_id, TI.c.execution_date == execution_date)).mappings().first()
    return dict(row) if row else None


def existing_states(conn: Connection, execution_date: datetime, dag_ids: Iterable[str]) -> dict[tuple[str, str], str]:
    """{(dag_id, task_id): state} of the task instances of these DAGs on one execution date.
    1 statement per IN_CHUNK dag_ids."""
    out: dict[tuple[str, str], str] = {}
    for chunk in _chunks(sorted(set(dag_ids))):
        for dag_id, task_id, state in conn.execute(select(TI.c.dag_id, TI.c.task_id, TI.c.state).where(
                TI.c.execution_date == execution_date, TI.c.dag_id.in_(list(chunk)))):
            out[(dag_id, task_id)] = state
    return out


def insert_tasks_bulk(conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
    """Insert new task instances: one executemany per IN_CHUNK rows (registration, benchmarks)."""
    for chunk in _chunks(list(rows)):
        conn.execute(insert(TI), list(chunk))


def delete_all_tasks_for_benchmark(conn: Connection) -> int:
    """Empty task_instance (scripts/bench.py only, on its own throwaway database). 1 statement."""
    return conn.execute(delete(TI)).rowcount


def reset_to_waiting_for_benchmark(conn: Connection, now: datetime) -> int:
    """Every task waiting in its first try since ``now`` (scripts/bench.py only: the same state for each strategy)."""
    return conn.execute(update(TI).values(state=State.SMART_RUNNING, try_number=1, start_date=now, end_date=None,
                                          hostname=None, error=None)).rowcount


def reset_task(conn: Connection, row: dict[str, Any]) -> None:
    """Overwrite a task instance with a fresh registration (``submit --clear``; 1 statement)."""
    values = {k: v for k, v in row.items() if k not in ("dag_id", "task_id", "execution_date")}
    conn.execute(update(TI).where(
        TI.c.dag_id == row["dag_id"], TI.c.task_id == row["task_id"],
        TI.c.execution_date == row["execution_date"]).values(**values))


def list_tasks(conn: Connection, state: str | None = None, dag_id: str | None = None) -> list[dict[str, Any]]:
    """Task instances, optionally filtered by state and dag_id, in key order (1 statement)."""
    query = select(TI).order_by(TI.c.dag_id, TI.c.task_id, TI.c.execution_date)
    if state is not None:
        query = query.where(TI.c.state == state)
    if dag_id is not None:
        query = query.where(TI.c.dag_id == dag_id)
    return [dict(r) for r in conn.execute(query).mappings()]


def set_state(conn: Connection, key: TaskKey, new_state: str, from_states: Sequence[str] | None = None,
              now: datetime | None = None, error: str | None = None, try_number: int | None = None) -> bool:
    """Set one task's state (a user's manual change when ``from_states`` is None). 1 statement.

    ``try_number``: only while the task is still in that try (a run ending its own try never ends a
    later one that another process started after this one was given up for dead).
    """
    query = update(TI).where(TI.c.dag_id == key[0], TI.c.task_id == key[1], TI.c.execution_date == key[2])
    if from_states is not None:
        query = query.where(TI.c.state.in_(list(from_states)))
    if try_number is not None:
        query = query.where(TI.c.try_number == try_number)
    values: dict[str, Any] = {"state": new_state, "updated_at": now or datetime.utcnow()}
    if new_state in State.FINISHED or new_state == State.UP_FOR_RETRY:
        values["end_date"] = now or datetime.utcnow()
    if from_states is None and new_state in (State.SCHEDULED, State.SMART_PENDING):
        # a user sending a task back to wait starts a fresh try: timeouts count from the next start
        values.update(start_date=None, end_date=None, hostname=None, error=None)
    if error is not None:
        values["error"] = error
    return conn.execute(query.values(**values)).rowcount == 1


# -- shard worker ------------------------------------------------------------------------------

def load_waiting(conn: Connection, shard_min: int, shard_max: int) -> list[WaitingTask]:
    """Task instances in smart_pending/smart_running with shardcode in [shard_min, shard_max). 1 statement."""
    cols = [TI.c[name] for name in WaitingTask.__dataclass_fields__]
    rows = conn.execute(select(*cols).where(
        TI.c.state.in_(State.SMART_WAITING), TI.c.shardcode >= shard_min, TI.c.shardcode < shard_max))
    return [WaitingTask(*row) for row in rows]


def start_pending(conn: Connection, shard_min: int, shard_max: int, now: datetime, hostname: str,
                  fence: Fence | None = None) -> int:
    """smart_pending → smart_running for the range, stamping the start of this try. 1 statement."""
    return conn.execute(_fenced(update(TI).where(
        TI.c.state == State.SMART_PENDING, TI.c.shardcode >= shard_min, TI.c.shardcode < shard_max,
    ), fence, now).values(state=State.SMART_RUNNING, start_date=func.coalesce(TI.c.start_date, now),
                          hostname=hostname, updated_at=now)).rowcount


def mark_hashes(conn: Connection, hashcodes: Sequence[int], shard_min: int, shard_max: int, new_state: str,
                now: datetime, error: str | None = None, fence: Fence | None = None) -> int:
    """Every waiting task with one of ``hashcodes`` in the range → ``new_state``.

    Only for hashes whose tasks all share one check (no collision). 1 statement per IN_CHUNK hashes.
    """
    total = 0
    values: dict[str, Any] = {"state": new_state, "end_date": now, "updated_at": now}
    if error is not None:
        values["error"] = error
    for chunk in _chunks(list(hashcodes)):
        total += conn.execute(_fenced(update(TI).where(
            TI.c.hashcode.in_(list(chunk)), TI.c.shardcode >= shard_min, TI.c.shardcode < shard_max,
            TI.c.state.in_(State.SMART_WAITING)), fence, now).values(**values)).rowcount
    return total


def mark_check(conn: Connection, hashcode: int, classpath: str, attr_dict: str, new_state: str,
               now: datetime, error: str | None = None, fence: Fence | None = None) -> int:
    """Waiting tasks of one exact check (hash AND classpath AND attr_dict) → ``new_state``.

    Used when two different checks collide on a hash, so that they are never marked together.
    1 statement.
    """
    values: dict[str, Any] = {"state": new_state, "end_date": now, "updated_at": now}
    if error is not None:
        values["error"] = error
    return conn.execute(_fenced(update(TI).where(
        TI.c.hashcode == hashcode, TI.c.classpath == classpath, TI.c.attr_dict == attr_dict,
        TI.c.state.in_(State.SMART_WAITING)), fence, now).values(**values)).rowcount


def end_tries(conn: Connection, tries: Sequence[TryKey], new_state: str, now: datetime,
              error: str | None = None, fence: Fence | None = None) -> int:
    """End these tries → ``new_state``: a timeout (up_for_retry, failed or skipped), or a row that
    cannot be planned (failed, with the reason).

    Guarded on the exact try the worker saw (state smart_running, try_number and start_date), so a
    round that loaded a try which was retried or reset by hand meanwhile never ends the newer try.
    1 statement per IN_CHUNK tries.
    """
    total = 0
    values: dict[str, Any] = {"state": new_state, "end_date": now, "updated_at": now}
    if error is not None:
        values["error"] = error
    for chunk in _chunks(list(tries)):
        total += conn.execute(_fenced(update(TI).where(
            tuple_(TI.c.dag_id, TI.c.task_id, TI.c.execution_date, TI.c.try_number, TI.c.start_date).in_(list(chunk)),
            TI.c.state == State.SMART_RUNNING), fence, now).values(**values)).rowcount
    return total


def record_round(conn: Connection, worker_id: str, hostname: str, pid: int, shard_min: int, shard_max: int,
                 now: datetime, seconds: float, summary_json: str) -> None:
    """Upsert the worker's last round for `smartsensor status` (2 statements at most)."""
    values = dict(hostname=hostname, pid=pid, shard_min=shard_min, shard_max=shard_max, last_round_at=now,
                  last_round_seconds=seconds, last_round_json=summary_json)
    if conn.execute(update(WR).where(WR.c.worker_id == worker_id).values(**values)).rowcount == 0:
        conn.execute(insert(WR).values(worker_id=worker_id, **values))


# -- leases (HA) -------------------------------------------------------------------------------

def ensure_leases(conn: Connection, ranges: Sequence[Any]) -> None:
    """Create a lease row for every configured range that has none (idempotent; 1 + n statements)."""
    have = {lo for (lo,) in conn.execute(select(SL.c.shard_min))}
    for r in ranges:
        if r.lo not in have:
            try:
                with conn.begin_nested():
                    conn.execute(insert(SL).values(shard_min=r.lo, shard_max=r.hi, owner=None, epoch=0,
                                                   expires_at=None))
            except IntegrityError:  # another worker created it first
                pass


def _free_or_expired(shard_min: int, seen_epoch: int, now: datetime) -> tuple[Any, ...]:
    """WHERE clauses: this lease row, still at the epoch read, with no owner or an expired one."""
    return (SL.c.shard_min == shard_min, SL.c.epoch == seen_epoch,
            or_(SL.c.owner.is_(None), SL.c.expires_at.is_(None), SL.c.expires_at <= now))


def reshape_lease(conn: Connection, shard_min: int, seen_epoch: int, shard_max: int | None, now: datetime) -> bool:
    """Fit a free or expired lease row to a changed ``shard_ranges``: new upper bound (epoch bumped, so
    nothing written under the old shape passes a fence again), or, with ``shard_max`` None, delete a
    row whose range is no longer configured. A row a live worker still holds is left alone.
    Compare-and-set on the epoch read. 1 statement.
    """
    claimable = _free_or_expired(shard_min, seen_epoch, now)
    if shard_max is None:
        return conn.execute(delete(SL).where(*claimable)).rowcount == 1
    return conn.execute(update(SL).where(*claimable).values(
        shard_max=shard_max, owner=None, epoch=SL.c.epoch + 1, expires_at=None)).rowcount == 1


def upsert_worker(conn: Connection, worker_id: str, hostname: str, pid: int, started_at: datetime,
                  now: datetime) -> None:
    """Record this worker's heartbeat (1-2 statements)."""
    if conn.execute(update(WK).where(WK.c.worker_id == worker_id).values(heartbeat_at=now)).rowcount == 0:
        conn.execute(insert(WK).values(worker_id=worker_id, hostname=hostname, pid=pid, started_at=started_at,
                                       heartbeat_at=now))


def delete_worker(conn: Connection, worker_id: str) -> None:
    """Remove a worker row (clean stop). 1 statement."""
    conn.execute(delete(WK).where(WK.c.worker_id == worker_id))


def live_workers(conn: Connection, since: datetime) -> int:
    """Workers that heartbeated after ``since`` (1 statement)."""
    return conn.execute(select(func.count()).select_from(WK).where(WK.c.heartbeat_at > since)).scalar_one()


def list_workers(conn: Connection) -> list[dict[str, Any]]:
    """Every worker row (1 statement)."""
    return [dict(r) for r in conn.execute(select(WK).order_by(WK.c.started_at)).mappings()]


def load_leases(conn: Connection) -> list[dict[str, Any]]:
    """Every lease row in range order (1 statement)."""
    return [dict(r) for r in conn.execute(select(SL).order_by(SL.c.shard_min)).mappings()]


def renew_leases(conn: Connection, owner: str, now: datetime, expires_at: datetime) -> int:
    """Extend every lease ``owner`` still holds unexpired. A lapsed lease is not renewed (1 statement)."""
    return conn.execute(update(SL).where(SL.c.owner == owner, SL.c.expires_at > now).values(
        expires_at=expires_at)).rowcount


def claim_lease(conn: Connection, shard_min: int, seen_epoch: int, owner: str, now: datetime,
                expires_at: datetime) -> bool:
    """Take a free or expired range: compare-and-set on the epoch read, bumping it. 1 statement.

    On Postgres a row locked by another transaction (its owner mid-write, or paused there) is
    skipped rather than waited for, so a heartbeat never blocks; the claim is retried next beat.
    """
    claimable = _free_or_expired(shard_min, seen_epoch, now)
    unlocked = select(SL.c.shard_min).where(*claimable).with_for_update(skip_locked=True)
    return conn.execute(update(SL).where(*claimable, SL.c.shard_min.in_(unlocked)).values(
        owner=owner, epoch=SL.c.epoch + 1, expires_at=expires_at)).rowcount == 1


def release_lease(conn: Connection, shard_min: int, owner: str, epoch: int) -> bool:
    """Give one range back at once (rebalance). 1 statement."""
    return conn.execute(update(SL).where(SL.c.shard_min == shard_min, SL.c.owner == owner, SL.c.epoch == epoch)
                        .values(owner=None, expires_at=None)).rowcount == 1


def release_all_leases(conn: Connection, owner: str) -> int:
    """Give every range of ``owner`` back (clean stop). 1 statement."""
    return conn.execute(update(SL).where(SL.c.owner == owner).values(owner=None, expires_at=None)).rowcount


# -- signals -----------------------------------------------------------------------------------

def insert_signal(conn: Connection, name: str, now: datetime) -> None:
    """Record a landing signal (1 statement)."""
    conn.execute(insert(SG).values(name=name, created_at=now))


def notify(conn: Connection, channel: str, payload: str) -> None:
    """Postgres NOTIFY through pg_notify with bound parameters (1 statement)."""
    conn.execute(text("SELECT pg_notify(:channel, :payload)"), {"channel": channel, "payload": payload})


def last_signal_id(conn: Connection) -> int:
    """Highest signal id so far, 0 if none (1 statement)."""
    return conn.execute(select(func.coalesce(func.max(SG.c.id), 0))).scalar_one()


def signals_after(conn: Connection, after_id: int) -> list[tuple[int, str]]:
    """Signals newer than ``after_id`` in order (1 statement)."""
    return [(i, n) for i, n in conn.execute(select(SG.c.id, SG.c.name).where(SG.c.id > after_id).order_by(SG.c.id))]


def prune_signals(conn: Connection, before: datetime) -> int:
    """Delete signals older than ``before`` (1 statement)."""
    return conn.execute(delete(SG).where(SG.c.created_at < before)).rowcount


# -- scheduler ---------------------------------------------------------------------------------

def load_up_for_retry(conn: Connection) -> list[dict[str, Any]]:
    """Task instances waiting to be retried (1 statement)."""
    return [dict(r) for r in conn.execute(select(
        TI.c.dag_id, TI.c.task_id, TI.c.execution_date, TI.c.end_date, TI.c.exec_dict, TI.c.classpath,
        TI.c.try_number).where(TI.c.state == State.UP_FOR_RETRY)).mappings()]


def requeue_retry(conn: Connection, key: TaskKey, try_number: int, new_state: str, now: datetime) -> bool:
    """up_for_retry → new_state for the next try, if nobody changed it meanwhile. 1 statement."""
    return conn.execute(update(TI).where(
        TI.c.dag_id == key[0], TI.c.task_id == key[1], TI.c.execution_date == key[2],
        TI.c.state == State.UP_FOR_RETRY, TI.c.try_number == try_number,
    ).values(state=new_state, try_number=try_number + 1, start_date=None, end_date=None, hostname=None,
             updated_at=now)).rowcount == 1


def claim_scheduled(conn: Connection, key: TaskKey, now: datetime, hostname: str) -> bool:
    """scheduled → running for a classic-mode run; False if another process got there first. 1 statement.

    start_date is kept when set: a run handed back on SIGTERM continues its try, not a new one.
    """
    return conn.execute(update(TI).where(
        TI.c.dag_id == key[0], TI.c.task_id == key[1], TI.c.execution_date == key[2],
        TI.c.state == State.SCHEDULED,
    ).values(state=State.RUNNING, start_date=func.coalesce(TI.c.start_date, now), end_date=None, hostname=hostname,
             updated_at=now)).rowcount == 1


def hand_back_running(conn: Connection, key: TaskKey, now: datetime) -> bool:
    """running → scheduled for a classic run stopped by SIGTERM/SIGINT (a scheduler stop, a deploy).

    The try goes on in the next run: try_number and start_date are kept, so its timeout still counts
    from the first start. False if the task left `running` meanwhile. 1 statement.
    """
    return conn.execute(update(TI).where(
        TI.c.dag_id == key[0], TI.c.task_id == key[1], TI.c.execution_date == key[2],
        TI.c.state == State.RUNNING,
    ).values(state=State.SCHEDULED, hostname=None, updated_at=now)).rowcount == 1


def heartbeat_running(conn: Connection, key: TaskKey, now: datetime) -> bool:
    """A classic run says it is alive; False once its task left `running` (1 statement)."""
    return conn.execute(update(TI).where(
        TI.c.dag_id == key[0], TI.c.task_id == key[1], TI.c.execution_date == key[2],
        TI.c.state == State.RUNNING).values(updated_at=now)).rowcount == 1


def load_zombies(conn: Connection, cutoff: datetime) -> list[dict[str, Any]]:
    """`running` task instances whose run last heartbeated before ``cutoff`` (1 statement)."""
    return [dict(r) for r in conn.execute(select(
        TI.c.dag_id, TI.c.task_id, TI.c.execution_date, TI.c.try_number, TI.c.exec_dict, TI.c.updated_at,
        TI.c.hostname).where(TI.c.state == State.RUNNING, TI.c.updated_at < cutoff)).mappings()]


def end_zombie(conn: Connection, key: TaskKey, seen_updated_at: datetime, new_state: str, now: datetime,
               error: str) -> bool:
    """End a dead run's task, unless it heartbeated or changed since it was read (1 statement)."""
    return conn.execute(update(TI).where(
        TI.c.dag_id == key[0], TI.c.task_id == key[1], TI.c.execution_date == key[2],
        TI.c.state == State.RUNNING, TI.c.updated_at == seen_updated_at,
    ).values(state=new_state, end_date=now, updated_at=now, error=error)).rowcount == 1


def keys_in_state(conn: Connection, state: str, limit: int | None = None) -> list[TaskKey]:
    """Keys of task instances in ``state``, oldest execution date first (1 statement)."""
    query = select(TI.c.dag_id, TI.c.task_id, TI.c.execution_date).where(TI.c.state == state).order_by(
        TI.c.execution_date, TI.c.dag_id, TI.c.task_id)
    if limit is not None:
        query = query.limit(limit)
    return [tuple(r) for r in conn.execute(query)]  # type: ignore[misc]


def reshard(conn: Connection, limit: int) -> int:
    """Recompute every row's shardcode as hashcode mod ``limit`` (after shard_code_upper_limit changed).

    Not a state change, so safe while workers run: their writes stay guarded by state (and try), a
    range-guarded success mark of a moved row simply misses it, and the new owner picks it up next
    round. 1 statement.
    """
    # ((h % n) + n) % n: SQL's % keeps the dividend's sign, Python's (used at registration) does not.
    wanted = ((TI.c.hashcode % limit) + limit) % limit
    return conn.execute(update(TI).where(TI.c.hashcode.is_not(None), or_(
        TI.c.shardcode.is_(None), TI.c.shardcode != wanted)).values(shardcode=wanted)).rowcount


# -- status ------------------------------------------------------------------------------------

def count_by_state(conn: Connection) -> dict[str, int]:
    """Task instances per state (1 statement)."""
    return {s or "none": n for s, n in conn.execute(select(TI.c.state, func.count()).group_by(TI.c.state))}


def waiting_by_shard(conn: Connection) -> list[tuple[int, int]]:
    """(shardcode, hashcode) of every waiting smart task (1 statement)."""
    return [tuple(r) for r in conn.execute(select(TI.c.shardcode, TI.c.hashcode).where(
        TI.c.state.in_(State.SMART_WAITING)))]  # type: ignore[misc]


def worker_rounds(conn: Connection) -> list[dict[str, Any]]:
    """Every worker's last round (1 statement)."""
    return [dict(r) for r in conn.execute(select(WR).order_by(WR.c.shard_min, WR.c.worker_id)).mappings()]


def stranded_count(conn: Connection, limit: int) -> int:
    """Waiting or retrying smart tasks whose shardcode no worker serves: outside [0, limit), left by a
    smaller shard_code_upper_limit (``smartsensor db reshard`` fixes them). 1 statement."""
    return conn.execute(select(func.count()).select_from(TI).where(
        TI.c.state.in_([*State.SMART_WAITING, State.UP_FOR_RETRY]),
        or_(TI.c.shardcode.is_(None), TI.c.shardcode < 0, TI.c.shardcode >= limit))).scalar_one()


def forget_worker(conn: Connection, worker_id: str) -> None:
    """Drop a worker's status row (clean stop). 1 statement."""
    conn.execute(delete(WR).where(WR.c.worker_id == worker_id))

