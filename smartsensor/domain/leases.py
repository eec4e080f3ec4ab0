"""The lease rules: when a lease row is held, and the fence a worker writes under."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from smartsensor.domain.keys import Fence


def lease_held(row: dict[str, Any], now: datetime) -> bool:
    """The one lease-expiry rule (the SQL twin is ``adapters.sql.leases._free_or_expired``): a lease row is held while
    it has an owner and an expiry still in the future; otherwise anyone may claim it."""
    return row["owner"] is not None and row["expires_at"] is not None and row["expires_at"] > now


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
