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
from smartsensor.domain.leases import Lease, LeaseRow
from smartsensor.service.lease_clock import LeaseClock
from smartsensor.ports import LeaseOps, LeaseStore

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

    def heartbeat(self, now: datetime | None = None) -> dict[str, list[int]]:
        """Renew what we hold, drop what we lost, claim or release to reach our fair share, all judged by the
        database's time (read first: ``LeaseClock.sync``), or by ``now`` when given (a test's clock).

        Returns the shard_min of ranges ``claimed``, ``lost`` and ``released`` in this beat.
        """
        changes: dict[str, list[int]] = {"claimed": [], "lost": [], "released": []}
        with self.store.transaction() as tx:
            now = now or self.clock.sync(tx.database_now)
            expires = now + self.lease_timeout
            tx.upsert_worker(self.worker_id, socket.gethostname(), os.getpid(), self.started_at, now)
            tx.renew_leases(self.worker_id, now, expires)
            rows = tx.load_leases()
            if self._reshape(tx, rows, now):  # shard_ranges changed since the rows were made
                rows = tx.load_leases()
            if {r.lo for r in self.ranges} - {row.shard_min for row in rows}:
                tx.ensure_leases(self.ranges)  # first start, or new ranges in the config
                rows = tx.load_leases()
            live = tx.live_workers(now - self.lease_timeout)
        configured = {r.lo: r for r in self.ranges}
        rows = [r for r in rows if r.shard_min in configured and r.shard_max == configured[r.shard_min].hi]
        held = [lease for lease in (r.held_lease(now) for r in rows) if lease is not None]
        mine = {lease.shard_min: lease for lease in held if lease.owner == self.worker_id}
        for lo in list(self.owned):
            if lo not in mine or mine[lo].epoch != self.owned[lo].epoch:
                changes["lost"].append(lo)
                del self.owned[lo]
        self.owned.update(mine)
        target = math.ceil(len(self.ranges) / max(1, live))
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
