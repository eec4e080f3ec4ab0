"""The one clock leases are judged by: the database's.

A lease's expiry is written by one worker and compared by every other; if each used its own host's wall clock, a
host ten minutes ahead would find every lease expired and take every range, and one behind would wait ten minutes
past a dead worker's expiry before taking its ranges over. So a worker reads the database's time at each lease
heartbeat (``LeaseOps.database_now``: PostgreSQL's ``clock_timestamp()``; SQLite's database is on this host) and
carries it between heartbeats on this process's monotonic clock, which no step or skew of the wall clock moves. Its
``now`` is what the lease heartbeat, the fence of a round's writes, a round's timeouts and the landings' claims
compare: every worker's ``now`` is the database's time, give or take half the round trip of the read.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta
from typing import Callable

from smartsensor.domain import clock as wall_clock

log = logging.getLogger(__name__)

SKEW_WARNING = 1.0  # seconds: a host's wall clock further than this from the database's is logged


class LeaseClock:
    """The database's time as this process last read it (``sync``), carried forward on ``monotonic``. Before its
    first reading it is this host's wall clock. Thread-safe: readers see one whole reading."""

    def __init__(
        self,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = wall_clock.now,
    ) -> None:
        self._monotonic = monotonic
        self._wall = wall
        self._reading: tuple[datetime, float] | None = None  # (the database's time, this process's monotonic then)
        self._skew_logged: int | None = None  # the skew last logged, in whole seconds (None: within the warning)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """The database's time now, as far as this process can tell (aware UTC)."""
        reading = self._reading
        if reading is None:
            return self._wall()
        at, then = reading
        return at + timedelta(seconds=self._monotonic() - then)

    def sync(self, read: Callable[[], datetime]) -> datetime:
        """Read the database's time (``read``), taken as of the middle of the call, and carry it from now on; the
        time now. A host's wall clock off by more than ``SKEW_WARNING`` is logged when the skew first shows, and
        again when it changes by a second or more."""
        before = self._monotonic()
        at = read()
        after = self._monotonic()
        with self._lock:
            self._reading = (at, (before + after) / 2)
            now = self.now()
            self._note_skew((self._wall() - now).total_seconds())
        return now

    @property
    def synced(self) -> bool:
        """Whether the database's time has been read at least once."""
        return self._reading is not None

    def _note_skew(self, skew: float) -> None:
        shown = round(skew) if abs(skew) > SKEW_WARNING else None
        if shown == self._skew_logged:
            return
        self._skew_logged = shown
        if shown is None:
            log.info("this host's wall clock agrees with the database's again (within %g s)", SKEW_WARNING)
        else:
            log.warning(
                "this host's wall clock is %+.1f s off the database's: leases, fences and claims are judged by the "
                "database's clock; fix the host's time synchronisation (times this host stores elsewhere are off)",
                skew,
            )
