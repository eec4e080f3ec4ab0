"""The status side's read stores in memory, for tests of `status`, the sampler and the page without a database (held
to ``adapters.sql.status_store``'s by tests/integration/test_status_parity.py and test_status_reads_parity.py):
``MemoryStateSamples`` (``ports.StateSamples``: one sample per bucket with the SQL store's rules: the first write of a
bucket wins; a bucket with no task to count holds no row, so it may be written again), ``MemoryOverviewReads``
(``ports.OverviewReads``, over an ``adapters.memory.InMemoryStore``'s tasks) and ``MemoryStatusReads``
(``ports.StatusReads``, over an ``InMemoryStore``'s rows and an ``adapters.memory_outbox.MemoryOutboxStore``'s). One
lock makes each operation a transaction; not shared between processes."""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Mapping, Sequence

from smartsensor.adapters.memory import InMemoryStore
from smartsensor.adapters.memory_outbox import MemoryOutboxStore
from smartsensor.domain.landings import REJECTED, SHOWN_PAUSED, SHOWN_REJECTED, SHOWN_UNKNOWN, UNDELIVERED
from smartsensor.domain.rows import TaskRow, ZombieRow
from smartsensor.domain.states import State
from smartsensor.domain.status_rows import (
    OutboxSummary,
    OverdueTask,
    OverviewRows,
    PastLimits,
    RejectedLanding,
    StatusQuery,
    StatusRows,
    StuckRows,
    UnknownOutcome,
    WaitingCounts,
    revision_problem,
)


class MemoryStateSamples:
    """Samples kept as {(bucket_at, state): count}; ``counts`` gives the tasks by state a sample takes (the SQL
    store counts its ``task_instance`` table)."""

    def __init__(self, counts: Callable[[], Mapping[str, int]]) -> None:
        self.counts = counts
        self.rows: dict[tuple[datetime, str], int] = {}
        self._lock = threading.Lock()

    def write_sample(self, bucket_at: datetime) -> bool:
        """Unless a row of ``bucket_at`` is there, one row per state counted now; whether it was not there."""
        with self._lock:
            if any(bucket == bucket_at for bucket, _ in self.rows):
                return False
            for state, n in self.counts().items():
                self.rows[(bucket_at, state)] = n
            return True

    def delete_before(self, before: datetime) -> int:
        """Drop the rows of buckets before ``before``; how many went."""
        with self._lock:
            gone = [key for key in self.rows if key[0] < before]
            for key in gone:
                del self.rows[key]
            return len(gone)

    def samples_since(self, since: datetime) -> list[tuple[datetime, str, int]]:
        """(bucket_at, state, count) from ``since`` on, by bucket then state."""
        with self._lock:
            return [(bucket, state, n) for (bucket, state), n in sorted(self.rows.items()) if bucket >= since]


class MemoryOverviewReads:
    """``ports.OverviewReads`` over ``store``'s tasks and ``samples``: what ``adapters.sql.overview.read_overview``
    reads, by the same rules."""

    def __init__(self, store: InMemoryStore, samples: MemoryStateSamples) -> None:
        self.store, self.samples = store, samples

    def read_overview(self, since: datetime, landings: int) -> OverviewRows:
        """The samples from ``since`` on; (operator, attr_dict, tasks) per hashcode of the waiting smart tasks
        (``waiting_checks``: the greatest of each column, in no order); the ``landings`` tasks that succeeded last,
        newest first, then by dag_id and task_id (``recent_landings``)."""
        tasks = list(self.store.tasks.values())
        checks: dict[int, list[TaskRow]] = defaultdict(list)
        for row in tasks:
            if row.state in State.SMART_WAITING:
                checks[row.hashcode].append(row)
        ended = sorted(
            (r for r in tasks if r.state == State.SUCCESS and r.end_date is not None),
            key=lambda r: (r.dag_id, r.task_id),
        )
        ended.sort(key=lambda r: r.end_date or datetime.min, reverse=True)  # stable: ties keep dag_id, task_id order
        return OverviewRows(
            self.samples.samples_since(since),
            [
                (_greatest(r.operator for r in rows), _greatest(r.attr_dict for r in rows), len(rows))
                for rows in checks.values()
            ],
            [
                {
                    "dag_id": r.dag_id,
                    "task_id": r.task_id,
                    "execution_date": r.execution_date,
                    "end_date": r.end_date,
                    "operator": r.operator,
                    "attr_dict": r.attr_dict,
                }
                for r in ended[:landings]
            ],
        )


