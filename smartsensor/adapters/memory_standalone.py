"""The standalone door's stores in memory: ``ports.RegistrationStore``, ``SchedulerStore`` and ``ClassicRunStore``
over the task rows of an ``adapters.memory.InMemoryStore`` (so a round, the scheduler, a classic run and a user's
change can share one table), with the SQL stores' guards: every change is an UPDATE of one row ``WHERE`` its state
(and try, claim or beat) is still the one read, so a task is never resurrected or ended twice and a user's manual
change wins. Each method names the query it mirrors (of ``adapters.sql.tasks``, or the store's own in
``scheduler_store`` and ``classic_store``); each operation is one transaction (the store's lock; the rows put back if
it raises). Held to the SQL stores by tests/integration/test_standalone_store_parity.py. No NOTIFY: one process has
no listener to wake."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import datetime
from typing import Any, Callable, Iterable, Iterator, Sequence

from smartsensor.adapters.memory import InMemoryStore
from smartsensor.domain.clock import aware_utc
from smartsensor.domain.keys import TaskKey
from smartsensor.domain.rows import RetryRow, TaskRow, ZombieRow
from smartsensor.domain.states import State
from smartsensor.ports import DeadRunPlan, ExitedRunPlan, InsertConflict, RetryPlan


def _still(state: str, **columns: Any) -> Callable[[TaskRow], bool]:
    """An UPDATE's guard: the row is in ``state`` and its ``columns`` hold the values read."""
    return lambda row: row.state == state and all(getattr(row, name) == value for name, value in columns.items())


class MemoryTaskTable:
    """The task rows of an ``InMemoryStore`` (a new empty one by default), read and changed as the SQL stores do."""

    def __init__(self, store: InMemoryStore | None = None) -> None:
        self.store = store if store is not None else InMemoryStore()

    @contextmanager
    def transaction(self) -> Iterator[dict[TaskKey, TaskRow]]:
        """The rows, changed together: serialised with every other operation on the store, and put back as they were
        if the block raises (rows are replaced whole, so a shallow copy is the snapshot)."""
        with self.store.lock:
            saved = dict(self.store.tasks)
            try:
                yield self.store.tasks
            except BaseException:
                self.store.tasks.clear()
                self.store.tasks.update(saved)
                raise

    def read_task(self, key: TaskKey) -> TaskRow | None:
        """``tasks.get_task``."""
        with self.transaction() as tasks:
            return tasks.get(key)

    def end_try(
        self, key: TaskKey, new_state: str, now: datetime, error: str | None = None, try_number: int | None = None
    ) -> bool:
        """``tasks.end_running_try``: ``set_state`` from `running` (in ``try_number`` when given)."""
        with self.transaction():
            return self._set_state(key, new_state, [State.RUNNING], now, error, try_number)

    def _update(self, key: TaskKey, guard: Callable[[TaskRow], bool], **changes: Any) -> bool:
        """One row by key, ``WHERE guard``: whether it changed (an UPDATE's rowcount of 1)."""
        row = self.store.tasks.get(key)
        if row is None or not guard(row):
            return False
        self.store.change_task(key, **changes)
        return True

    def _set_state(
        self,
        key: TaskKey,
        new_state: str,
        from_states: Sequence[str],
        now: datetime,
        error: str | None,
        try_number: int | None,
    ) -> bool:
        """``tasks.set_state`` guarded on ``from_states`` (and ``try_number``): a state change of a process, never a
        user's (``InMemoryStore.set_state``)."""
        changes: dict[str, Any] = {"state": new_state, "updated_at": now}
        if new_state in State.FINISHED or new_state == State.UP_FOR_RETRY:
            changes["end_date"] = now
        if error is not None:
            changes["error"] = error
        return self._update(
            key,
            lambda r: r.state in from_states and (try_number is None or r.try_number == try_number),
            **changes,
        )

    def _claim_scheduled(self, key: TaskKey, now: datetime, hostname: str) -> bool:
        """``tasks.claim_scheduled``: scheduled → running, its start kept when set."""
        row = self.store.tasks.get(key)
        return self._update(
            key,
            _still(State.SCHEDULED),
            state=State.RUNNING,
            start_date=(row.start_date or now) if row is not None else now,
            end_date=None,
            hostname=hostname,
            updated_at=now,
        )


class MemoryRegistrationStore(MemoryTaskTable):
    """``ports.RegistrationStore`` in memory."""

    def register_rows(
        self, rows: Sequence[TaskRow], execution_date: datetime, clear: bool
    ) -> dict[tuple[str, str], str]:
        """``tasks.existing_states``, ``insert_tasks_bulk`` and ``reset_task`` in one transaction; InsertConflict when
        a row to insert is given twice (the primary key), nothing written."""
        fresh = [TaskRow._make(aware_utc(v) if isinstance(v, datetime) else v for v in row) for row in rows]
        with self.transaction() as tasks:
            existing = self._states(tasks, execution_date, {row.dag_id for row in fresh})
            new = [row for row in fresh if (row.dag_id, row.task_id) not in existing]
            if len({row.key for row in new}) < len(new):
                raise InsertConflict(f"a task instance given twice among {len(new)} rows")
            for row in new:
                tasks[row.key] = row
            if clear:
                for row in fresh:
                    if (row.dag_id, row.task_id) in existing:
                        self.store.change_task(
                            row.key, **{k: v for k, v in row.columns().items() if k not in TaskKey._fields}
                        )
            return existing

    def read_states(self, execution_date: datetime, dag_ids: Iterable[str]) -> dict[tuple[str, str], str]:
        """``tasks.existing_states``."""
        with self.transaction() as tasks:
            return self._states(tasks, execution_date, set(dag_ids))

    @staticmethod
    def _states(
        tasks: dict[TaskKey, TaskRow], execution_date: datetime, dag_ids: set[str]
    ) -> dict[tuple[str, str], str]:
        return {
            (r.dag_id, r.task_id): r.state
            for r in tasks.values()
            if r.execution_date == execution_date and r.dag_id in dag_ids
        }


