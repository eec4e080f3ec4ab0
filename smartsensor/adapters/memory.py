"""An in-memory store: ``RoundStore`` and ``LeaseStore`` with the SQL store's guards and fences, over dicts.

It exists so the round's logic (dedup, due vigils, timeouts, retries, collisions, fencing, a user's
manual change winning) and the lease manager's (fair shares, takeover, epochs, reshaping) are
unit-tested in milliseconds without a database or Spark. The integration tests run the same logic on
SQLite and PostgreSQL; the rules here must stay those of ``adapters.sql.tasks`` and
``adapters.sql.leases`` (each method names the query it mirrors). One process only.
"""

from __future__ import annotations

import copy
import threading
from collections import defaultdict
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from datetime import datetime
from typing import Any, Collection, Iterable, Iterator, Sequence

from smartsensor.domain import clock
from smartsensor.domain.clock import aware_utc
from smartsensor.domain.keys import Cohort, CohortRows, Fence, TaskKey, VigilKey
from smartsensor.domain.leases import NO_CHECKS, LeaseRow, WorkerChecks
from smartsensor.domain.rows import TaskRow
from smartsensor.domain.states import State
from smartsensor.domain.transitions import RoundWrites


class InMemoryStore:
    """``smartsensor.ports.RoundStore`` and ``LeaseStore`` in dicts. ``tasks`` holds task_instance rows
    (``TaskRow``, replaced whole on a change) by their key; ``leases`` shard_lease rows (``LeaseRow``) by shard_min;
    ``workers`` worker rows and ``rounds`` worker_round rows (their columns by name: only tests read them) by
    worker id and range_rounds_id. Operations are serialised, as SQLite does."""

    def __init__(self, rows: Iterable[TaskRow] = ()) -> None:
        self.tasks: dict[TaskKey, TaskRow] = {}
        self.leases: dict[int, LeaseRow] = {}
        self.workers: dict[str, dict[str, Any]] = {}
        self.rounds: dict[str, dict[str, Any]] = {}
        self._statements = 0
        self._lock = threading.RLock()
        for row in rows:
            self.add_task(row)

    @property
    def lock(self) -> AbstractContextManager[Any]:
        """The lock every operation holds (reentrant): what makes an operation of the doors' stores over these rows
        (``adapters.memory_standalone``, ``adapters.memory_external``) one transaction."""
        return self._lock

    # -- set-up and inspection (what registration, the lease manager or a user would do) ----------
    def add_task(self, row: TaskRow) -> None:
        """Insert a task_instance row (e.g. from ``service.task_rows.task_row``). Its times must be aware UTC, as
        the SQL store's columns (``UtcDateTime``) require: NaiveDatetimeError otherwise."""
        row = TaskRow._make(aware_utc(v) if isinstance(v, datetime) else v for v in row)
        self.tasks[row.key] = row

    def change_task(self, key: tuple[str, str, datetime], **changes: Any) -> TaskRow:
        """Change columns of a task_instance row, as an UPDATE would (a round's write, or a test's hand-written
        change); the row as it is now."""
        with self._lock:
            row = self.tasks[TaskKey(*key)] = self.tasks[TaskKey(*key)]._replace(**changes)
            return row

    def set_state(self, key: TaskKey, state: str, now: datetime | None = None) -> None:
        """A user's manual change: ``tasks.set_state`` with no ``from_states`` (``smartsensor set-state``)."""
        now = now or clock.now()
        with self._lock:
            changes: dict[str, Any] = {"state": state, "updated_at": now}
            if state in State.FINISHED or state == State.UP_FOR_RETRY:
                changes["end_date"] = now
            if state in (State.SCHEDULED, State.SMART_PENDING):
                changes.update(start_date=None, end_date=None, hostname=None, error=None)
            if state == State.SMART_RUNNING:
                changes.update(start_date=self.tasks[key].start_date or now, end_date=None, hostname=None)
            self.change_task(key, **changes)

    def set_lease(
        self, shard_min: int, shard_max: int, owner: str | None, epoch: int, expires_at: datetime | None
    ) -> None:
        """Write a shard_lease row as the lease manager would after a claim or a takeover."""
        self.leases[shard_min] = LeaseRow(shard_min, shard_max, owner, epoch, expires_at)

    # -- the port ------------------------------------------------------------------------------
    def load_cohorts(
        self, shard_min: int, shard_max: int, now: datetime, hostname: str, fence: Fence | None
    ) -> tuple[CohortRows, int]:
        """``tasks.start_pending_cohorts``, ``tasks.load_waiting_cohorts``, then ``tasks.adopt_unstarted`` if some
        started task has no start."""
        with self._lock:
            started = self._start_new(shard_min, shard_max, now, hostname, fence)
            self._statements += 1
            running = self._rows_in(shard_min, shard_max, _RUNNING)
            if any(r.start_date is None for r in running):
                self._statements += 1
                if self._fence_ok(fence, now):
                    running = [
                        r if r.start_date is not None else self.change_task(r.key, start_date=now, updated_at=now)
                        for r in running
                    ]
            return _per_cohort(r for r in running if r.start_date is not None), sum(n for _, _, n in started)

    def start_new(
        self, shard_min: int, shard_max: int, now: datetime, hostname: str, fence: Fence | None
    ) -> CohortRows:
        """``tasks.start_pending_cohorts``."""
        with self._lock:
            return self._start_new(shard_min, shard_max, now, hostname, fence)

    def _start_new(
        self, shard_min: int, shard_max: int, now: datetime, hostname: str, fence: Fence | None
    ) -> CohortRows:
        self._statements += 1
        if not self._fence_ok(fence, now):
            return []
        started = [
            self.change_task(
                r.key, state=State.SMART_RUNNING, start_date=r.start_date or now, hostname=hostname, updated_at=now
            )
            for r in self._rows_in(shard_min, shard_max, _PENDING)
        ]
        return _per_cohort(started)

    def oldest_open_write(self) -> datetime | None:
        """None: every change is applied at once, under the store's lock (no transaction stays open)."""
        return None

    def changed_since(self, shard_min: int, shard_max: int, since: datetime, starter: str) -> CohortRows:
        """``tasks.changed_cohorts``."""
        with self._lock:
            self._statements += 1
            return _per_cohort(
                r
                for r in self._rows_in(shard_min, shard_max, _RUNNING)
                if r.start_date is not None
                and r.updated_at is not None
                and r.updated_at >= since
                and (r.hostname != starter or r.updated_at != r.start_date)
            )

    def write_round(
        self, shard_min: int, shard_max: int, writes: RoundWrites, now: datetime, fence: Fence | None
    ) -> dict[str, int]:
        """``tasks.mark_hashes`` / ``mark_vigil`` / ``end_tries``, all or nothing under the fence."""
        with self._lock:
            return self._write_round(shard_min, shard_max, writes, now, fence)

    def _write_round(
        self, shard_min: int, shard_max: int, writes: RoundWrites, now: datetime, fence: Fence | None
    ) -> dict[str, int]:
        if writes.empty():
            return {}
        marked: dict[str, int] = defaultdict(int)
        statements = (
            bool(writes.landed_hashes)
            + len(writes.landed_vigils)
            + len(writes.failed)
            + len(writes.ended)
            + len(writes.bad)
        )
        self._statements += statements
        if not self._fence_ok(fence, now):
            return {}
        hashes = set(writes.landed_hashes)
        marked[State.SUCCESS] += self._update(
            lambda r: r.hashcode in hashes and _in_range(r, shard_min, shard_max),
            State.SUCCESS,
            now,
        )
        for vigil in writes.landed_vigils:
            marked[State.SUCCESS] += self._update(
                lambda r, v=vigil: _in_vigil(r, v, shard_min, shard_max), State.SUCCESS, now
            )
        for vigil, collided, error in writes.failed:
            if collided:
                marked[State.FAILED] += self._update(
                    lambda r, v=vigil: _in_vigil(r, v, shard_min, shard_max), State.FAILED, now, error
                )
            else:
                marked[State.FAILED] += self._update(
                    lambda r, h=vigil.hashcode: r.hashcode == h and _in_range(r, shard_min, shard_max),
                    State.FAILED,
                    now,
                    error,
                )
        for (state, ended_error), cohorts in writes.ended.items():
            marked[state] += self._end_cohorts(set(cohorts), shard_min, shard_max, state, now, ended_error)
        for key, cohort, why in writes.bad:
            marked[State.FAILED] += self._end_cohorts({(key, cohort)}, shard_min, shard_max, State.FAILED, now, why)
        return {k: v for k, v in marked.items() if v}

    def holds(self, fence: Fence, now: datetime) -> bool:
        self._statements += 1
        return self._fence_ok(fence, now)

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
        self._statements += 1
        self.rounds[range_rounds_id] = {
            "range_rounds_id": range_rounds_id,
            "hostname": hostname,
            "pid": pid,
            "shard_min": shard_min,
            "shard_max": shard_max,
            "last_round_at": now,
            "last_round_seconds": seconds,
            "last_round_json": summary_json,
        }

    def forget_range_rounds(self, range_rounds_id: str) -> None:
        self._statements += 1
        self.rounds.pop(range_rounds_id, None)

    def statements(self) -> int:
        return self._statements

    def write_concurrency(self) -> int:
        return 2  # serialised by the store's lock anyway; 2 exercises the round's concurrent writes in unit tests

    # -- LeaseStore (``adapters.sql.leases``) ----------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator["InMemoryStore"]:
        """Serialised; on an exception the lease and worker rows are put back as they were."""
        with self._lock:
            saved = copy.deepcopy((self.leases, self.workers))
            try:
                yield self
            except BaseException:
                self.leases, self.workers = saved
                raise

    def database_now(self) -> datetime:
        """The twin's database is this process: its wall clock."""
        return clock.now()

    def upsert_worker(
        self,
        worker_id: str,
        hostname: str,
        pid: int,
        started_at: datetime,
        now: datetime,
        checks: WorkerChecks = NO_CHECKS,
    ) -> None:
        self.workers.setdefault(
            worker_id, {"worker_id": worker_id, "hostname": hostname, "pid": pid, "started_at": started_at}
        ).update(heartbeat_at=now, checks_failing_since=checks.failing_since, checks_answered_at=checks.answered_at)

    def delete_worker(self, worker_id: str) -> None:
        self.workers.pop(worker_id, None)

    def live_worker_checks(self, since: datetime) -> dict[str, WorkerChecks]:
        return {
            w["worker_id"]: WorkerChecks(w.get("checks_failing_since"), w.get("checks_answered_at"))
            for w in self.workers.values()
            if w["heartbeat_at"] > since
        }

    def load_leases(self) -> list[LeaseRow]:
        return [self.leases[lo] for lo in sorted(self.leases)]

    def ensure_leases(self, ranges: Sequence[Any]) -> None:
        for r in ranges:
            if r.lo not in self.leases:
                self.set_lease(r.lo, r.hi, None, 0, None)

    def renew_leases(self, owner: str, now: datetime, expires_at: datetime) -> int:
        held = [row for row in self.leases.values() if row.owner == owner and row.held(now)]
        for row in held:
            self.leases[row.shard_min] = replace(row, expires_at=expires_at)
        return len(held)

    def reshape_lease(self, shard_min: int, seen_epoch: int, shard_max: int | None, now: datetime) -> bool:
        if not self._claimable(shard_min, seen_epoch, now):
            return False
        if shard_max is None:
            del self.leases[shard_min]
        else:
            self.set_lease(shard_min, shard_max, None, seen_epoch + 1, None)
        return True

    def claim_lease(self, shard_min: int, seen_epoch: int, owner: str, now: datetime, expires_at: datetime) -> bool:
        if not self._claimable(shard_min, seen_epoch, now):
            return False
        self.set_lease(shard_min, self.leases[shard_min].shard_max, owner, seen_epoch + 1, expires_at)
        return True

    def release_lease(self, shard_min: int, owner: str, epoch: int) -> bool:
        row = self.leases.get(shard_min)
        if row is None or row.owner != owner or row.epoch != epoch:
            return False
        self.leases[shard_min] = replace(row, owner=None, expires_at=None)
        return True

    def release_all_leases(self, owner: str) -> int:
        mine = [row for row in self.leases.values() if row.owner == owner]
        for row in mine:
            self.leases[row.shard_min] = replace(row, owner=None, expires_at=None)
        return len(mine)

    def _claimable(self, shard_min: int, seen_epoch: int, now: datetime) -> bool:
        """``leases._free_or_expired``: still at the epoch read, and not held."""
        row = self.leases.get(shard_min)
        return row is not None and row.epoch == seen_epoch and not row.held(now)

    # -- helpers -------------------------------------------------------------------------------
    def _rows_in(self, shard_min: int, shard_max: int, states: Collection[str]) -> list[TaskRow]:
        """The rows of the range in one of ``states`` (``_in_range``)."""
        return [r for r in self.tasks.values() if _in_range(r, shard_min, shard_max, states)]

    def _fence_ok(self, fence: Fence | None, now: datetime) -> bool:
        """The SQL store's ``_fenced`` clause: the lease row still has this owner and epoch, unexpired."""
        if fence is None:
            return True
        row = self.leases.get(fence.shard_min)
        return row is not None and row.held_under(fence, now)

    def _update(self, where: Any, state: str, now: datetime, error: str | None = None) -> int:
        changes: dict[str, Any] = {"state": state, "end_date": now, "updated_at": now}
        if error is not None:
            changes["error"] = error
        n = 0
        for row in list(self.tasks.values()):
            if where(row):
                self.change_task(row.key, **changes)
                n += 1
        return n

    def _end_cohorts(
        self,
        cohorts: set[tuple[VigilKey, Cohort]],
        shard_min: int,
        shard_max: int,
        state: str,
        now: datetime,
        error: str | None,
    ) -> int:
        return self._update(
            lambda r: _in_range(r, shard_min, shard_max, _RUNNING) and _cohort_of(r) in cohorts,
            state,
            now,
            error,
        )


_PENDING = (State.SMART_PENDING,)
_RUNNING = (State.SMART_RUNNING,)


def _in_range(row: TaskRow, shard_min: int, shard_max: int, states: Collection[str] = State.SMART_WAITING) -> bool:
    """The one spelling here of a round's row predicate: a task in one of ``states`` (waiting, by default) whose
    shardcode is in [shard_min, shard_max) (``tasks.in_range``: a NULL shardcode is in no range)."""
    code = row.shardcode
    return row.state in states and code is not None and shard_min <= code < shard_max


def _cohort_of(row: TaskRow) -> tuple[VigilKey, Cohort]:
    return row.vigil, Cohort(row.exec_dict or "", row.start_date, row.try_number)  # type: ignore[arg-type]  # started


def _per_cohort(rows: Iterable[TaskRow]) -> CohortRows:
    counts: dict[tuple[VigilKey, Cohort], int] = defaultdict(int)
    for r in rows:
        counts[_cohort_of(r)] += 1
    return [(key, cohort, n) for (key, cohort), n in counts.items()]


def _in_vigil(row: TaskRow, vigil: VigilKey, shard_min: int, shard_max: int) -> bool:
    return row.vigil == vigil and _in_range(row, shard_min, shard_max)
