"""What ``smartsensor status`` reads, and the per-round rows workers write for it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, func, insert, or_, select, update

from smartsensor.domain.states import State
from smartsensor.schema.models import TaskInstance, Worker, WorkerRound

TI = TaskInstance.__table__
WR = WorkerRound.__table__
WK = Worker.__table__


def record_round(
    conn: Connection,
    worker_id: str,
    hostname: str,
    pid: int,
    shard_min: int,
    shard_max: int,
    now: datetime,
    seconds: float,
    summary_json: str,
) -> None:
    """Upsert the worker's last round for `smartsensor status` (2 statements at most)."""
    values = dict(
        hostname=hostname,
        pid=pid,
        shard_min=shard_min,
        shard_max=shard_max,
        last_round_at=now,
        last_round_seconds=seconds,
        last_round_json=summary_json,
    )
    if conn.execute(update(WR).where(WR.c.worker_id == worker_id).values(**values)).rowcount == 0:
        conn.execute(insert(WR).values(worker_id=worker_id, **values))


def count_by_state(conn: Connection) -> dict[str, int]:
    """Task instances per state (1 statement)."""
    return {s or "none": n for s, n in conn.execute(select(TI.c.state, func.count()).group_by(TI.c.state))}


def waiting_by_shard(conn: Connection) -> list[tuple[int, int]]:
    """(shardcode, hashcode) of every waiting smart task (1 statement)."""
    return [
        tuple(r) for r in conn.execute(select(TI.c.shardcode, TI.c.hashcode).where(TI.c.state.in_(State.SMART_WAITING)))
    ]


def worker_rounds(conn: Connection) -> list[dict[str, Any]]:
    """Every worker's last round (1 statement)."""
    return [dict(r) for r in conn.execute(select(WR).order_by(WR.c.shard_min, WR.c.worker_id)).mappings()]


def stranded_count(conn: Connection, limit: int) -> int:
    """Waiting or retrying smart tasks whose shardcode no worker serves: outside [0, limit), left by a
    smaller shard_code_upper_limit (``smartsensor db reshard`` fixes them). 1 statement."""
    return conn.execute(
        select(func.count())
        .select_from(TI)
        .where(
            TI.c.state.in_([*State.SMART_WAITING, State.UP_FOR_RETRY]),
            or_(TI.c.shardcode.is_(None), TI.c.shardcode < 0, TI.c.shardcode >= limit),
        )
    ).scalar_one()


def forget_worker(conn: Connection, worker_id: str) -> None:
    """Drop a worker's status row (clean stop). 1 statement."""
    conn.execute(delete(WR).where(WR.c.worker_id == worker_id))


def list_workers(conn: Connection) -> list[dict[str, Any]]:
    """Every worker row (1 statement)."""
    return [dict(r) for r in conn.execute(select(WK).order_by(WK.c.started_at)).mappings()]
