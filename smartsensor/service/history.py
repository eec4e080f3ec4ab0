"""Tasks by state over time: ``smartsensor serve`` samples ``count_by_state`` once per ``[api] history_interval``
into ``state_sample`` and prunes samples older than ``[api] history_retention``.

Every server behind a load balancer runs a sampler; the sample of a time bucket is written by whichever comes
first (the primary key refuses the others), so N servers do not multiply samples. A database error is logged in
one line and the sampler tries again at the next bucket: it never takes the server down.
"""

from __future__ import annotations

import logging
import math
import threading
from datetime import datetime, timedelta
from typing import Callable

from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError

from smartsensor.adapters.sql import history as history_sql, status as status_sql
from smartsensor.sensors.errors import first_line

log = logging.getLogger(__name__)

EPOCH = datetime(1970, 1, 1)
WRITTEN, TAKEN, FAILED = "written", "taken", "failed"


def bucket_of(now: datetime, interval: float) -> datetime:
    """The start of the bucket ``now`` falls in: floor(now / interval) * interval, in naive UTC."""
    seconds = (now - EPOCH).total_seconds()
    return EPOCH + timedelta(seconds=math.floor(seconds / interval) * interval)


def sample_once(engine: Engine, interval: float, retention: float, now: datetime | None = None) -> str:
    """Write the current bucket's counts unless a server did already (WRITTEN or TAKEN), then delete samples
    older than ``retention`` seconds. 3-4 statements in 2 transactions; database errors propagate."""
    now = now or datetime.utcnow()
    bucket = bucket_of(now, interval)
    outcome = TAKEN
    try:
        with engine.begin() as conn:
            if not history_sql.bucket_written(conn, bucket):
                history_sql.insert_sample(conn, bucket, status_sql.count_by_state(conn))
                outcome = WRITTEN
    except IntegrityError:  # another server wrote this bucket between our read and our insert
        outcome = TAKEN
    with engine.begin() as conn:
        history_sql.prune_samples(conn, now - timedelta(seconds=retention))
    return outcome


class HistorySampler:
    """A daemon thread that calls ``sample_once`` at the start of every bucket until ``stop``."""

    def __init__(
        self, engine: Engine, interval: float, retention: float, clock: Callable[[], datetime] = datetime.utcnow
    ) -> None:
        self.engine, self.interval, self.retention, self.clock = engine, interval, retention, clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_outcome: str | None = None  # WRITTEN, TAKEN or FAILED, once a sample was tried

    def tick(self) -> str:
        """One sample; a failure is logged in one line and returned as FAILED, never raised."""
        try:
            self.last_outcome = sample_once(self.engine, self.interval, self.retention, self.clock())
        except Exception as exc:  # noqa: BLE001 - the server must outlive any database trouble
            log.warning("status page history: sampling failed, trying again in %gs: %s", self.interval, first_line(exc))
            self.last_outcome = FAILED
        return self.last_outcome

    def start(self) -> None:
        """Start sampling (the first sample at once)."""
        self._thread = threading.Thread(target=self._run, name="history-sampler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10) -> None:
        """Stop after the sample in progress, if any; wait up to ``timeout`` seconds for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def is_alive(self) -> bool:
        """Whether the sampling thread still runs."""
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.tick()
            now = self.clock()
            next_bucket = bucket_of(now, self.interval) + timedelta(seconds=self.interval)
            self._stop.wait(max(0.05, (next_bucket - now).total_seconds()))
