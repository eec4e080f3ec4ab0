"""One status snapshot shared by the requests of a ``serve`` process (``[api] status_max_age``).

A status read scans the waiting tasks (``service.status.collect_status``: about 3 s of database time at a million
waiting tasks), and /metrics, ``GET /api/v1/status`` and the page each need one. With a max age, the snapshot is
reused until it is that old, and only one request at a time computes a new one: the others wait for it and share
its result, so two Prometheus replicas and a page cost one read. With 0 every request reads the database.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from smartsensor.service.status_report import StatusReport


class StatusSnapshot:
    """``get()``: ``compute()``'s report, reused for ``max_age`` seconds from when its computation started. A
    computation that fails is not kept: its error reaches the request that ran it, and the next request tries
    again (a request waiting for it then computes its own)."""

    def __init__(
        self, compute: Callable[[], StatusReport], max_age: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.compute = compute
        self.max_age = max_age
        self.clock = clock
        self.computed = 0  # computations started so far (the tests count them)
        self._count_lock = threading.Lock()
        self._lock = threading.Lock()  # one computation at a time; held while it runs, so others wait for it
        self._report: StatusReport | None = None
        self._started = 0.0

    def get(self) -> StatusReport:
        """The current snapshot, computed now if there is none younger than ``max_age``."""
        if self.max_age <= 0:
            with self._count_lock:
                self.computed += 1
            return self.compute()
        with self._lock:
            if self._report is not None and self.clock() - self._started < self.max_age:
                return self._report
            started = self.clock()
            with self._count_lock:
                self.computed += 1
            self._report = None  # a failure below leaves none: an old one is never served past its age
            report = self.compute()
            self._report, self._started = report, started
            return report
