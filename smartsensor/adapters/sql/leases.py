"""Lease and worker-row queries (HA): claims are compare-and-set on the epoch read.

The Python twin of the expiry rule in ``_free_or_expired`` is ``smartsensor.domain.leases.LeaseRow.held_lease``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Sequence

from sqlalchemy import Connection, delete, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from smartsensor.domain import clock
from smartsensor.domain.leases import NO_CHECKS, LeaseRow, WorkerChecks
from smartsensor.schema.models import shard_lease as SL, worker as WK


def database_now(conn: Connection) -> datetime:
    """The database's time: PostgreSQL's ``clock_timestamp()`` (its host's clock, whichever host asks); SQLite's
    database is a file on this host, whose clock it is (1 statement on PostgreSQL, none on SQLite)."""
    if conn.dialect.name != "postgresql":
        return clock.now()
    return clock.aware_utc(conn.execute(select(func.clock_timestamp())).scalar_one())


def ensure_leases(conn: Connection, ranges: Sequence[Any]) -> None:
    """Create a lease row for every configured range that has none (idempotent; 1 + n statements)."""
    have = {lo for (lo,) in conn.execute(select(SL.c.shard_min))}
    for r in ranges:
        if r.lo not in have:
            try:
                with conn.begin_nested():
                    conn.execute(
                        insert(SL).values(shard_min=r.lo, shard_max=r.hi, owner=None, epoch=0, expires_at=None)
                    )
            except IntegrityError:  # another worker created it first
                pass


def _free_or_expired(shard_min: int, seen_epoch: int, now: datetime) -> tuple[Any, ...]:
    """WHERE clauses: this lease row, still at the epoch read, with no owner or an expired one."""
    return (
        SL.c.shard_min == shard_min,
        SL.c.epoch == seen_epoch,
        or_(SL.c.owner.is_(None), SL.c.expires_at.is_(None), SL.c.expires_at <= now),
    )


def reshape_lease(conn: Connection, shard_min: int, seen_epoch: int, shard_max: int | None, now: datetime) -> bool:
    """Fit a free or expired lease row to a changed ``shard_ranges``: new upper bound (epoch bumped, so
    nothing written under the old shape passes a fence again), or, with ``shard_max`` None, delete a
    row whose range is no longer configured. A row a live worker still holds is left alone.
    Compare-and-set on the epoch read. 1 statement.
    """
    claimable = _free_or_expired(shard_min, seen_epoch, now)
    if shard_max is None:
        return conn.execute(delete(SL).where(*claimable)).rowcount == 1
    return (
        conn.execute(
            update(SL).where(*claimable).values(shard_max=shard_max, owner=None, epoch=SL.c.epoch + 1, expires_at=None)
        ).rowcount
        == 1
    )


def upsert_worker(
    conn: Connection,
    worker_id: str,
    hostname: str,
    pid: int,
    started_at: datetime,
    now: datetime,
    checks: WorkerChecks = NO_CHECKS,
) -> None:
    """Record this worker's heartbeat and what its checks did (1-2 statements)."""
    beat = {"heartbeat_at": now, "checks_failing_since": checks.failing_since, "checks_answered_at": checks.answered_at}
    if conn.execute(update(WK).where(WK.c.worker_id == worker_id).values(**beat)).rowcount == 0:
        conn.execute(insert(WK).values(worker_id=worker_id, hostname=hostname, pid=pid, started_at=started_at, **beat))


def delete_worker(conn: Connection, worker_id: str) -> None:
    """Remove a worker row (clean stop). 1 statement."""
    conn.execute(delete(WK).where(WK.c.worker_id == worker_id))


def live_worker_checks(conn: Connection, since: datetime) -> dict[str, WorkerChecks]:
    """What the checks of each worker that heartbeated after ``since`` did (1 statement)."""
    query = select(WK.c.worker_id, WK.c.checks_failing_since, WK.c.checks_answered_at).where(WK.c.heartbeat_at > since)
    return {worker_id: WorkerChecks(failing, answered) for worker_id, failing, answered in conn.execute(query)}


def load_leases(conn: Connection) -> list[LeaseRow]:
    """Every lease row in range order (1 statement)."""
    query = select(SL.c.shard_min, SL.c.shard_max, SL.c.owner, SL.c.epoch, SL.c.expires_at).order_by(SL.c.shard_min)
    return [LeaseRow(*r) for r in conn.execute(query)]


def renew_leases(conn: Connection, owner: str, now: datetime, expires_at: datetime) -> int:
    """Extend every lease ``owner`` still holds unexpired. A lapsed lease is not renewed (1 statement)."""
    return conn.execute(
        update(SL).where(SL.c.owner == owner, SL.c.expires_at > now).values(expires_at=expires_at)
    ).rowcount


def claim_lease(
    conn: Connection, shard_min: int, seen_epoch: int, owner: str, now: datetime, expires_at: datetime
) -> bool:
    """Take a free or expired range: compare-and-set on the epoch read, bumping it. 1 statement.

    On Postgres a row locked by another transaction (its owner mid-write, or paused there) is
    skipped rather than waited for, so a heartbeat never blocks; the claim is retried next beat.
    """
    claimable = _free_or_expired(shard_min, seen_epoch, now)
    unlocked = select(SL.c.shard_min).where(*claimable).with_for_update(skip_locked=True)
    return (
        conn.execute(
            update(SL)
            .where(*claimable, SL.c.shard_min.in_(unlocked))
            .values(owner=owner, epoch=SL.c.epoch + 1, expires_at=expires_at)
        ).rowcount
        == 1
    )


def release_lease(conn: Connection, shard_min: int, owner: str, epoch: int) -> bool:
    """Give one range back at once (rebalance). 1 statement."""
    return (
        conn.execute(
            update(SL)
            .where(SL.c.shard_min == shard_min, SL.c.owner == owner, SL.c.epoch == epoch)
            .values(owner=None, expires_at=None)
        ).rowcount
        == 1
    )


def release_all_leases(conn: Connection, owner: str) -> int:
    """Give every range of ``owner`` back (clean stop). 1 statement."""
    return conn.execute(update(SL).where(SL.c.owner == owner).values(owner=None, expires_at=None)).rowcount
