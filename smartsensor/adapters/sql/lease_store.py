"""The SQL ``LeaseStore``: lease operations on one connection, committed together."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import datetime
from typing import Any, Iterator, Sequence

from sqlalchemy import Connection, Engine

from smartsensor.adapters.sql import leases as lease_sql
from smartsensor.domain.leases import NO_CHECKS, LeaseRow, WorkerChecks


class SqlLeaseOps:
    """``smartsensor.ports.LeaseOps`` bound to one connection inside a transaction."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def database_now(self) -> datetime:
        return lease_sql.database_now(self.conn)

    def upsert_worker(
        self,
        worker_id: str,
        hostname: str,
        pid: int,
        started_at: datetime,
        now: datetime,
        checks: WorkerChecks = NO_CHECKS,
    ) -> None:
        lease_sql.upsert_worker(self.conn, worker_id, hostname, pid, started_at, now, checks)

    def delete_worker(self, worker_id: str) -> None:
        lease_sql.delete_worker(self.conn, worker_id)

    def live_worker_checks(self, since: datetime) -> dict[str, WorkerChecks]:
        return lease_sql.live_worker_checks(self.conn, since)

    def load_leases(self) -> list[LeaseRow]:
        return lease_sql.load_leases(self.conn)

    def ensure_leases(self, ranges: Sequence[Any]) -> None:
        lease_sql.ensure_leases(self.conn, ranges)

    def renew_leases(self, owner: str, now: datetime, expires_at: datetime) -> int:
        return lease_sql.renew_leases(self.conn, owner, now, expires_at)

    def reshape_lease(self, shard_min: int, seen_epoch: int, shard_max: int | None, now: datetime) -> bool:
        return lease_sql.reshape_lease(self.conn, shard_min, seen_epoch, shard_max, now)

    def claim_lease(self, shard_min: int, seen_epoch: int, owner: str, now: datetime, expires_at: datetime) -> bool:
        return lease_sql.claim_lease(self.conn, shard_min, seen_epoch, owner, now, expires_at)

    def release_lease(self, shard_min: int, owner: str, epoch: int) -> bool:
        return lease_sql.release_lease(self.conn, shard_min, owner, epoch)

    def release_all_leases(self, owner: str) -> int:
        return lease_sql.release_all_leases(self.conn, owner)


class SqlLeaseStore:
    """``smartsensor.ports.LeaseStore`` over an SQLAlchemy engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @contextmanager
    def transaction(self) -> Iterator[SqlLeaseOps]:
        with self.engine.begin() as conn:
            yield SqlLeaseOps(conn)
