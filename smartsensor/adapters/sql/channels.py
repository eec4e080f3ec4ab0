"""PostgreSQL's notification channels (LISTEN/NOTIFY), each delivered at commit:

- ``SIGNAL_CHANNEL``: a landing signal was recorded (payload: the partition's canonical name; the signal itself is
  a row of ``partition_signal``, ``adapters.sql.signals``);
- ``PENDING_CHANNEL``: tasks became smart_pending (payload: their shardcodes);
- ``ENDED_CHANNEL``: tasks may have ended (payload: their hashcodes).

A code list is comma separated, or ``ANY_CODES`` when unknown or too long for a notification (8,000 bytes). SQLite
has no channels: the functions here send nothing there, and its listeners poll instead.
"""

from __future__ import annotations

import select
from typing import Any, Iterable, cast

from sqlalchemy import Connection, Engine, text

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


class PgListener:
    """One PostgreSQL connection LISTENing on ``channels`` (constants of this module, never user text), taken out of
    the pool for good: ``close`` invalidates it, since a LISTENing connection must not serve anyone else."""

    def __init__(self, engine: Engine, channels: Iterable[str]) -> None:
        self._raw: Any = engine.raw_connection()
        self._pg: Any = cast(Any, self._raw.dbapi_connection)  # psycopg2's, as LISTEN needs (typed as any DB-API one)
        self._pg.autocommit = True
        with self._pg.cursor() as cur:
            for name in channels:
                cur.execute(f"LISTEN {name}")

    def receive(self, timeout: float, also: Iterable[Any] = ()) -> list[tuple[str, str]]:
        """(channel, payload) of the notifications that arrived within ``timeout`` seconds (possibly none); the wait
        also ends, with none, when one of ``also`` (sockets) is readable."""
        ready, _, _ = select.select([self._pg, *also], [], [], timeout)
        if self._pg not in ready:
            return []
        self._pg.poll()
        notes = [(n.channel, n.payload) for n in self._pg.notifies]
        self._pg.notifies.clear()
        return notes

    def check(self) -> list[tuple[str, str]]:
        """Ask the server a trivial question on this connection (``SELECT 1``) and return the notifications that
        arrived meanwhile. A connection that stalls without closing (no RST, no FIN: a hung proxy or pooler) looks
        like a quiet channel to ``receive``; this call is bounded by the engine's ``[core] sql_call_timeout``
        (its cursor's watchdog), so such a connection fails here and is replaced."""
        with self._pg.cursor() as cur:
            cur.execute("SELECT 1")
        notes = [(n.channel, n.payload) for n in self._pg.notifies]
        self._pg.notifies.clear()
        return notes

    def close(self) -> None:
        """Drop the connection. It is invalidated, never handed back to the pool: after an error it is dead (the
        pool's reset would log a traceback at ERROR), and alive it would still be LISTENing."""
        try:
            self._raw.invalidate()
        except Exception:  # noqa: BLE001 - closing a dead connection
            pass


class SqliteDataVersion:
    """SQLite's ``PRAGMA data_version`` on one connection of its own, kept out of the pool: the number changes when
    another connection commits, which is SQLite's stand-in for a notification."""

    def __init__(self, engine: Engine) -> None:
        self._raw: Any = engine.raw_connection()
        self._cursor: Any = self._raw.cursor()

    def read(self) -> int:
        """The current data version (another connection's commit changes it)."""
        return int(self._cursor.execute("PRAGMA data_version").fetchone()[0])

    def close(self) -> None:
        """Drop the connection, invalidated: a long-lived watcher's connection never goes back to the pool."""
        self._raw.invalidate()
