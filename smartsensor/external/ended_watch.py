"""Tells a `serve` process that tasks may have ended, so that long-polling states requests read their keys again
at once instead of on a timer.

It hears ``ENDED_CHANNEL`` through the process's notification hub (``ports.Notifications.subscribe``).
PostgreSQL: every round that marks tasks (and `set-state`) NOTIFYs at commit, from any host, naming the hashcodes
that ended: only the requests waiting on one of them wake. SQLite (one host): the hub polls ``PRAGMA data_version``,
which changes whenever another connection commits, and every request wakes. Either way a wake-up is only a hint:
the request reads its keys again and answers only what the database says. A database outage wakes every waiter
too (they read again and get the error or the answer); the hub reconnects every second.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import AbstractSet, Iterable

from smartsensor.adapters.sql.channels import ENDED_CHANNEL, ended_hashcodes
from smartsensor.ports import Notifications

RECENT = 10_000  # changes remembered for requests that read between two of them; an older one wakes everyone


class EndedWatch:
    """Bumps ``generation`` when tasks may have ended (remembering which hashcodes, None for any), as the hub
    delivers ``ENDED_CHANNEL``; coroutines ``await changed``."""

    def __init__(self) -> None:
        self.generation = 0
        self._recent: deque[tuple[int, frozenset[int] | None]] = deque(maxlen=RECENT)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None

    def start(self, hub: Notifications) -> None:
        """Subscribe to ``hub`` (started by the caller afterwards). Call from the event loop that will await
        ``changed``."""
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        hub.subscribe(ENDED_CHANNEL, self.ended, on_outage=self._wake)

    def ended(self, payloads: list[str]) -> None:
        """The hub's delivery (its thread): these ``ENDED_CHANNEL`` payloads arrived."""
        self._wake([ended_hashcodes(p) for p in payloads])

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
