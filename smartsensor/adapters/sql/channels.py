"""PostgreSQL's notification channels (LISTEN/NOTIFY), each delivered at commit:

- ``SIGNAL_CHANNEL``: a landing signal was recorded (payload: the partition's canonical name; the signal itself is
  a row of ``partition_signal``, ``adapters.sql.signals``);
- ``PENDING_CHANNEL``: tasks became smart_pending (payload: their shardcodes);
- ``ENDED_CHANNEL``: tasks may have ended (payload: their hashcodes).

A code list is comma separated, or ``ANY_CODES`` when unknown or too long for a notification (8,000 bytes). SQLite
has no channels: the functions here send nothing there, and its listeners poll instead.
"""

from __future__ import annotations

from typing import Iterable

from sqlalchemy import Connection, text

# Channel on which a pipeline's landing signal wakes every worker at once. Payload: the partition's canonical name.
SIGNAL_CHANNEL = "smartsensor_signal"

# Channel on which PostgreSQL tells `serve` processes that tasks may have ended (a round marked some, a user
# set a state). Payload: the hashcodes that ended, or ANY_CODES: held states requests waiting on them read again.
ENDED_CHANNEL = "smartsensor_ended"

# Channel on which PostgreSQL tells workers that tasks became smart_pending (registered, retried, cleared by
# hand). Payload: their shardcodes, or ANY_CODES: the owning worker starts them and pokes their checks at once (a
# partition may already be there) instead of at its next round.
PENDING_CHANNEL = "smartsensor_pending"

ANY_CODES = "*"
MAX_CODES_PAYLOAD = 7_000


def notify(conn: Connection, channel: str, payload: str) -> None:
    """Postgres NOTIFY through pg_notify with bound parameters (1 statement)."""
    conn.execute(text("SELECT pg_notify(:channel, :payload)"), {"channel": channel, "payload": payload})


def _notify_codes(conn: Connection, channel: str, codes: Iterable[int] | None) -> None:
    """NOTIFY ``channel`` naming ``codes`` (None: any), or ANY_CODES when they are too many (1 statement)."""
    payload = ANY_CODES if codes is None else ",".join(str(c) for c in sorted(set(codes)))
    notify(conn, channel, payload if len(payload) <= MAX_CODES_PAYLOAD else ANY_CODES)


def _codes(payload: str) -> frozenset[int] | None:
    """The codes a payload names; None when it may be any."""
    if not payload or payload == ANY_CODES:
        return None
    try:
        return frozenset(int(c) for c in payload.split(","))
    except ValueError:
        return None


def notify_pending(conn: Connection, shardcodes: Iterable[int | None] | None = None) -> None:
    """On PostgreSQL, NOTIFY ``PENDING_CHANNEL`` at commit naming ``shardcodes`` (None: any); 1 statement.
    On SQLite nothing: the workers' next round starts the pending tasks."""
    if conn.dialect.name != "postgresql":
        return
    codes = None if shardcodes is None else {c for c in shardcodes if c is not None}
    if codes == set():
        return
    _notify_codes(conn, PENDING_CHANNEL, codes)


def pending_shardcodes(payload: str) -> frozenset[int] | None:
    """The shardcodes a ``notify_pending`` payload names; None when it may be any."""
    return _codes(payload)


def notify_ended(conn: Connection, hashcodes: Iterable[int] | None = None) -> None:
    """On PostgreSQL, NOTIFY ``ENDED_CHANNEL`` when this transaction commits, naming ``hashcodes`` (None: any
    task may have ended); 1 statement. On SQLite nothing: a watcher sees the commit through
    ``PRAGMA data_version``."""
    if conn.dialect.name != "postgresql":
        return
    _notify_codes(conn, ENDED_CHANNEL, hashcodes)


def ended_hashcodes(payload: str) -> frozenset[int] | None:
    """The hashcodes a ``notify_ended`` payload names; None when it may be any."""
    return _codes(payload)


def notify_signal(conn: Connection, canonical_name: str) -> None:
    """On PostgreSQL, NOTIFY ``SIGNAL_CHANNEL`` at commit with a landing signal's canonical partition name
    (1 statement). On SQLite nothing: the listeners poll ``partition_signal``."""
    if conn.dialect.name == "postgresql":
        notify(conn, SIGNAL_CHANNEL, canonical_name)
