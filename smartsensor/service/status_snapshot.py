"""One status snapshot shared by the requests of a ``serve`` process (``[api] status_max_age``).

A status read scans the waiting tasks (``service.status.collect_status``: about 3 s of database time at a million
waiting tasks), and /metrics, ``GET /api/v1/status`` and the page each need one. With a max age, the snapshot is
reused until it is that old, and only one read runs at a time: requests arriving while it runs wait for it and share
its outcome, so two Prometheus replicas and a page cost one read, even when a read takes longer than the max age.
With 0 every request reads the database.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Callable

from smartsensor.service.status_report import StatusReport


class StatusSnapshot:
    """``get()``: ``compute()``'s report, reused for ``max_age`` seconds from when its read started. One read at a
    time: a request that arrives while one is under way waits for it and gets its outcome, however long it took (no
    read could be fresher), so concurrent requests never read one after another. A read that fails is not kept: its
    error reaches the requests that waited for it, and the next request reads again."""

    def __init__(
        self, compute: Callable[[], StatusReport], max_age: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.compute = compute
        self.max_age = max_age
        self.clock = clock
        self.computed = 0  # reads started so far (the tests count them)
        self.waiting = 0  # requests waiting now for the read under way (the tests wait on it)
        self._lock = threading.Lock()  # guards the fields below; never held during a read
        self._report: StatusReport | None = None
        self._started = 0.0
        self._read: Future[StatusReport] | None = None  # the read under way

    def get(self) -> StatusReport:
        """The current snapshot: the kept one if it is younger than ``max_age``, else the outcome of the read under
        way, or of a read started now."""
        if self.max_age <= 0:
            with self._lock:
                self.computed += 1
            return self.compute()
        with self._lock:
            now = self.clock()
            if self._report is not None and now - self._started < self.max_age:
                return self._report
            read, under_way = self._read, self._read is not None
            if read is None:
                read = self._read = Future()
                self.computed += 1
            else:
                self.waiting += 1
        return self._wait_for(read) if under_way else self._run(read, now)

    def _wait_for(self, read: Future[StatusReport]) -> StatusReport:
        """The outcome of ``read``, another request's: its report, or its error raised here too."""
        try:
            return read.result()
        finally:
            with self._lock:
                self.waiting -= 1

    def _run(self, read: Future[StatusReport], started: float) -> StatusReport:
        """Read now, keep the report (its age counting from ``started``) and hand it to the requests waiting."""
        try:
            report = self.compute()
        except BaseException as exc:
            with self._lock:
                self._read = None
            read.set_exception(exc)
            raise
        with self._lock:
            self._report, self._started, self._read = report, started, None
        read.set_result(report)
        return report
