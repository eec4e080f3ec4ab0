"""A process's one stop: ``StopRequest``, which every loop and thread of a smartsensor process waits on, and which
SIGTERM and SIGINT raise (``StopRequest.signals``).

Every long-running process (``worker``, ``workers``, ``scheduler``, ``run-task``) has exactly one. Its loops wait
with ``stop.wait(seconds)`` instead of sleeping, so a stop ends any wait at once; what must wake on a stop (a thread
blocked on an event of its own) registers ``on_request``.

Why not an ``Event`` set from a signal handler: Python runs the handler in the main thread between two bytecodes,
possibly while that thread holds the ``Event``'s own (non re-entrant) lock, and setting it there deadlocks. Instead
the handler does nothing; Python's C-level handler writes the signal's number to a socket
(``signal.set_wakeup_fd``), and a thread of the stop request reads it and raises the stop, in a thread where taking
a lock is safe. It also works while the main thread is blocked in C code (a JDBC call, a lock).
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
from contextlib import contextmanager
from types import FrameType
from typing import Callable, Iterator, Mapping, Protocol

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Stopping(Protocol):
    """What a loop that ends on a stop waits on: a ``StopRequest`` (or, in a test, an ``Event``)."""

    def is_set(self) -> bool:
        """Whether the stop was requested."""
        ...

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for the stop; True once it is requested."""
        ...


class StopRequest:
    """Requested once, seen by every waiter at once. ``is_set``/``wait`` make it a drop-in where an ``Event`` was
    waited on; it is requested by ``request`` only."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._hooks: list[Callable[[], None]] = []
        self.reason = ""

    def request(self, reason: str = "stop requested") -> None:
        """Request the stop (idempotent): every ``wait`` returns, every hook runs once, in the caller's thread."""
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._event.set()
            hooks, self._hooks = self._hooks, []
        for hook in hooks:
            try:
                hook()
            except Exception:  # a hook's failure must not keep the others (or the stop) from running
                log.exception("a stop hook failed")

    def is_set(self) -> bool:
        """Whether the stop was requested."""
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds (None: for ever) for the stop; True once it is requested."""
        return self._event.wait(timeout)

    def on_request(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` when the stop is requested (at once if it already was): to wake a thread blocked elsewhere."""
        with self._lock:
            if not self._event.is_set():
                self._hooks.append(hook)
                return
        hook()

    @contextmanager
    def signals(
        self, signums: tuple[int, ...] = STOP_SIGNALS, also: Mapping[int, Callable[[], None]] | None = None
    ) -> Iterator[StopRequest]:
        """While inside: ``signums`` (SIGTERM and SIGINT) request this stop, and each signal of ``also`` runs its
        callback (in the stop request's thread: e.g. SIGCHLD waking a supervisor). Main thread only (Python's rule
        for signal handlers); elsewhere nothing is installed and the stop is requested by ``request`` alone. The
        previous handlers and wake-up fd are restored on the way out."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        callbacks = dict(also or {})
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        previous_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        previous = {s: signal.signal(s, _noted) for s in (*signums, *callbacks)}
        thread = threading.Thread(
            target=self._read_signals, args=(reader, set(signums), callbacks), name="stop-signals", daemon=True
        )
        thread.start()
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            signal.set_wakeup_fd(previous_fd)
            writer.close()  # the reader sees end of file and ends
            thread.join(timeout=5)
            reader.close()

    def _read_signals(
        self, reader: socket.socket, signums: set[int], callbacks: Mapping[int, Callable[[], None]]
    ) -> None:
        """The stop request's thread: a stop signal's number arriving on the wake-up socket requests the stop; another
        signal's runs its callback."""
        while True:
            try:
                data = reader.recv(64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum in callbacks:
                    try:
                        callbacks[signum]()
                    except Exception:  # a callback's failure must not end the stop's thread
                        log.exception("the callback of signal %d failed", signum)
                if signum in signums:
                    name = signal.Signals(signum).name
                    if not self.is_set():
                        log.info("%s received: stopping", name)
                    self.request(f"{name} received")


def _noted(signum: int, frame: FrameType | None) -> None:
    """The Python-level handler of a stop signal: nothing (the wake-up socket carries it); installing it keeps the
    default action (death) from running."""
