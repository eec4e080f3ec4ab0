"""The lease rules: when a lease row is held, and the fence a worker writes under."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from smartsensor.domain.keys import Fence


@dataclass(frozen=True)
class Lease:
    """A shard range owned by one worker under one epoch."""

    shard_min: int
    shard_max: int
    owner: str
    epoch: int
    expires_at: datetime

    @property
    def fence(self) -> Fence:
        return Fence(self.shard_min, self.owner, self.epoch)


@dataclass(frozen=True)
class LeaseRow:
    """One shard_lease row as read (``LeaseOps.load_leases``): a range, its owner if any, the epoch every claim
    bumps (the fencing token), and when the owner's lease lapses unless renewed."""

    shard_min: int
    shard_max: int
    owner: str | None
    epoch: int
    expires_at: datetime | None

    def held_lease(self, now: datetime) -> Lease | None:
        """The one lease-expiry rule (the SQL twin is ``adapters.sql.leases._free_or_expired``): a lease row is held
        while it has an owner and an expiry still in the future; otherwise anyone may claim it. The lease it holds,
        or None."""
        if self.owner is None or self.expires_at is None or self.expires_at <= now:
            return None
        return Lease(self.shard_min, self.shard_max, self.owner, self.epoch, self.expires_at)

    def held(self, now: datetime) -> bool:
        """Held by its owner at ``now`` (``held_lease``'s rule)."""
        return self.held_lease(now) is not None

    def held_under(self, fence: Fence, now: datetime) -> bool:
        """Held at ``now`` by ``fence``'s owner under its epoch: a write under that fence applies (the SQL twin is
        ``adapters.sql.tasks._fenced``)."""
        lease = self.held_lease(now)
        return lease is not None and lease.fence == fence


@dataclass(frozen=True)
class WorkerChecks:
    """What one worker's checks did, as its heartbeat records it: since when every check of its rounds has failed
    (None: not failing) and when one last answered (None: never)."""

    failing_since: datetime | None = None
    answered_at: datetime | None = None


NO_CHECKS = WorkerChecks()  # a worker whose checks neither failed nor answered yet
