"""A process's one listener to the database's notifications: ``NotificationHub``, shared by what a worker and
``serve`` wait for (landing signals, new pending tasks, ended tasks).

On PostgreSQL one connection LISTENs on every channel subscribed to (``channels``: each notification is delivered
at commit, from any host). SQLite has no channels; its stand-ins, polled every ``poll_interval`` on connections of
their own: new rows of ``partition_signal`` for ``SIGNAL_CHANNEL``, and ``PRAGMA data_version`` (any other
connection's commit) for ``ENDED_CHANNEL``, delivered as ``ANY_CODES``. ``PENDING_CHANNEL`` has none there: a
worker's next round starts pending tasks.

A LISTENing connection that stalls without closing (no RST, no FIN) would look like quiet channels for good, and
the process would never hear a notification again: after ``check_interval`` seconds without one the hub asks the
server ``SELECT 1`` on it (bounded by ``[core] sql_call_timeout``, the engine's call watchdog) and, with no answer,
drops it and listens on a new one (``[core] listen_check_interval``).

One thread delivers everything, reconnecting every second while the database is away: one WARNING per outage (no
traceback), every subscriber's ``on_outage`` called (a waiter may read again), and an INFO when it listens again,
with every ``on_outage`` called once more: a notification sent between the failure and the new LISTEN was never
heard (a held request woken at the failure, whose task ended in that gap, waited until its hold ran out). A
notification is only a hint: whoever hears it reads the database before acting on it. The process's
``StopRequest`` ends the hub at once, even in the middle of a wait.
"""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from functools import partial
from typing import Callable, Protocol

from sqlalchemy import Engine

from smartsensor.adapters.lifecycle import StopRequest
from smartsensor.adapters.sql import signals as signal_sql
from smartsensor.adapters.sql.channels import ANY_CODES, ENDED_CHANNEL, SIGNAL_CHANNEL, PgListener, SqliteDataVersion
from smartsensor.sensors.errors import first_line

log = logging.getLogger(__name__)

RECONNECT_AFTER = 1.0  # seconds between two tries to reach the database while it is down
LISTEN_WAIT = 0.5  # PostgreSQL: the longest one wait for a notification (a stop ends it at once)
START_TIMEOUT = 30.0  # seconds ``start`` waits for the hub to listen (or fail its first attempt)
CHECK_INTERVAL = 10.0  # PostgreSQL: seconds of silence after which the LISTEN connection is asked if it is alive

Deliver = Callable[[list[str]], None]


@dataclass(frozen=True)
class Subscription:
    """A channel's payloads go to ``deliver``, in the hub's thread; ``on_outage`` hears that the database is away."""

    channel: str
    deliver: Deliver
    on_outage: Callable[[], None] | None = None


class _Source(Protocol):
    def receive(self, timeout: float) -> list[tuple[str, str]]: ...

    def close(self) -> None: ...


