"""``ports.ExpiredRows`` in memory: retention's guarded deletes over the rows the other memory twins hold (the task
instances, workers, range rounds and leases of an ``adapters.memory.InMemoryStore``, the Airflow keys of an
``adapters.memory_external.MemoryExternalTryStore`` over it, the watches and outbox of an
``adapters.memory_outbox.MemoryOutboxStore``), by the rules of ``adapters.sql.retention``: windows of ``size`` keys
in primary-key order, a row deleted only while what made it eligible still holds, a dry run counting instead.
Each operation holds its rows' lock (one transaction) and counts the statements the SQL store sends for it. Held to
``adapters.sql.status_store.SqlExpiredRows`` by tests/integration/test_retention_parity.py."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Callable, Iterable, Sequence, TypeVar

from smartsensor.adapters.memory_external import MemoryExternalTryStore
from smartsensor.adapters.memory_outbox import MemoryOutboxStore
from smartsensor.domain.keys import ExternalKey
from smartsensor.domain.landings import SETTLED
from smartsensor.domain.rows import ExternalRow, TaskRow
from smartsensor.domain.states import State
from smartsensor.domain.status_rows import Batch, Key

K = TypeVar("K", bound=tuple[Any, ...])


def ended_before(row: TaskRow, cutoff: datetime) -> bool:
    """``retention._ended_before``: an ended state, and its end (else its last change, else its registration)
    before ``cutoff``."""
    return row.state in State.FINISHED and (row.end_date or row.updated_at or row.execution_date) < cutoff


def _external_key(row: ExternalRow) -> Key:
    """``retention.EX_KEY``: external_task's primary key, in its columns' order."""
    return row.dag_id, row.task_id, row.run_id, row.map_index, row.instance


class MemoryExpiredRows:
    """``ports.ExpiredRows`` over ``external``'s mappings and its store's rows, and ``outbox``'s."""

    def __init__(self, external: MemoryExternalTryStore, outbox: MemoryOutboxStore) -> None:
        self.external, self.store, self.outbox = external, external.store, outbox
        self._statements = 0

    def _window(self, keys: Iterable[K], after: Key | None, size: int) -> tuple[list[K], Key | None]:
        """``retention.window_end`` and the window it ends: the keys in (after, end], end the ``size``-th key after
        ``after`` (None: fewer are left, the window open)."""
        later = sorted(k for k in keys if after is None or k > after)
        end = tuple(later[size - 1]) if len(later) >= size else None
        return [k for k in later if end is None or k <= end], end

    def _delete(self, table: dict[Any, Any], keys: Sequence[Any], dry_run: bool) -> int:
        if not dry_run:
            for key in keys:
                del table[key]
        return len(keys)

    def prune_keys_batch(self, after: Key | None, size: int, cutoff: datetime, dry_run: bool) -> Batch:
        """``retention.prune_keys_batch``: the keys of the window registered before ``cutoff`` whose task instance
        ended before it or is gone."""
        with self.store.lock:
            self._statements += 2
            by_key: dict[Key, ExternalKey] = {_external_key(m): k for k, m in self.external.mappings.items()}
            window, end = self._window(by_key, after, size)
            gone = [by_key[k] for k in window if self._key_expired(self.external.mappings[by_key[k]], cutoff)]
            return Batch(self._delete(self.external.mappings, gone, dry_run), end)

    def _key_expired(self, mapped: ExternalRow, cutoff: datetime) -> bool:
        task = self.store.tasks.get(mapped.ti_key)
        return mapped.registered_at < cutoff and (task is None or ended_before(task, cutoff))

    def prune_tasks_batch(self, after: Key | None, size: int, cutoff: datetime, dry_run: bool) -> Batch:
        """``retention.prune_tasks_batch``: the task instances of the window that ended before ``cutoff``."""
        with self.store.lock:
            self._statements += 2
            window, end = self._window(self.store.tasks, after, size)
            gone = [k for k in window if ended_before(self.store.tasks[k], cutoff)]
            return Batch(self._delete(self.store.tasks, gone, dry_run), end)

    def _limited(self, table: dict[str, Any], old: Callable[[Any], bool], size: int, dry_run: bool) -> int:
        """The rows ``old`` picks (all to count; the first ``size`` by primary key to delete)."""
        self._statements += 1
        keys = sorted(k for k, row in table.items() if old(row))
        return self._delete(table, keys if dry_run else keys[:size], dry_run)

    def prune_rounds(self, cutoff: datetime, size: int, dry_run: bool) -> int:
        """``retention.idle_rounds``: the range rounds whose last round is before ``cutoff``."""
        with self.store.lock:
            old = lambda r: r["last_round_at"] is not None and r["last_round_at"] < cutoff  # noqa: E731
            return self._limited(self.store.rounds, old, size, dry_run)

    def prune_workers(self, cutoff: datetime, size: int, dry_run: bool) -> int:
        """``retention.dead_workers``: workers last heard of before ``cutoff`` that own no lease."""
        with self.store.lock:
            owners = {lease.owner for lease in self.store.leases.values()}

            def dead(w: dict[str, Any]) -> bool:
                beat = w.get("heartbeat_at") or w.get("started_at")
                return beat is not None and beat < cutoff and w["worker_id"] not in owners

            return self._limited(self.store.workers, dead, size, dry_run)

    def watch_cutoff(self, now: datetime, age: timedelta) -> datetime | None:
        """``retention.watch_cutoff``: ``age`` before the newest ``seen_at``, or before ``now`` if earlier."""
        with self.outbox.lock:
            self._statements += 1
            newest = max((w.seen_at for w in self.outbox.watches.values()), default=None)
        return None if newest is None else min(now, newest) - age

    def read_unwatched(self, cutoff: datetime, after: str, size: int) -> list[str]:
        """``retention.unwatched_uris``."""
        with self.outbox.lock:
            self._statements += 1
            return sorted(u for u, w in self.outbox.watches.items() if u > after and w.seen_at < cutoff and w.watched)[
                :size
            ]

    def count_unwatched_landings(self, uris: Sequence[str]) -> int:
        """``retention.settled_landings_of`` (no statement for no uri)."""
        if not uris:
            return 0
        with self.outbox.lock:
            self._statements += 1
            return sum(1 for r in self.outbox.outbox.values() if r.uri in uris and r.state in SETTLED)

    def forget_unwatched_batch(self, uri: str, cutoff: datetime, size: int) -> tuple[int, bool]:
        """``retention.forget_unwatched``: while ``uri``'s watch is unlisted since before ``cutoff``, its baseline
        dropped, up to ``size`` settled rows (lowest ids first), then the watch marked forgotten once it has no row
        left."""
        with self.outbox.lock:
            self._statements += 1
            watch = self.outbox.watches.get(uri)
            if watch is None or not watch.seen_at < cutoff or not watch.watched:
                return 0, False
            self._statements += 2
            self.outbox.watches[uri] = replace(watch, baselined_at=None)
            rows = self.outbox.outbox
            gone = sorted(i for i, r in rows.items() if r.uri == uri and r.state in SETTLED)[:size]
            self._delete(rows, gone, dry_run=False)
            if len(gone) == size:
                return len(gone), False
            self._statements += 1
            if any(r.uri == uri for r in rows.values()):
                return len(gone), False
            self.outbox.watches[uri] = replace(self.outbox.watches[uri], forgotten_at=watch.seen_at)
            return len(gone), True

    def statements(self) -> int:
        """The statements the SQL store would have sent so far."""
        return self._statements
