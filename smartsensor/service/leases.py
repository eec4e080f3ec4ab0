"""Shard leases: claim, renew, rebalance and release shard ranges among live workers, race-free.

Every claim is one guarded UPDATE that compares the epoch it read (compare-and-set), so two workers
starting at once can never both own a range, on Postgres or SQLite alike. A lease that lapsed is
never silently renewed: it is re-claimed, which bumps its epoch, so a worker that was paused or cut
off can never write again with its old epoch (see the fence in ``adapters.sql.tasks``). Every expiry is written
and compared in the database's time (``service.lease_clock``): a host's wall clock plays no part in who holds a
range.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import uuid
from datetime import datetime, timedelta

from smartsensor.config import Config, ShardRange
from smartsensor.domain import clock
from smartsensor.domain.leases import Lease, LeaseRow, WorkerChecks
from smartsensor.ports import LeaseOps, LeaseStore
from smartsensor.service.lease_clock import LeaseClock

log = logging.getLogger(__name__)


def new_worker_id() -> str:
    """host:pid:random — unique per process start."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class LeaseManager:
    """One worker's view of the lease table. Call ``heartbeat()`` every ``heartbeat_interval``."""

    def __init__(
        self, store: LeaseStore, cfg: Config, worker_id: str | None = None, lease_clock: LeaseClock | None = None
    ) -> None:
        self.store = store
        self.cfg = cfg
        self.worker_id = worker_id or new_worker_id()
        self.lease_timeout = timedelta(seconds=cfg.settings.smart_sensor.lease_timeout)
        self.ranges: list[ShardRange] = cfg.resolved_shard_ranges
        self.owned: dict[int, Lease] = {}
        self.clock = lease_clock or LeaseClock()  # the database's time: what this worker's leases are judged by
        self.started_at = clock.now()
        failover = cfg.settings.smart_sensor.failover_after
        self.failover_after = timedelta(seconds=failover) if failover > 0 else None
        self.checks_failing_since: datetime | None = None  # every check of its rounds failing since
        self.checks_answered_at: datetime | None = None  # a check of its rounds last answered
        self._last_failure: datetime | None = None

    def note_checks(self, failing: bool | None) -> None:
        """What this worker's latest round said of its checks (``round.report.checks_all_failed``): all failed
        (True), some answered (False: failing no more), or none was made (None: nothing learnt)."""
        if failing is None:
            return
        now = self.clock.now()
        if not failing:
            self.checks_failing_since = self._last_failure = None
            self.checks_answered_at = now
            return
        self._last_failure = now
        if self.checks_failing_since is None:
            self.checks_failing_since = now

    def _forget_old_failure(self, now: datetime) -> None:
        """A worker that handed its ranges over makes no more checks: once none has failed for ``failover_after``
        (a lease at least), it is taken to answer again, takes its share, and its rounds tell."""
        quiet = max(self.failover_after or self.lease_timeout, self.lease_timeout)
        if self._last_failure is not None and now - self._last_failure > quiet:
            self.checks_failing_since = self._last_failure = None

    def _share(self, tx: LeaseOps, now: datetime) -> int:
        """How many ranges this worker should hold: a fair share of the live workers; but a live worker whose
        checks have all failed for ``failover_after`` while another's answered (after it had been failing for half
        that, and within it) holds none, and the others a fair share of the rest. When no worker's checks answer,
        nobody moves: an answer from just before a fault that hit everyone (a round ending as it began) is too
        early to count."""
        checks = tx.live_worker_checks(now - self.lease_timeout)
        if self.failover_after is not None:
            cutoff, margin = now - self.failover_after, self.failover_after / 2
            answers = [c.answered_at for c in checks.values() if c.answered_at is not None]
            handing = {
                w
                for w, c in checks.items()
                if c.failing_since is not None
                and c.failing_since <= cutoff
                and any(a >= max(cutoff, c.failing_since + margin) for a in answers)
            }
            if handing:
                if self.worker_id in handing:
                    return 0
                return math.ceil(len(self.ranges) / max(1, len(checks) - len(handing)))
        return math.ceil(len(self.ranges) / max(1, len(checks)))

    def heartbeat(self, now: datetime | None = None) -> dict[str, list[int]]:
        """Renew what we hold, drop what we lost, claim or release to reach our fair share, all judged by the
        database's time (read first: ``LeaseClock.sync``), or by ``now`` when given (a test's clock).

        Returns the shard_min of ranges ``claimed``, ``lost`` and ``released`` in this beat.
        """
        changes: dict[str, list[int]] = {"claimed": [], "lost": [], "released": []}
        with self.store.transaction() as tx:
            now = now or self.clock.sync(tx.database_now)
            expires = now + self.lease_timeout
            self._forget_old_failure(now)
            checks = WorkerChecks(self.checks_failing_since, self.checks_answered_at)
            tx.upsert_worker(self.worker_id, socket.gethostname(), os.getpid(), self.started_at, now, checks)
            tx.renew_leases(self.worker_id, now, expires)
            rows = tx.load_leases()
            if self._reshape(tx, rows, now):  # shard_ranges changed since the rows were made
                rows = tx.load_leases()
            if {r.lo for r in self.ranges} - {row.shard_min for row in rows}:
                tx.ensure_leases(self.ranges)  # first start, or new ranges in the config
                rows = tx.load_leases()
            target = self._share(tx, now)
        configured = {r.lo: r for r in self.ranges}
        rows = [r for r in rows if r.shard_min in configured and r.shard_max == configured[r.shard_min].hi]
        held = [lease for lease in (r.held_lease(now) for r in rows) if lease is not None]
        mine = {lease.shard_min: lease for lease in held if lease.owner == self.worker_id}
        for lo in list(self.owned):
            if lo not in mine or mine[lo].epoch != self.owned[lo].epoch:
                changes["lost"].append(lo)
                del self.owned[lo]
        self.owned.update(mine)
        if target == 0 and self.owned:
            log.warning(
                "worker %s hands its ranges over: every check of its rounds has failed since %s (the metastore out "
                "of its reach?) while other workers' answer",
                self.worker_id,
                self.checks_failing_since,
            )
        free = [r for r in rows if not r.held(now)]
        with self.store.transaction() as tx:
            for r in free:
                if len(self.owned) >= target:
                    break
                if tx.claim_lease(r.shard_min, r.epoch, self.worker_id, now, expires):
                    self.owned[r.shard_min] = Lease(r.shard_min, r.shard_max, self.worker_id, r.epoch + 1, expires)
                    changes["claimed"].append(r.shard_min)
            # More than our share while others wait with nothing: give back the extras (highest first).
            if len(self.owned) > target:
                for lo in sorted(self.owned, reverse=True)[: len(self.owned) - target]:
                    lease = self.owned.pop(lo)
                    tx.release_lease(lo, self.worker_id, lease.epoch)
                    changes["released"].append(lo)
        for kind, los in changes.items():
            if los:
                log.info("worker %s %s ranges %s", self.worker_id, kind, los)
        return changes

    def _reshape(self, tx: LeaseOps, rows: list[LeaseRow], now: datetime) -> bool:
        """Fit lease rows left by another ``shard_ranges`` to this one once nobody holds them.

        Without this a configured range whose old row has another upper bound would never be claimed,
        and its tasks would wait forever. Rows a live worker (with the old config) still holds are
        reshaped after that worker stops or its lease expires; until then both serve the overlap,
        and state guards keep every task marked once.
        """
        configured = {r.lo: r.hi for r in self.ranges}
        changed = False
        for row in rows:
            want = configured.get(row.shard_min)
            if want == row.shard_max:
                continue
            if tx.reshape_lease(row.shard_min, row.epoch, want, now):
                log.info(
                    "lease row %s-%s reshaped to %s",
                    row.shard_min,
                    row.shard_max,
                    f"{row.shard_min}-{want}" if want is not None else "nothing (range no longer configured)",
                )
                changed = True
        return changed

    def release_all(self) -> None:
        """Clean stop: give every range back at once and remove our worker row."""
        with self.store.transaction() as tx:
            tx.release_all_leases(self.worker_id)
            tx.delete_worker(self.worker_id)
        self.owned.clear()