def _greatest(values: Iterable[str | None]) -> str | None:
    """SQL's ``max``: the greatest value that is not NULL; None when all are."""
    present = [v for v in values if v is not None]
    return max(present) if present else None


class MemoryStatusReads:
    """``ports.StatusReads`` over ``store``'s task instances, leases, workers and range rounds and ``outbox``'s
    watches and outbox rows: what ``adapters.sql.status.read_status``/``read_stuck`` and
    ``landings.read_outbox_summary`` read, by the same rules (NULL as SQL treats it: in no range, no match, counted
    as one hashcode). The schema is at ``revision``, judged against ``known`` (the migrations' revisions, the head
    first; by default a schema of its own, at its head)."""

    def __init__(
        self,
        store: InMemoryStore,
        outbox: MemoryOutboxStore,
        known: Sequence[str] = ("memory",),
        revision: str | None = None,
    ) -> None:
        self.store, self.outbox, self.known = store, outbox, tuple(known)
        self.revision = revision if revision is not None else self.known[0]

    def read_status(self, query: StatusQuery) -> StatusRows:
        """``status.read_status``: the stuck tasks, the tasks per state, the waiting ones per range, the range rounds,
        leases, workers (by start), classic runs that last beat before the zombie cutoff and stranded tasks."""
        with self.store.lock:
            tasks = list(self.store.tasks.values())
            return StatusRows(
                self.read_stuck(query.landed_before, query.past_limits),
                dict(Counter(r.state or "none" for r in tasks)),
                _waiting_by_range([r for r in tasks if r.state in State.SMART_WAITING], query.ranges),
                [
                    dict(r)
                    for r in sorted(self.store.rounds.values(), key=lambda r: (r["shard_min"], r["range_rounds_id"]))
                ],
                self.store.load_leases(),
                [dict(w) for w in sorted(self.store.workers.values(), key=_by_start)],
                [
                    ZombieRow(*(getattr(r, name) for name in ZombieRow._fields))
                    for r in tasks
                    if r.state == State.RUNNING and r.updated_at is not None and r.updated_at < query.zombie_cutoff
                ],
                sum(1 for r in tasks if _stranded(r, query.shard_limit)),
            )

    def read_stuck(self, landed_before: datetime, past_limits: PastLimits) -> StuckRows:
        """``status.read_stuck``: the waiting tasks a landing of their check should have ended, and those past their
        exec_dict's time limit (asked of ``past_limits`` with each exec_dict's earliest start, by exec_dict)."""
        with self.store.lock:
            waiting = [r for r in self.store.tasks.values() if r.state in State.SMART_WAITING]
            after_landing = self._waiting_after_landing(waiting, landed_before)
            starts: dict[str | None, datetime] = {}
            for r in waiting:
                if r.start_date is not None:
                    starts[r.exec_dict] = min(starts.get(r.exec_dict, r.start_date), r.start_date)
            cutoffs, worst = past_limits(sorted(starts.items(), key=lambda s: (s[0] is not None, s[0] or "")))
            if worst is None:
                return StuckRows(after_landing, (0, None))
            past = [r for r in waiting if any(r.exec_dict == e and _started_by(r, c) for e, c in cutoffs)]
            oldest = [r for r in waiting if r.exec_dict == worst[0] and _started_by(r, worst[1])]
            first = min(oldest, key=lambda r: (r.start_date, r.dag_id, r.task_id, r.execution_date), default=None)
            shown = None if first is None else (first.dag_id, first.task_id, first.execution_date, first.start_date)
            return StuckRows(after_landing, (len(past), shown))  # type: ignore[arg-type]  # started: a start_date

    def _waiting_after_landing(self, waiting: list[TaskRow], cutoff: datetime) -> tuple[int, OverdueTask | None]:
        """``status.waiting_after_landing``: the waiting tasks (since their start, else their last change, at or
        before ``cutoff``) whose check (hashcode, classpath, attr_dict) landed at or before it; the one due
        longest (the later of the landing and its wait's start; ties by key)."""
        landed: dict[tuple[int, str, str], datetime] = {}
        for r in self.store.tasks.values():
            if r.state == State.SUCCESS and r.end_date is not None and r.end_date <= cutoff and _comparable(r):
                check = (r.hashcode, r.classpath, r.attr_dict)
                landed[check] = min(landed.get(check, r.end_date), r.end_date)
        due: list[tuple[datetime, str, str, datetime]] = []
        for r in waiting:
            since = r.start_date or r.updated_at
            first = landed.get((r.hashcode, r.classpath, r.attr_dict))
            if since is not None and since <= cutoff and first is not None and _comparable(r):
                due.append((max(first, since), r.dag_id, r.task_id, r.execution_date))
        if not due:
            return 0, None
        when, dag_id, task_id, execution_date = min(due)
        return len(due), (dag_id, task_id, execution_date, when)

    def read_outbox_summary(self, shard_limit: int) -> OutboxSummary:
        """``landings.read_outbox_summary``: rows by state, the oldest undelivered landing, the duplicates and unknown
        outcomes counted, the watches, and the ``SHOWN_UNKNOWN`` undelivered rows unknown longest."""
        with self.outbox.lock:
            rows = list(self.outbox.outbox.values())
            watched = sum(1 for w in self.outbox.watches.values() if w.watched)
            paused = tuple(
                (uri, w.paused_consumers)
                for uri, w in sorted(self.outbox.watches.items())
                if w.watched and w.paused_consumers is not None
            )[:SHOWN_PAUSED]
            orphaned = [
                uri
                for uri, w in sorted(self.outbox.watches.items())
                if w.watched and not 0 <= w.shardcode < shard_limit
            ][:SHOWN_PAUSED]
        undelivered = [r for r in rows if r.state in UNDELIVERED]
        unknown = sorted((r for r in undelivered if r.unknown_since is not None), key=lambda r: (r.unknown_since, r.id))
        return OutboxSummary(
            dict(Counter(r.state for r in rows)),
            min((r.landed_at for r in undelivered), default=None),
            sum(r.posts - 1 for r in rows if r.posts > 1),
            sum(r.unknown_outcomes for r in rows),
            watched,
            len(unknown),
            tuple(
                UnknownOutcome(r.id, r.uri, r.partition_name, r.state, r.unknown_since, r.last_error)  # type: ignore[arg-type]
                for r in unknown[:SHOWN_UNKNOWN]
            ),
            tuple(
                RejectedLanding(r.id, r.uri, r.partition_name, r.last_error)
                for r in sorted((r for r in rows if r.state == REJECTED), key=lambda r: -r.id)[:SHOWN_REJECTED]
            ),
            paused,
            tuple((uri, sum(1 for r in undelivered if r.uri == uri)) for uri in orphaned),
        )

    def schema_revision(self) -> str | None:
        """The revision the twin's schema is at."""
        return self.revision

    def schema_problem(self, revision: str | None) -> str | None:
        """``status_rows.revision_problem`` against ``known``."""
        return revision_problem(revision, self.known)


