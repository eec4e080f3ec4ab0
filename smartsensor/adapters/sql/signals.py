"""Landing-signal queries: the ``partition_signal`` table pipelines write to ("this partition landed"). The
PostgreSQL NOTIFY that wakes the workers for one is in ``adapters.sql.channels``."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, delete, func, insert, select

from smartsensor.schema.models import PartitionSignal

SG = PartitionSignal.__table__


def insert_signal(conn: Connection, name: str, now: datetime) -> None:
    """Record a landing signal (1 statement)."""
    conn.execute(insert(SG).values(name=name, created_at=now))


def last_signal_id(conn: Connection) -> int:
    """Highest signal id so far, 0 if none (1 statement)."""
    return conn.execute(select(func.coalesce(func.max(SG.c.id), 0))).scalar_one()


def signals_after(conn: Connection, after_id: int) -> list[tuple[int, str]]:
    """Signals newer than ``after_id`` in order (1 statement)."""
    return [(i, n) for i, n in conn.execute(select(SG.c.id, SG.c.name).where(SG.c.id > after_id).order_by(SG.c.id))]


def prune_signals(conn: Connection, before: datetime) -> int:
    """Delete signals older than ``before`` (1 statement)."""
    return conn.execute(delete(SG).where(SG.c.created_at < before)).rowcount
