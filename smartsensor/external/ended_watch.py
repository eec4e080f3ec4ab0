"""Tells a `serve` process that tasks may have ended, so that long-polling states requests read their keys again
at once instead of on a timer.

PostgreSQL: a thread LISTENs on ``ENDED_CHANNEL``, which every round that marks tasks (and `set-state`) NOTIFYs
at commit, from any host, naming the hashcodes that ended: only the requests waiting on one of them wake. It waits
for notifications, not for a clock, so it stays a thread of its own.
SQLite (one host): a periodic job of ``serve``'s ``PeriodicJobs`` polls ``PRAGMA data_version`` on one connection,
which changes whenever another connection commits, and every request wakes. Either way a wake-up is only a hint:
the request reads its keys again and answers only what the database says. A database outage wakes every waiter
too (they read again and get the error or the answer), and the watch reconnects every second.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from typing import AbstractSet, Iterable

from sqlalchemy import Engine

from smartsensor.adapters.periodic import PeriodicJobs
from smartsensor.adapters.sql.channels import ENDED_CHANNEL, SqliteDataVersion, ended_hashcodes
from smartsensor.sensors.errors import first_line
from smartsensor.service.signals import ChannelListener

log = logging.getLogger(__name__)

RECENT = 10_000  # changes remembered for requests that read between two of them; an older one wakes everyone
RECONNECT_AFTER = 1.0  # seconds between two tries to reach the database while it is down


class EndedWatch:
    """Bumps ``generation`` when tasks may have ended (remembering which hashcodes, None for any), from a thread
    (PostgreSQL) or a periodic job (SQLite); coroutines ``await changed``."""

    JOB = "ended-watch"

    def __init__(self, engine: Engine, poll_interval: float = 0.2) -> None:
        self.engine = engine
        self.poll_interval = poll_interval
        self.generation = 0
        self._recent: deque[tuple[int, frozenset[int] | None]] = deque(maxlen=RECENT)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False
        self._data_version: SqliteDataVersion | None = None  # SQLite: the polled connection, and its last reading
        self._version = 0
        self._retry_at = 0.0

    def start(self, jobs: PeriodicJobs) -> None:
        """Start watching: a thread on PostgreSQL, a job on ``jobs`` (started by the caller) on SQLite. Call from
        the event loop that will await ``changed``."""
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        if self.engine.dialect.name == "postgresql":
            self._thread = threading.Thread(target=self._run, name="smartsensor-ended-watch", daemon=True)
            self._thread.start()
        else:
            jobs.every(self.JOB, self.poll_interval, self.poll, at_once=True)

    def stop(self) -> None:
        """Stop the thread (the job stops with its ``PeriodicJobs``, before this) and drop the polled connection."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._disconnect()

    async def changed(self, since: int, timeout: float, hashcodes: AbstractSet[int] | None = None) -> bool:
        """Wait until a change after generation ``since`` may concern ``hashcodes`` (None: any change), or
        ``timeout`` seconds pass; True if one did."""
        if self._event is None:  # not started (an app under a test client without lifespan): time out
            await asyncio.sleep(timeout)
            return False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            if self._concerns(since, hashcodes):
                return True
            since = self.generation  # everything up to here was about other tasks
            left = deadline - loop.time()
            if left <= 0:
                return False
            try:
                await asyncio.wait_for(self._event.wait(), left)
            except asyncio.TimeoutError:
                return self._concerns(since, hashcodes)

    def _concerns(self, since: int, hashcodes: AbstractSet[int] | None) -> bool:
        if self.generation == since:
            return False
        if not self._recent or self._recent[0][0] > since + 1:  # forgotten: assume it does
            return True
        for generation, ended in reversed(self._recent):
            if generation <= since:
                return False
            if ended is None or hashcodes is None or not ended.isdisjoint(hashcodes):
                return True
        return False

    def _bump(self, ended: frozenset[int] | None) -> None:  # in the event loop
        self.generation += 1
        self._recent.append((self.generation, ended))
        assert self._event is not None
        self._event.set()
        self._event = asyncio.Event()

    def _wake(self, ended: Iterable[frozenset[int] | None] = (None,)) -> None:  # from the thread
        if self._loop is not None and not self._loop.is_closed():
            for hashcodes in ended:
                self._loop.call_soon_threadsafe(self._bump, hashcodes)

    def _run(self) -> None:  # PostgreSQL: the listening thread
        while not self._stopping.is_set():
            try:
                self._listen()
            except Exception as exc:  # noqa: BLE001 - a database outage: wake the waiters, retry in a second
                self._failed(exc)
                self._stopping.wait(RECONNECT_AFTER)

    def _failed(self, exc: Exception) -> None:
        """One WARNING per outage (DEBUG after it), and every waiter woken to read again."""
        log.log(logging.DEBUG if self._failing else logging.WARNING, "ended-task watch: %s", first_line(exc))
        self._failing = True
        self._wake()

    def _listen(self) -> None:
        listener = ChannelListener(self.engine, channel=ENDED_CHANNEL)
        try:
            while not self._stopping.is_set():
                payloads = listener.wait(0.5)
                if payloads:
                    self._wake([ended_hashcodes(p) for p in payloads])
        finally:
            listener.close()

    def poll(self) -> None:
        """SQLite, the periodic job: read ``PRAGMA data_version`` on the watch's one connection and wake every
        waiter when it changed. A database error is logged (``_failed``); the connection is made again a second
        later."""
        if self._stopping.is_set() or time.monotonic() < self._retry_at:
            return
        try:
            if self._data_version is None:
                self._data_version = SqliteDataVersion(self.engine)
                self._version = self._data_version.read()
                return
            version = self._data_version.read()
        except Exception as exc:  # noqa: BLE001 - a database outage: wake the waiters, retry in a second
            self._disconnect()
            self._failed(exc)
            self._retry_at = time.monotonic() + RECONNECT_AFTER
            return
        if version != self._version:
            self._version = version
            self._wake()

    def _disconnect(self) -> None:
        data_version, self._data_version = self._data_version, None
        if data_version is not None:
            try:
                data_version.close()
            except Exception as exc:  # noqa: BLE001 - the connection is gone either way
                log.debug("ended-task watch: dropping its connection: %s", first_line(exc))
