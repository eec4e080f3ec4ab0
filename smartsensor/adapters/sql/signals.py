"""Landing-signal queries: the table pipelines write to, and Postgres NOTIFY."""

from __future__ import annotations

from datetime import datetime
from typing import Iterable

from sqlalchemy import Connection, delete, func, insert, select, text

from smartsensor.schema.models import PartitionSignal

SG = PartitionSignal.__table__
# Channel on which PostgreSQL tells `serve` processes that tasks may have ended (a round marked some, a user
# set a state), delivered at commit. Payload: the hashcodes that ended, comma separated, or ENDED_ANY when
# unknown or too many for a notification (8,000 bytes): held states requests waiting on them read again.
ENDED_CHANNEL = "smartsensor_ended"
ENDED_ANY = "*"
MAX_ENDED_PAYLOAD = 7_000


# Channel on which PostgreSQL tells workers that tasks became smart_pending (registered, retried, cleared by
# hand), delivered at commit. Payload: their shardcodes, comma separated, or ENDED_ANY: the owning worker starts
# them and pokes their checks at once (a partition may already be there) instead of at its next round.
PENDING_CHANNEL = "smartsensor_pending"


def notify_pending(conn: Connection, shardcodes: Iterable[int | None] | None = None) -> None:
    """On PostgreSQL, NOTIFY ``PENDING_CHANNEL`` at commit naming ``shardcodes`` (None: any); 1 statement.
    On SQLite nothing: the workers' next round starts the pending tasks."""
    if conn.dialect.name != "postgresql":
        return
    codes = None if shardcodes is None else sorted({c for c in shardcodes if c is not None})
    if codes == []:
        return
    payload = ENDED_ANY if codes is None else ",".join(str(c) for c in codes)
    notify(conn, PENDING_CHANNEL, payload if len(payload) <= MAX_ENDED_PAYLOAD else ENDED_ANY)


def pending_shardcodes(payload: str) -> frozenset[int] | None:
    """The shardcodes a ``notify_pending`` payload names; None when it may be any."""
    return ended_hashcodes(payload)


def insert_signal(conn: Connection, name: str, now: datetime) -> None:
    """Record a landing signal (1 statement)."""
    conn.execute(insert(SG).values(name=name, created_at=now))


def notify(conn: Connection, channel: str, payload: str) -> None:
    """Postgres NOTIFY through pg_notify with bound parameters (1 statement)."""
    conn.execute(text("SELECT pg_notify(:channel, :payload)"), {"channel": channel, "payload": payload})


def notify_ended(conn: Connection, hashcodes: Iterable[int] | None = None) -> None:
    """On PostgreSQL, NOTIFY ``ENDED_CHANNEL`` when this transaction commits, naming ``hashcodes`` (None: any
    task may have ended); 1 statement. On SQLite nothing: a watcher sees the commit through
    ``PRAGMA data_version``."""
    if conn.dialect.name != "postgresql":
        return
    payload = ENDED_ANY if hashcodes is None else ",".join(str(h) for h in sorted(set(hashcodes)))
    notify(conn, ENDED_CHANNEL, payload if len(payload) <= MAX_ENDED_PAYLOAD else ENDED_ANY)


def ended_hashcodes(payload: str) -> frozenset[int] | None:
    """The hashcodes a ``notify_ended`` payload names; None when it may be any."""
    if not payload or payload == ENDED_ANY:
        return None
    try:
        return frozenset(int(h) for h in payload.split(","))
    except ValueError:
        return None


def last_signal_id(conn: Connection) -> int:
    """Highest signal id so far, 0 if none (1 statement)."""
    return conn.execute(select(func.coalesce(func.max(SG.c.id), 0))).scalar_one()


def signals_after(conn: Connection, after_id: int) -> list[tuple[int, str]]:
    """Signals newer than ``after_id`` in order (1 statement)."""
    return [(i, n) for i, n in conn.execute(select(SG.c.id, SG.c.name).where(SG.c.id > after_id).order_by(SG.c.id))]


def prune_signals(conn: Connection, before: datetime) -> int:
    """Delete signals older than ``before`` (1 statement)."""
    return conn.execute(delete(SG).where(SG.c.created_at < before)).rowcount
