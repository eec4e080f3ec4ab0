"""``ports.ExternalTryStore`` in memory: the external door's mappings (``external_task`` rows, ``ExternalRow`` by key)
beside the task rows of an ``adapters.memory.InMemoryStore`` (so a round and a user's change share the table the
registrations write), with the SQL store's guards: a key moves only from the mapping read to a newer try (or the
same try's new check), and the task instance it supersedes is skipped only while it still waits (``tasks.set_state``
from the waiting states), so a task is never resurrected or ended twice and a user's manual change wins. Each
operation is one transaction (the store's lock); a primary key already taken writes nothing and raises
``InsertConflict``, as the SQL store does on its IntegrityError. Held to ``adapters.sql.external.SqlExternalTryStore``
by tests/integration/test_external_store_parity.py. No NOTIFY: one process has no listener to wake."""

from __future__ import annotations

from datetime import datetime
from typing import Sequence

from smartsensor.adapters.memory import InMemoryStore
from smartsensor.domain.clock import aware_utc
from smartsensor.domain.keys import ExternalKey, TaskKey
from smartsensor.domain.rows import ExternalRow, ExternalState, NewTry, Superseded, TaskRow, TryRegistration
from smartsensor.domain.states import State
from smartsensor.ports import InsertConflict

SUPERSEDABLE = (*State.SMART_WAITING, State.UP_FOR_RETRY)  # the states a superseded try is skipped from


def _aware(row: TaskRow) -> TaskRow:
    """``row`` with its times aware UTC, as the SQL columns (``UtcDateTime``) hand them back."""
    return TaskRow._make(aware_utc(v) if isinstance(v, datetime) else v for v in row)


class MemoryExternalTryStore:
    """``ports.ExternalTryStore`` over an ``InMemoryStore``'s task rows (a new empty one by default); ``mappings``
    holds the external_task rows."""

    def __init__(self, store: InMemoryStore | None = None) -> None:
        self.store = store if store is not None else InMemoryStore()
        self.mappings: dict[ExternalKey, ExternalRow] = {}

    def read_states(self, keys: Sequence[ExternalKey]) -> dict[ExternalKey, ExternalState]:
        """``external.external_states``: the mapped keys whose task instance exists (an inner join)."""
        out: dict[ExternalKey, ExternalState] = {}
        with self.store.lock:
            for key in dict.fromkeys(keys):
                mapped = self.mappings.get(key)
                ti = self.store.tasks.get(mapped.ti_key) if mapped is not None else None
                if mapped is not None and ti is not None:
                    out[key] = ExternalState(mapped.try_number, ti.state, ti.error, ti.hashcode)
        return out

    def register_try(
        self, key: ExternalKey, try_number: int, row: TaskRow, logical_date: datetime | None, superseded: Superseded
    ) -> TryRegistration:
        """``SqlExternalTryStore.register_try``: ``get_external``, ``tasks.get_task``, ``tasks.insert_tasks_bulk``,
        ``insert_external`` or ``tasks.set_state`` and ``move_external``; InsertConflict when ``row``'s key is
        taken."""
        row = _aware(row)
        with self.store.lock:
            mapped = self.mappings.get(key)
            if mapped is not None and mapped.try_number > try_number:
                return TryRegistration(mapped.try_number, None)
            same_try = mapped is not None and mapped.try_number == try_number
            if mapped is not None and same_try:
                ti = self.store.tasks.get(mapped.ti_key)
                if ti is not None and ti.waits_as(row):
                    return TryRegistration(try_number, ti)
            if row.key in self.store.tasks:  # the task instance's primary key: an IntegrityError there
                raise InsertConflict(f"task instance {tuple(row.key)} exists")
            now = row.execution_date
            self.store.add_task(row)
            if mapped is None:
                self.mappings[key] = _mapping(key, try_number, logical_date, row)
                return TryRegistration(None, None)
            self._skip(mapped.ti_key, now, superseded.other_check if same_try else superseded.newer_try)
            self.mappings[key] = mapped._replace(
                try_number=try_number, ti_task_id=row.task_id, ti_execution_date=now, registered_at=now
            )
            return TryRegistration(mapped.try_number, None)

    def register_new_tries(self, tries: Sequence[NewTry]) -> set[ExternalKey]:
        """``SqlExternalTryStore.register_new_tries``: ``mapped_keys``, ``tasks.insert_tasks_bulk`` and the mappings'
        insert; InsertConflict, nothing written, when a key or a task instance's key is taken or given twice."""
        tries = [t._replace(row=_aware(t.row)) for t in tries]
        with self.store.lock:
            new = [t for t in tries if t.key not in self.mappings]
            keys, tis = [t.key for t in new], [t.row.key for t in new]
            if len(set(keys)) < len(keys) or len(set(tis)) < len(tis) or any(k in self.store.tasks for k in tis):
                raise InsertConflict(f"a key or a task instance of {len(new)} new tries is taken or given twice")
            for t in new:
                self.store.add_task(t.row)
                self.mappings[t.key] = _mapping(t.key, t.try_number, t.logical_date, t.row)
            return set(keys)

    def _skip(self, key: TaskKey, now: datetime, error: str) -> None:
        """``tasks.set_state(key, skipped, from_states=SUPERSEDABLE, now, error)``: only while it still waits."""
        ti = self.store.tasks.get(key)
        if ti is not None and ti.state in SUPERSEDABLE:
            self.store.change_task(key, state=State.SKIPPED, updated_at=now, end_date=now, error=error)


def _mapping(key: ExternalKey, try_number: int, logical_date: datetime | None, row: TaskRow) -> ExternalRow:
    """``insert_external``'s row: ``key`` mapped to ``row``, registered at its execution date."""
    when = row.execution_date
    logical = aware_utc(logical_date) if logical_date is not None else None
    return ExternalRow(
        key.dag_id, key.task_id, key.run_id, key.map_index, try_number, logical, row.task_id, when, when, key.instance
    )