def _comparable(row: TaskRow) -> bool:
    """Whether the row's check can equal another's in SQL (NULL equals nothing)."""
    return None not in (row.hashcode, row.classpath, row.attr_dict)


def _by_range(row: Mapping[str, Any]) -> tuple[int, str]:
    """Range rounds by shard_min, then id."""
    return row["shard_min"], row["range_rounds_id"]


def _by_start(worker: Mapping[str, Any]) -> tuple[bool, datetime]:
    """Workers by ``started_at``, NULL last (PostgreSQL's order; a worker always writes it)."""
    return worker["started_at"] is None, worker["started_at"] or datetime.max.replace(tzinfo=timezone.utc)


def _started_by(row: TaskRow, cutoff: datetime) -> bool:
    return row.start_date is not None and row.start_date <= cutoff


def _stranded(row: TaskRow, limit: int) -> bool:
    """``status.stranded_count``'s rows: waiting or up for retry, with a shardcode outside [0, limit) or none."""
    code = row.shardcode
    return row.state in (*State.SMART_WAITING, State.UP_FOR_RETRY) and (code is None or not 0 <= code < limit)


def _waiting_by_range(waiting: list[TaskRow], ranges: Sequence[tuple[int, int]]) -> WaitingCounts:
    """``status.waiting_by_range``: the waiting tasks and their distinct hashcodes (None one of them), in all and
    per range given (a task in the first range that holds its shardcode)."""
    per_range: dict[int, tuple[int, set[int | None]]] = {}
    for r in waiting:
        code = r.shardcode
        i = next((i for i, (lo, hi) in enumerate(ranges) if code is not None and lo <= code < hi), None)
        if i is not None:
            n, hashes = per_range.get(i, (0, set()))
            per_range[i] = (n + 1, hashes | {r.hashcode})
    return WaitingCounts(
        len(waiting), len({r.hashcode for r in waiting}), {i: (n, len(h)) for i, (n, h) in per_range.items()}
    )
