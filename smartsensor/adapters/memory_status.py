"""``ports.StateSamples`` in memory: the status page's samples of tasks by state, one per bucket, with the SQL
store's rules (the first write of a bucket wins; a bucket with no task to count holds no row, so it may be written
again), for tests of the sampler without a database (held to ``adapters.sql.status_store.SqlStateSamples`` by
tests/integration/test_status_parity.py). One lock makes each operation a transaction; not shared between
processes."""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Callable, Mapping


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
