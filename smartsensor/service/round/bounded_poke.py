"""A user's ``poke()`` run within a time limit, so one that hangs (a network call without a timeout, a
deadlock) cannot stall a worker's round, and with it every other task of its ranges.

Pokes run one at a time on a daemon helper thread; the caller waits at most ``limit`` seconds. A poke
past its limit is a transient error for its vigil: the thread is abandoned (Python cannot stop it) and
a fresh one serves the next pokes. While an abandoned poke of a vigil still runs, that vigil is not
poked again (it would only pile up threads); its tasks wait, within their own timeouts, like in any
outage. Anything a poke raises, even SystemExit or KeyboardInterrupt, comes back as an error value.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future, TimeoutError as FutureTimeout
from typing import Any, Callable, Hashable

from smartsensor.sensors.errors import CheckError, TransientCheckError


class _Helper:
    """One daemon thread running pokes in order; retired for good once a poke overruns."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self.retired = False
        threading.Thread(target=self._run, name="user-poke", daemon=True).start()

    def _run(self) -> None:
        while not self.retired:
            fn, future = self.jobs.get()
            try:
                future.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - user code: SystemExit must not end the worker
                future.set_exception(exc)


class BoundedPoker:
    """Runs ``poke()`` calls each within ``limit`` seconds (see the module docstring)."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self._helper: _Helper | None = None
        self._overrun: dict[Hashable, tuple[Future[Any], float]] = {}
        self._lock = threading.Lock()

    def poke(self, key: Hashable, fn: Callable[[], Any]) -> bool | CheckError:
        """``bool(fn())``, or the CheckError it raised, or a TransientCheckError when it raised anything
        else, overran ``limit``, or an earlier poke of ``key`` that overran is still running."""
        with self._lock:
            earlier = self._overrun.get(key)
            if earlier is not None:
                if not earlier[0].done():
                    return TransientCheckError(
                        f"poke() still running after {time.monotonic() - earlier[1]:.0f} s (limit {self.limit:g} s): "
                        f"not poked again until it returns"
                    )
                del self._overrun[key]
            if self._helper is None:
                self._helper = _Helper()
            helper = self._helper
            future: Future[Any] = Future()
            started = time.monotonic()
            helper.jobs.put((fn, future))
            try:
                return bool(future.result(timeout=self.limit))
            except FutureTimeout:
                helper.retired = True  # its thread finishes this poke, if ever, then ends
                self._helper = None
                self._overrun[key] = (future, started)
                return TransientCheckError(
                    f"poke() did not return within {self.limit:g} s ([smart_sensor] poke_timeout); treated as an outage"
                )
            except CheckError as exc:
                return exc
            except BaseException as exc:  # noqa: BLE001 - a user's poke() may raise anything
                return TransientCheckError(f"poke() raised {type(exc).__name__}: {exc}")

    @property
    def overrunning(self) -> int:
        """Vigils whose last poke overran and has not returned yet."""
        with self._lock:
            return sum(1 for future, _ in self._overrun.values() if not future.done())


_pokers: dict[float, BoundedPoker] = {}
_pokers_lock = threading.Lock()


def poker_for(limit: float) -> BoundedPoker:
    """The process's poker for this limit (shared by every range a worker process owns)."""
    with _pokers_lock:
        poker = _pokers.get(limit)
        if poker is None:
            poker = _pokers[limit] = BoundedPoker(limit)
        return poker