class NotificationHub:
    """Subscribe (``subscribe``), then ``start``; ``close`` ends the thread (so does the stop request). ``name`` is
    what its log lines start with."""

    def __init__(
        self,
        engine: Engine,
        stop: StopRequest,
        poll_interval: float = 0.2,
        name: str = "notifications",
        check_interval: float = CHECK_INTERVAL,
    ) -> None:
        self.engine, self.stop, self.poll_interval, self.name = engine, stop, poll_interval, name
        self.check_interval = check_interval
        self._subscriptions: list[Subscription] = []
        self._listening = threading.Event()
        self._closed = threading.Event()
        self._failing = False  # the last attempt failed: its next failure is logged at DEBUG, not WARNING
        self._thread: threading.Thread | None = None
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_writer.setblocking(False)
        stop.on_request(self._wake)

    def subscribe(self, channel: str, deliver: Deliver, on_outage: Callable[[], None] | None = None) -> None:
        """Deliver ``channel``'s payloads to ``deliver`` (before ``start``)."""
        if self._thread is not None:
            raise RuntimeError("subscribe before the hub starts")
        self._subscriptions.append(Subscription(channel, deliver, on_outage))

    @property
    def channels(self) -> tuple[str, ...]:
        """The channels subscribed to, in the order of their first subscription."""
        return tuple(dict.fromkeys(s.channel for s in self._subscriptions))

    def start(self, timeout: float = START_TIMEOUT) -> bool:
        """Start the thread; return once it listens (every notification from then on is delivered: True), or its
        first attempt failed, or ``timeout`` passed (False)."""
        self._thread = threading.Thread(target=self._run, name=f"{self.name}-hub", daemon=True)
        self._thread.start()
        self._listening.wait(timeout)
        return self.listening

    @property
    def running(self) -> bool:
        """Whether the hub's thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def listening(self) -> bool:
        """Whether the hub listens now (False while the database is away)."""
        return self._listening.is_set() and not self._failing

    def close(self, timeout: float = 5.0) -> None:
        """End the thread (at once: its wait is woken) and drop its connection."""
        self._closed.set()
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout)

    def _wake(self) -> None:
        try:
            self._wake_writer.send(b"x")
        except OSError:  # full (it is woken already) or closed
            pass

    def _ending(self) -> bool:
        return self._closed.is_set() or self.stop.is_set()

    def _run(self) -> None:
        source: _Source | None = None
        try:
            while not self._ending():
                try:
                    if source is None:
                        source = self._open()
                        resumed, self._failing = self._failing, False
                        self._listening.set()
                        if resumed:
                            self._resumed()
                    notes = source.receive(LISTEN_WAIT)
                except Exception as exc:  # noqa: BLE001 - the database is away: tell, retry in a second
                    self._failed(exc)
                    if source is not None:
                        source.close()
                    source = None
                    self._pause(RECONNECT_AFTER)
                    continue
                self._deliver(notes)
        finally:
            if source is not None:
                source.close()

    def _open(self) -> _Source:
        if self.engine.dialect.name == "postgresql":
            return _PgSource(PgListener(self.engine, self.channels), self._wake_reader, self.check_interval)
        return _SqliteSource(self.engine, self.channels, self.poll_interval, self._pause)

    def _failed(self, exc: Exception) -> None:
        log.log(logging.DEBUG if self._failing else logging.WARNING, "%s: %s", self.name, first_line(exc))
        self._failing = True
        self._listening.set()  # ``start`` returns: the first attempt failed
        for sub in self._subscriptions:
            if sub.on_outage is not None:
                self._call(sub.on_outage)

    def _resumed(self) -> None:
        """Listening again after an outage: what was notified meanwhile was not heard, so every subscriber's
        ``on_outage`` is called once more (a waiter reads again, now that a later notification will be heard)."""
        log.info("%s: listening again", self.name)
        for sub in self._subscriptions:
            if sub.on_outage is not None:
                self._call(sub.on_outage)

    def _deliver(self, notes: list[tuple[str, str]]) -> None:
        by_channel: dict[str, list[str]] = defaultdict(list)
        for channel, payload in notes:
            by_channel[channel].append(payload)
        for sub in self._subscriptions:
            payloads = by_channel.get(sub.channel)
            if payloads:
                self._call(partial(sub.deliver, payloads))

    def _call(self, callback: Callable[[], None]) -> None:
        try:
            callback()
        except Exception:  # a subscriber's bug must not end everyone's notifications
            log.exception("%s: a subscriber failed", self.name)

    def _pause(self, seconds: float) -> None:
        """Wait ``seconds``, or less if the hub is ending (the stop, ``close``)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([self._wake_reader], [], [], left)
            if not ready or self._ending():
                return
            self._drain()  # a stale wake-up byte: nothing to end, wait on

    def _drain(self) -> None:
        self._wake_reader.setblocking(False)
        try:
            while self._wake_reader.recv(64):
                pass
        except OSError:
            pass
        finally:
            self._wake_reader.setblocking(True)


class _PgSource:
    """PostgreSQL: one LISTENing connection; a wait also ends when the hub is woken. After ``check_interval``
    seconds without a notification, the connection is checked (``PgListener.check``): one that stalled fails there
    (the call watchdog), and the hub listens on a new one."""

    def __init__(self, listener: PgListener, wake: socket.socket, check_interval: float) -> None:
        self.listener, self.wake, self.check_interval = listener, wake, check_interval
        self.heard = time.monotonic()

    def receive(self, timeout: float) -> list[tuple[str, str]]:
        notes = self.listener.receive(timeout, also=(self.wake,))
        now = time.monotonic()
        if notes:
            self.heard = now
        elif now - self.heard >= self.check_interval:
            notes = self.listener.check()  # raises on a connection that stalled: the hub reconnects
            self.heard = time.monotonic()
        return notes

    def close(self) -> None:
        self.listener.close()


class _SqliteSource:
    """SQLite's stand-ins for channels, polled every ``poll_interval``: new landing signals, and the data version."""

    def __init__(
        self, engine: Engine, channels: tuple[str, ...], poll_interval: float, pause: Callable[[float], None]
    ) -> None:
        self.engine, self.poll_interval, self.pause = engine, poll_interval, pause
        self.signals = SIGNAL_CHANNEL in channels
        self.last_signal_id = signal_sql.newest_signal_id(engine) if self.signals else 0
        self.data_version: SqliteDataVersion | None = None
        if ENDED_CHANNEL in channels:
            self.data_version = SqliteDataVersion(engine)
            self.version = self.data_version.read()

    def receive(self, timeout: float) -> list[tuple[str, str]]:
        notes: list[tuple[str, str]] = []
        if self.signals:
            rows = signal_sql.read_signals_after(self.engine, self.last_signal_id)
            if rows:
                self.last_signal_id = rows[-1][0]
                notes += [(SIGNAL_CHANNEL, name) for _, name in rows]
        if self.data_version is not None:
            version = self.data_version.read()
            if version != self.version:
                self.version = version
                notes.append((ENDED_CHANNEL, ANY_CODES))
        if not notes:
            self.pause(min(timeout, self.poll_interval))
        return notes

    def close(self) -> None:
        if self.data_version is not None:
            try:
                self.data_version.close()
            except Exception as exc:  # noqa: BLE001 - the connection is gone either way
                log.debug("dropping a polled connection: %s", first_line(exc))
            self.data_version = None
