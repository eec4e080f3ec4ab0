"""Tells a `serve` process that tasks may have ended, so that long-polling states requests read their keys again
at once instead of on a timer.

PostgreSQL: a thread LISTENs on ``ENDED_CHANNEL``, which every round that marks tasks (and `set-state`) NOTIFYs
at commit, from any host, naming the hashcodes that ended: only the requests waiting on one of them wake.
SQLite (one host): the thread polls ``PRAGMA data_version`` on one connection, which changes whenever another
connection commits, and every request wakes. Either way a wake-up is only a hint: the request reads its keys
again and answers only what the database says. A database outage wakes every waiter too (they read again and
get the error or the answer), and the thread reconnects every second.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from typing import AbstractSet, Any, Iterable

from sqlalchemy import Engine

from smartsensor.adapters.sql.signals import ENDED_CHANNEL, ended_hashcodes
from smartsensor.sensors.errors import first_line
from smartsensor.service.signals import SignalListener

log = logging.getLogger(__name__)

RECENT = 10_000  # changes remembered for requests that read between two of them; an older one wakes everyone


class EndedWatch:
    """A background thread that bumps ``generation`` when tasks may have ended (remembering which hashcodes,
    None for any); coroutines ``await changed``."""

    def __init__(self, engine: Engine, poll_interval: float = 0.2) -> None:
        self.engine = engine
        self.poll_interval = poll_interval
        self.generation = 0
        self._recent: deque[tuple[int, frozenset[int] | None]] = deque(maxlen=RECENT)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start watching; call from the event loop that will await ``changed``."""
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        self._thread = threading.Thread(target=self._run, name="smartsensor-ended-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

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

    def _run(self) -> None:
        failing = False
        while not self._stopping.is_set():
            try:
                if self.engine.dialect.name == "postgresql":
                    self._listen()
                else:
                    self._poll_data_version()
            except Exception as exc:  # noqa: BLE001 - a database outage: wake the waiters, retry in a second
                log.log(logging.DEBUG if failing else logging.WARNING, "ended-task watch: %s", first_line(exc))
                failing = True
                self._wake()
                self._stopping.wait(1.0)

    def _listen(self) -> None:
        listener = SignalListener(self.engine, channel=ENDED_CHANNEL)
        try:
            while not self._stopping.is_set():
                payloads = listener.wait(0.5)
                if payloads:
                    self._wake([ended_hashcodes(p) for p in payloads])
        finally:
            listener.close()

    def _poll_data_version(self) -> None:
        raw: Any = self.engine.raw_connection()
        try:
            cursor = raw.cursor()
            last = cursor.execute("PRAGMA data_version").fetchone()[0]
            while not self._stopping.wait(self.poll_interval):
                version = cursor.execute("PRAGMA data_version").fetchone()[0]
                if version != last:
                    last = version
                    self._wake()
        finally:
            raw.invalidate()  # never hand a long-lived watcher's connection back to the pool
