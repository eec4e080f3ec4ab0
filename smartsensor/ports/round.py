"""The metadata database as a shard round sees it (``RoundStore``) and the leases over the ranges (``LeaseStore``,
``LeaseOps``)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol, Sequence

from smartsensor.domain.keys import CohortRows, Fence
from smartsensor.domain.leases import NO_CHECKS, LeaseRow, WorkerChecks
from smartsensor.domain.transitions import RoundWrites


class RoundStore(Protocol):
    """Reads and guarded writes of one shard range's round. Every write is idempotent and, with a
    ``fence``, applies only while that lease epoch is still held at the time of the write."""

    def load_cohorts(
        self, shard_min: int, shard_max: int, now: datetime, hostname: str, fence: Fence | None
    ) -> tuple[CohortRows, int]:
        """Start the pending tasks of the range, give a start to started ones that have none, then return every
        waiting one counted per (check, cohort), and how many were started: what an incremental worker rebuilds
        its index from (first round, takeover, every index_rebuild_interval)."""
        ...

    def start_new(
        self, shard_min: int, shard_max: int, now: datetime, hostname: str, fence: Fence | None
    ) -> CohortRows:
        """Start the range's pending tasks (those that arrived since the last call) and return them per
        (check, cohort): an incremental round's change feed. Nothing under a fence no longer held."""
        ...

    def changed_since(self, shard_min: int, shard_max: int, since: datetime, starter: str) -> CohortRows:
        """The started (smart_running) tasks of the range whose row changed at or after ``since``, per (check,
        cohort), except those ``starter`` started and nobody changed since (its own feed already counted them):
        what a reconciliation compares with the index. Read-only."""
        ...

    def oldest_open_write(self) -> datetime | None:
        """When the oldest transaction another session holds open on the database began (aware UTC, the clock
        ``updated_at`` is stamped in), or None when none is open or the store cannot tell: a row such a
        transaction stamps commits later, with a time at or after that. Read-only."""
        ...

    def write_round(
        self, shard_min: int, shard_max: int, writes: RoundWrites, now: datetime, fence: Fence | None
    ) -> dict[str, int]:
        """Apply a round's state changes in one transaction; returns how many tasks went to each state."""
        ...

    def holds(self, fence: Fence, now: datetime) -> bool:
        """True while the lease of ``fence`` is held by its owner under its epoch."""
        ...

    def record_round(
        self,
        range_rounds_id: str,
        hostname: str,
        pid: int,
        shard_min: int,
        shard_max: int,
        now: datetime,
        seconds: float,
        summary_json: str,
    ) -> None:
        """Keep this range rounds' last round for `smartsensor status`, under its ``range_rounds_id``."""
        ...

    def forget_range_rounds(self, range_rounds_id: str) -> None:
        """Remove a range rounds' round row (clean stop)."""
        ...

    def statements(self) -> int:
        """Statements sent to the store so far: a counter that never wobbles, read before and after a round for its
        ``db_statements``."""
        ...

    def write_concurrency(self) -> int:
        """How many ranges' ``write_round`` may run at once (1 where writers serialise anyway, as on SQLite)."""
        ...


class LeaseOps(Protocol):
    """Lease and worker-row operations inside one transaction. Claims and reshapes are compare-and-set
    on the epoch read; a lease that lapsed is never renewed, only re-claimed (which bumps its epoch)."""

    def database_now(self) -> datetime:
        """The database's own time (aware UTC): the one clock every worker judges leases by
        (``service.lease_clock``)."""
        ...

    def upsert_worker(
        self,
        worker_id: str,
        hostname: str,
        pid: int,
        started_at: datetime,
        now: datetime,
        checks: WorkerChecks = NO_CHECKS,
    ) -> None:
        """Record this worker's heartbeat, and what its checks did (``WorkerChecks``)."""
        ...

    def delete_worker(self, worker_id: str) -> None: ...

    def live_worker_checks(self, since: datetime) -> dict[str, WorkerChecks]:
        """What the checks of each worker that heartbeated after ``since`` did, by worker id."""
        ...

    def load_leases(self) -> list[LeaseRow]:
        """Every lease row in range order."""
        ...

    def ensure_leases(self, ranges: Sequence[Any]) -> None:
        """A free row for every configured range (``.lo``/``.hi``) that has none."""
        ...

    def renew_leases(self, owner: str, now: datetime, expires_at: datetime) -> int:
        """Extend what ``owner`` still holds unexpired."""
        ...

    def reshape_lease(self, shard_min: int, seen_epoch: int, shard_max: int | None, now: datetime) -> bool:
        """Fit a free or expired row to a new upper bound (epoch bumped), or delete it (``shard_max`` None)."""
        ...

    def claim_lease(self, shard_min: int, seen_epoch: int, owner: str, now: datetime, expires_at: datetime) -> bool:
        """Take a free or expired range if its epoch is still ``seen_epoch``; the epoch goes up by one."""
        ...

    def release_lease(self, shard_min: int, owner: str, epoch: int) -> bool: ...

    def release_all_leases(self, owner: str) -> int: ...


class LeaseStore(Protocol):
    """Where leases live."""

    def transaction(self) -> AbstractContextManager[LeaseOps]:
        """Operations that commit together when the block ends, and not at all if it raises."""
        ...
