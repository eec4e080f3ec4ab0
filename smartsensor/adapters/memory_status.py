"""The status page's stores in memory, for tests of the sampler and the page without a database (held to
``adapters.sql.status_store``'s by tests/integration/test_status_parity.py): ``MemoryStateSamples``
(``ports.StateSamples``: one sample per bucket with the SQL store's rules: the first write of a bucket wins; a
bucket with no task to count holds no row, so it may be written again) and ``MemoryOverviewReads``
(``ports.OverviewReads``, over an ``adapters.memory.InMemoryStore``'s tasks). One lock makes each operation a
transaction; not shared between processes."""

from __future__ import annotations

import threading
from collections import defaultdict
from datetime import datetime
from typing import Callable, Iterable, Mapping

from smartsensor.adapters.memory import InMemoryStore
from smartsensor.domain.rows import TaskRow
from smartsensor.domain.states import State
from smartsensor.domain.status_rows import OverviewRows


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
