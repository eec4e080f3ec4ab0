"""Landing-signal queries: the ``partition_signal`` table pipelines write to ("this partition landed"). The
PostgreSQL NOTIFY that wakes the workers for one is in ``adapters.sql.channels``.

The functions on an ``Engine`` are the operations the services call, each in its own connection or transaction;
those on a ``Connection`` are the statements they are made of."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, Engine, delete, func, insert, select

from smartsensor.adapters.sql import channels as channel_sql
from smartsensor.schema.models import partition_signal as SG


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


def record_signal(engine: Engine, name: str, now: datetime) -> None:
    """Record a landing signal and, on PostgreSQL, NOTIFY its channel, delivered at commit: one transaction
    (1 statement, 2 on PostgreSQL)."""
    with engine.begin() as conn:
        insert_signal(conn, name, now)
        channel_sql.notify_signal(conn, name)


def delete_signals_before(engine: Engine, before: datetime) -> int:
    """Delete the signals older than ``before`` in a transaction of its own; how many went (1 statement)."""
    with engine.begin() as conn:
        return prune_signals(conn, before)


def newest_signal_id(engine: Engine) -> int:
    """``last_signal_id`` on a connection of its own (1 statement)."""
    with engine.connect() as conn:
        return last_signal_id(conn)


def read_signals_after(engine: Engine, after_id: int) -> list[tuple[int, str]]:
    """``signals_after`` on a connection of its own (1 statement)."""
    with engine.connect() as conn:
        return signals_after(conn, after_id)


class SqlLandingSignals:
    """``ports.LandingSignals`` on the ``partition_signal`` table (and PostgreSQL's NOTIFY)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def record(self, canonical_name: str, now: datetime) -> None:
        """``record_signal``."""
        record_signal(self.engine, canonical_name, now)

    def delete_before(self, cutoff: datetime) -> int:
        """``delete_signals_before``."""
        return delete_signals_before(self.engine, cutoff)
