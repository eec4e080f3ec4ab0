"""Landing signals: a pipeline says "partition X just landed" and the owning worker checks at once.

A signal is only a hint: the worker still verifies in the metastore before marking anything. It is
recorded in ``partition_signal``; on Postgres a NOTIFY on ``channels.SIGNAL_CHANNEL`` wakes listeners immediately, on
SQLite listeners poll the table every ``poll_interval`` seconds. The worker's listener thread (``listen_for_signals``)
also hears ``channels.PENDING_CHANNEL`` (new pending tasks) on PostgreSQL, and ``ChannelListener`` serves the ended
watch's ``channels.ENDED_CHANNEL`` too.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta
from typing import Callable

from sqlalchemy import Engine

from smartsensor.adapters.sql import channels as channel_sql, signals as signal_sql
from smartsensor.domain import clock
from smartsensor.sensors.errors import first_line
from smartsensor.sensors.partitions import format_partition_name, parse_partition_name

log = logging.getLogger(__name__)

SIGNAL_RETENTION = timedelta(hours=1)  # signals are hints for the next second; older ones are pruned


def canonical_signal(name: str) -> tuple[str, tuple[str, str]]:
    """Validate ``db.table/k=v/...`` and return (canonical name, (db, table))."""
    db, table, spec = parse_partition_name("signal", name)
    return format_partition_name(db, table, spec), (db, table)


def send_signal(engine: Engine, name: str) -> str:
    """Record a landing signal (and NOTIFY on Postgres, delivered at commit). Returns the canonical name."""
    canonical, _ = canonical_signal(name)
    signal_sql.record_signal(engine, canonical, clock.now())
    return canonical


def prune_old_signals(engine: Engine, now: datetime) -> None:
    """Drop the landing signals older than ``SIGNAL_RETENTION`` (1 statement)."""
    signal_sql.delete_signals_before(engine, now - SIGNAL_RETENTION)


class ChannelListener:
    """Waits for notifications: LISTEN on PostgreSQL's channels (``adapters.sql.channels``); on SQLite, which has
    none, a short poll of partition_signal for landing signals. ``channel`` (Postgres): the landing signals'
    (``SIGNAL_CHANNEL``) by default, or ``ENDED_CHANNEL``; ``also``: more channels (Postgres only), whose
    notifications ``wait_all`` returns with their channel."""

    def __init__(
        self,
        engine: Engine,
        poll_interval: float = 0.1,
        channel: str = channel_sql.SIGNAL_CHANNEL,
        also: tuple[str, ...] = (),
    ) -> None:
        self.engine = engine
        self.poll_interval = poll_interval
        self._pg: channel_sql.PgListener | None = None
        self._last_id = 0
        if engine.dialect.name != "postgresql":
            self._last_id = signal_sql.newest_signal_id(engine)
        else:
            self._pg = channel_sql.PgListener(engine, (channel, *also))
        self.channel = channel

    def wait(self, timeout: float) -> list[str]:
        """Payloads (landing signals' names, by default) received within ``timeout`` seconds on ``channel``
        (possibly empty)."""
        return [payload for channel, payload in self.wait_all(timeout) if channel == self.channel]

    def wait_all(self, timeout: float) -> list[tuple[str, str]]:
        """(channel, payload) of every notification received within ``timeout`` seconds (possibly empty)."""
        if self._pg is not None:
            return self._pg.receive(timeout)
        deadline = time.monotonic() + timeout
        while True:
            rows = signal_sql.read_signals_after(self.engine, self._last_id)
            if rows:
                self._last_id = rows[-1][0]
                return [(self.channel, name) for _, name in rows]
            if time.monotonic() >= deadline:
                return []
            time.sleep(self.poll_interval)

    def close(self) -> None:
        """Drop the LISTEN connection (``PgListener.close``: never handed back to the pool)."""
        if self._pg is not None:
            self._pg.close()
            self._pg = None


def listen_for_signals(
    engine: Engine,
    poll_interval: float,
    on_signal: Callable[[set[tuple[str, str]]], None],
    stopping: threading.Event,
    on_pending: Callable[[set[int] | None], None] | None = None,
    listening: threading.Event | None = None,
) -> None:
    """A worker's signal thread: call ``on_signal`` with the tables of landing signals until ``stopping``, and
    ``on_pending`` with the shardcodes of newly pending tasks (None: any), on PostgreSQL. ``listening`` is set once
    the listener is open (every signal from then on is heard) or its first attempt failed.

    A DB error (a restart, a dropped connection) is one WARNING per outage, no traceback; the listener
    reconnects every second meanwhile, and the rounds still run on their timer.
    """
    listener = None
    failing = False
    while not stopping.is_set():
        try:
            if listener is None:
                listener = ChannelListener(
                    engine, poll_interval, also=(channel_sql.PENDING_CHANNEL,) if on_pending is not None else ()
                )
                if failing:
                    log.info("signal listener: listening again")
                failing = False
                if listening is not None:
                    listening.set()
            notes = listener.wait_all(0.5)
        except Exception as exc:  # noqa: BLE001 - a DB outage: retry
            log.log(logging.DEBUG if failing else logging.WARNING, "signal listener: %s", first_line(exc))
            failing = True
            if listening is not None:
                listening.set()
            if listener is not None:
                listener.close()
            listener = None
            stopping.wait(1.0)
            continue
        tables, names = set(), [payload for channel, payload in notes if channel == channel_sql.SIGNAL_CHANNEL]
        pending = [payload for channel, payload in notes if channel == channel_sql.PENDING_CHANNEL]
        if pending and on_pending is not None:
            shards = [channel_sql.pending_shardcodes(p) for p in pending]
            on_pending(None if any(s is None for s in shards) else set().union(*shards))  # type: ignore[arg-type]  # no None left when none is None
        for name in names:
            try:
                tables.add(canonical_signal(name)[1])
            except ValueError:
                log.warning("ignoring malformed signal %r", name)
        if tables:
            on_signal(tables)
    if listener is not None:
        listener.close()
