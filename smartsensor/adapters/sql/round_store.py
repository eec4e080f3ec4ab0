"""The SQL ``RoundStore``: a shard round's reads and writes on SQLite or PostgreSQL, through the named queries."""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from smartsensor.adapters.sql import (
    channels as channel_sql,
    leases as lease_sql,
    status as status_sql,
    tasks as task_sql,
)
from smartsensor.adapters.sql.engine import statement_count
from smartsensor.domain.keys import CohortRows, Fence
from smartsensor.domain.states import State
from smartsensor.domain.transitions import RoundWrites
from smartsensor.sensors.errors import first_line

log = logging.getLogger(__name__)

WRITE_ATTEMPTS = 3
_LOCK_RACES = {"40P01", "40001"}  # PostgreSQL: deadlock_detected, serialization_failure


def _lost_a_lock_race(exc: DBAPIError) -> bool:
    """Whether PostgreSQL rolled the transaction back to break a deadlock (or a serialization conflict)."""
    return getattr(exc.orig, "sqlstate", None) in _LOCK_RACES or getattr(exc.orig, "pgcode", None) in _LOCK_RACES


class SqlRoundStore:
    """``smartsensor.ports.RoundStore`` over an SQLAlchemy engine."""

    def __init__(self, engine: Engine, write_threads: int = 2) -> None:
        self.engine = engine
        self.write_threads = write_threads

    def load_cohorts(
        self, shard_min: int, shard_max: int, now: datetime, hostname: str, fence: Fence | None
    ) -> tuple[CohortRows, int]:
        """Start the pending tasks, then count every waiting one per cohort (and give a start to started ones
        without one, if there are any). 2 statements, 3 with tasks to adopt; one transaction."""
        with self.engine.begin() as conn:
            started = task_sql.start_pending_cohorts(conn, shard_min, shard_max, now, hostname, fence=fence)
            rows = task_sql.load_waiting_cohorts(conn, shard_min, shard_max)
            if any(cohort.start_date is None for _, cohort, _ in rows):
                rows = [r for r in rows if r[1].start_date is not None]
                rows += task_sql.adopt_unstarted(conn, shard_min, shard_max, now, fence=fence)
            return rows, sum(n for _, _, n in started)

    def start_new(
        self, shard_min: int, shard_max: int, now: datetime, hostname: str, fence: Fence | None
    ) -> CohortRows:
        """Start the pending tasks and return them per cohort. 1 statement."""
        with self.engine.begin() as conn:
            return task_sql.start_pending_cohorts(conn, shard_min, shard_max, now, hostname, fence=fence)

    def oldest_open_write(self) -> datetime | None:
        """``tasks.oldest_open_transaction`` on PostgreSQL (1 statement); None on SQLite, which cannot tell."""
        if self.engine.dialect.name != "postgresql":
            return None
        with self.engine.connect() as conn:
            return task_sql.oldest_open_transaction(conn)

    def changed_since(self, shard_min: int, shard_max: int, since: datetime, starter: str) -> CohortRows:
        """The started tasks of the range changed since ``since`` but by ``starter``'s feed, per cohort. 1 statement."""
        with self.engine.connect() as conn:
            return task_sql.changed_cohorts(conn, shard_min, shard_max, since, starter)

    def write_round(
        self, shard_min: int, shard_max: int, writes: RoundWrites, now: datetime, fence: Fence | None
    ) -> dict[str, int]:
        """All of a round's state changes in one transaction, each a guarded (and fenced) update. A transaction that
        PostgreSQL ends as a deadlock victim (two writers locking overlapping rows in different orders: another
        process over a range being reshaped) is run again: its updates are guarded, so a rerun is idempotent."""
        if writes.empty():
            return {}
        for _ in range(WRITE_ATTEMPTS - 1):
            try:
                return self._write_once(shard_min, shard_max, writes, now, fence)
            except DBAPIError as exc:
                if not _lost_a_lock_race(exc):
                    raise
                log.info("round write lost a lock race (%s); writing again", first_line(exc))
        return self._write_once(shard_min, shard_max, writes, now, fence)

    def _write_once(
        self, shard_min: int, shard_max: int, writes: RoundWrites, now: datetime, fence: Fence | None
    ) -> dict[str, int]:
        marked: dict[str, int] = defaultdict(int)
        with self.engine.begin() as conn:
            if writes.landed_hashes:
                marked[State.SUCCESS] += task_sql.mark_hashes(
                    conn, writes.landed_hashes, shard_min, shard_max, State.SUCCESS, now, fence=fence
                )
            for vigil in writes.landed_vigils:
                marked[State.SUCCESS] += task_sql.mark_vigil(
                    conn, vigil, shard_min, shard_max, State.SUCCESS, now, fence=fence
                )
            for vigil, collided, error in writes.failed:
                if collided:
                    marked[State.FAILED] += task_sql.mark_vigil(
                        conn, vigil, shard_min, shard_max, State.FAILED, now, error=error, fence=fence
                    )
                else:
                    marked[State.FAILED] += task_sql.mark_hashes(
                        conn, [vigil.hashcode], shard_min, shard_max, State.FAILED, now, error=error, fence=fence
                    )
            for (state, ended_error), cohorts in writes.ended.items():
                marked[state] += task_sql.end_cohorts(
                    conn, cohorts, shard_min, shard_max, state, now, error=ended_error, fence=fence
                )
            for key, cohort, why in writes.bad:
                marked[State.FAILED] += task_sql.end_cohorts(
                    conn, [(key, cohort)], shard_min, shard_max, State.FAILED, now, error=why, fence=fence
                )
            if any(marked.values()):
                channel_sql.notify_ended(conn, writes.hashcodes())  # wakes the held states requests waiting on them
        return {k: v for k, v in marked.items() if v}

    def holds(self, fence: Fence, now: datetime) -> bool:
        with self.engine.connect() as conn:
            return any(row.held_under(fence, now) for row in lease_sql.load_leases(conn))

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
        with self.engine.begin() as conn:
            status_sql.record_round(
                conn, range_rounds_id, hostname, pid, shard_min, shard_max, now, seconds, summary_json
            )

    def forget_range_rounds(self, range_rounds_id: str) -> None:
        with self.engine.begin() as conn:
            status_sql.forget_range_rounds(conn, range_rounds_id)

    def statements(self) -> int:
        return statement_count(self.engine)

    def write_concurrency(self) -> int:
        """PostgreSQL: ``write_threads`` (each range's transaction on its own connection, so a landing round marks
        on several server cores). SQLite: 1, since it has one writer at a time and a long write would make the
        others time out on its lock."""
        return self.write_threads if self.engine.dialect.name == "postgresql" else 1
