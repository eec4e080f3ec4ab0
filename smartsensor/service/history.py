"""Tasks by state over time: ``smartsensor serve`` samples ``count_by_state`` once per ``[api] history_interval``
into ``state_sample`` and prunes samples older than ``[api] history_retention``.

Every server behind a load balancer runs a sampler; the sample of a time bucket is written by whichever comes
first (the primary key refuses the others), so N servers do not multiply samples. A database error is logged in
one line and the sampler tries again at the next bucket: it never takes the server down.
"""

from __future__ import annotations

import logging
import math
from datetime import datetime, timedelta, timezone
from typing import Callable

from smartsensor.adapters.periodic import PeriodicJobs
from smartsensor.domain.clock import now as clock_now
from smartsensor.ports import StateSamples
from smartsensor.sensors.errors import first_line

log = logging.getLogger(__name__)

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
WRITTEN, TAKEN, FAILED = "written", "taken", "failed"


def bucket_of(now: datetime, interval: float) -> datetime:
    """The start of the bucket ``now`` falls in: floor(now / interval) * interval, aware UTC."""
    seconds = (now - EPOCH).total_seconds()
    return EPOCH + timedelta(seconds=math.floor(seconds / interval) * interval)


def sample_once(samples: StateSamples, interval: float, retention: float, now: datetime | None = None) -> str:
    """Write the current bucket's counts unless a server did already (WRITTEN or TAKEN, also when another server
    wrote it meanwhile), then delete samples older than ``retention`` seconds. 3-4 statements in 2 transactions
    on SQL; the store's errors propagate."""
    now = now or clock_now()
    outcome = WRITTEN if samples.write_sample(bucket_of(now, interval)) else TAKEN
    samples.delete_before(now - timedelta(seconds=retention))
    return outcome


class HistorySampler:
    """Calls ``sample_once`` at the start of every bucket (the first at once): a job of ``serve``'s
    ``PeriodicJobs`` (``schedule``)."""

    JOB = "history-sampler"

    def __init__(
        self, samples: StateSamples, interval: float, retention: float, clock: Callable[[], datetime] = clock_now
    ) -> None:
        self.samples, self.interval, self.retention, self.clock = samples, interval, retention, clock
        self.last_outcome: str | None = None  # WRITTEN, TAKEN or FAILED, once a sample was tried

    def tick(self) -> str:
        """One sample; a failure is logged in one line and returned as FAILED, never raised."""
        try:
            self.last_outcome = sample_once(self.samples, self.interval, self.retention, self.clock())
        except Exception as exc:  # noqa: BLE001 - the server must outlive any database trouble
            log.warning("status page history: sampling failed, trying again in %gs: %s", self.interval, first_line(exc))
            self.last_outcome = FAILED
        return self.last_outcome

    def schedule(self, jobs: PeriodicJobs) -> None:
        """Sample on ``jobs``: at once, then at the start of every bucket (multiples of ``interval`` since the
        epoch, as ``bucket_of`` counts them)."""
        jobs.every(self.JOB, self.interval, self.tick, at_once=True, aligned=True)