class MemorySchedulerStore(MemoryTaskTable):
    """``ports.SchedulerStore`` in memory."""

    def requeue_due_retries(self, now: datetime, plan: RetryPlan) -> list[tuple[str, bool]]:
        """``scheduler_store.load_up_for_retry``, then ``requeue_retry`` or ``tasks.set_state`` from up_for_retry in its
        try."""
        done: list[tuple[str, bool]] = []
        with self.transaction() as tasks:
            due = [r for r in tasks.values() if r.state == State.UP_FOR_RETRY]
            for row in due:
                step = plan(RetryRow(*(getattr(row, name) for name in RetryRow._fields)))
                if step is None:
                    continue
                state, error = step
                if error is None:
                    changed = self._update(
                        row.key,
                        _still(State.UP_FOR_RETRY, try_number=row.try_number),
                        state=state,
                        try_number=row.try_number + 1,
                        start_date=None,
                        end_date=None,
                        hostname=None,
                        updated_at=now,
                    )
                else:
                    changed = self._set_state(row.key, state, [State.UP_FOR_RETRY], now, error, row.try_number)
                done.append((state, changed))
        return done

    def end_dead_runs(self, cutoff: datetime, now: datetime, plan: DeadRunPlan) -> list[tuple[TaskKey, str, str]]:
        """``tasks.load_zombies`` (a NULL beat is never before the cutoff), then ``scheduler_store.end_zombie`` on the
        beat read."""
        ended: list[tuple[TaskKey, str, str]] = []
        with self.transaction() as tasks:
            dead = [r for r in tasks.values() if r.state == State.RUNNING and r.updated_at and r.updated_at < cutoff]
            for row in dead:
                state, error = plan(ZombieRow(*(getattr(row, name) for name in ZombieRow._fields)))
                if self._update(
                    row.key,
                    _still(State.RUNNING, updated_at=row.updated_at),
                    state=state,
                    end_date=now,
                    updated_at=now,
                    error=error,
                ):
                    ended.append((row.key, state, error))
        return ended

    def scheduled_keys(self, limit: int) -> list[TaskKey]:
        """``tasks.keys_in_state`` (scheduled), oldest execution date first, then by DAG and task."""
        with self.transaction() as tasks:
            keys = sorted(
                (r.key for r in tasks.values() if r.state == State.SCHEDULED),
                key=lambda k: (k.execution_date, k.dag_id, k.task_id),
            )
            return keys[:limit]

    def claim_scheduled_try(self, key: TaskKey, now: datetime, claimant: str) -> int | None:
        """``tasks.claim_scheduled``, then the try it claimed."""
        with self.transaction() as tasks:
            return tasks[key].try_number if self._claim_scheduled(key, now, claimant) else None

    def end_exited_try(
        self, key: TaskKey, try_number: int, claimant: str, now: datetime, error: str, state_for: ExitedRunPlan
    ) -> str | None:
        """``tasks.get_task``, then ``scheduler_store.end_exited_run`` while it is `running` in that try under that
        claim."""
        with self.transaction() as tasks:
            row = tasks.get(key)
            if row is None or row.state != State.RUNNING or row.try_number != try_number:
                return None
            state = state_for(row)
            ended = self._update(
                key,
                _still(State.RUNNING, try_number=try_number, hostname=claimant),
                state=state,
                end_date=now,
                updated_at=now,
                error=error,
            )
            return state if ended else None


class MemoryClassicRunStore(MemoryTaskTable):
    """``ports.ClassicRunStore`` in memory."""

    def claim_run(
        self, key: TaskKey, now: datetime, hostname: str, claimed: bool
    ) -> tuple[TaskRow | None, TaskRow | None]:
        """``tasks.get_task``, ``claim_scheduled`` unless ``claimed``, ``get_task`` again."""
        with self.transaction() as tasks:
            found = tasks.get(key)
            if found is None:
                return None, None
            if claimed:
                ours = found.state == State.RUNNING
            else:
                ours = found.state == State.SCHEDULED and self._claim_scheduled(key, now, hostname)
            return found, (tasks[key] if ours else None)

    def beat(self, key: TaskKey, now: datetime) -> bool:
        """``classic_store.heartbeat_running``."""
        with self.transaction():
            return self._update(key, _still(State.RUNNING), updated_at=now)

    def hand_back(self, key: TaskKey, now: datetime) -> bool:
        """``classic_store.hand_back_running``: running → scheduled, try and start kept."""
        with self.transaction():
            return self._update(key, _still(State.RUNNING), state=State.SCHEDULED, hostname=None, updated_at=now)
