"""The doors' task instances: the standalone door's (``RegistrationStore``, ``SchedulerStore``, ``ClassicRunStore``)
and the external door's (``ExternalTryStore``)."""

from __future__ import annotations

from datetime import datetime
from typing import Callable, Iterable, Protocol, Sequence

from smartsensor.domain.keys import ExternalKey, TaskKey
from smartsensor.domain.rows import ExternalState, NewTry, RetryRow, Superseded, TaskRow, TryRegistration, ZombieRow

# A retry's next step, from its up_for_retry row: None (not due yet), (state, None) to queue its next try in that
# state, or (state, error) to end it so (a row that cannot be retried fails alone).
RetryPlan = Callable[[RetryRow], "tuple[str, str | None] | None"]
# How a dead run's try ends, from its row: (state, error).
DeadRunPlan = Callable[[ZombieRow], "tuple[str, str]"]
# The state a try whose `run-task` exited without ending it ends in, from its row.
ExitedRunPlan = Callable[[TaskRow], str]


class RegistrationStore(Protocol):
    """The task instances a standalone registration (``submit``) writes and reads, one execution date at a time."""

    def register_rows(
        self, rows: Sequence[TaskRow], execution_date: datetime, clear: bool
    ) -> dict[tuple[str, str], str]:
        """In one transaction: insert the rows that do not exist, overwrite the others with theirs when ``clear``,
        and wake the shard workers for the smart_pending rows written. {(dag_id, task_id): state} of the rows that
        existed, as they were. InsertConflict (nothing written) when another registration inserted some of them
        meanwhile."""
        ...

    def read_states(self, execution_date: datetime, dag_ids: Iterable[str]) -> dict[tuple[str, str], str]:
        """{(dag_id, task_id): state} of the task instances of ``dag_ids`` on ``execution_date``."""
        ...


class SchedulerStore(Protocol):
    """The task instances as the standalone scheduler moves them: retries queued again, dead classic runs ended,
    scheduled tries claimed for a `run-task` child, a child's try ended. Every change is guarded on the state (and
    try, claim or beat) read, so a user's change, a run's own end or another scheduler's claim wins."""

    def requeue_due_retries(self, now: datetime, plan: RetryPlan) -> list[tuple[str, bool]]:
        """In one transaction: every up_for_retry task as ``plan`` says: its next try queued (try_number + 1, a fresh
        start) or the task ended with the plan's error, each only if it is still up_for_retry in that try; the shard
        workers woken if a next try went smart_pending. (state, whether the row changed) per task planned."""
        ...

    def end_dead_runs(self, cutoff: datetime, now: datetime, plan: DeadRunPlan) -> list[tuple[TaskKey, str, str]]:
        """In one transaction: every `running` task whose run last beat before ``cutoff`` ended as ``plan`` says,
        unless it beat or changed since it was read. (key, state, error) of those ended."""
        ...

    def scheduled_keys(self, limit: int) -> list[TaskKey]:
        """Up to ``limit`` keys of `scheduled` tasks, oldest execution date first."""
        ...

    def claim_scheduled_try(self, key: TaskKey, now: datetime, claimant: str) -> int | None:
        """scheduled → running under ``claimant`` (its start kept when set); the try claimed, None if the task was
        not scheduled (another process got there first)."""
        ...

    def end_exited_try(
        self, key: TaskKey, try_number: int, claimant: str, now: datetime, error: str, state_for: ExitedRunPlan
    ) -> str | None:
        """If the task is still `running` in ``try_number`` under ``claimant``'s claim, end that try in the state
        ``state_for`` gives its row, with ``error``; the state it ended in, None when nothing ended."""
        ...

    def end_try(
        self, key: TaskKey, new_state: str, now: datetime, error: str | None = None, try_number: int | None = None
    ) -> bool:
        """running → ``new_state`` (in ``try_number`` when given); False if the task left `running` (or that try)."""
        ...


class ClassicRunStore(Protocol):
    """One task instance as its classic run (``run-task``) claims, keeps alive, ends or hands back. Every change is
    guarded on `running` (and the run's try), so a user's change or the scheduler's end of a dead run wins."""

    def claim_run(
        self, key: TaskKey, now: datetime, hostname: str, claimed: bool
    ) -> tuple[TaskRow | None, TaskRow | None]:
        """In one transaction: read the task and claim it (scheduled → running) unless the scheduler ``claimed`` it
        already (then it must be running). (the task as first read, None if there is none; the task as claimed, None
        when it was not this run's)."""
        ...

    def beat(self, key: TaskKey, now: datetime) -> bool:
        """The run is alive (``updated_at``); False once the task left `running`."""
        ...

    def hand_back(self, key: TaskKey, now: datetime) -> bool:
        """running → scheduled, try and start kept (a stop request); False if the task left `running`."""
        ...

    def read_task(self, key: TaskKey) -> TaskRow | None:
        """The task instance, None if there is none."""
        ...

    def end_try(
        self, key: TaskKey, new_state: str, now: datetime, error: str | None = None, try_number: int | None = None
    ) -> bool:
        """running → ``new_state`` (in ``try_number`` when given); False if the task left `running` (or that try)."""


class ExternalTryStore(Protocol):
    """The external door's tries: another scheduler's keys, each mapped to the task instance of the try registered
    last, and those task instances' states. Every change is guarded: a key moves only to a newer try (or the same
    try's new check) from the mapping read, and the task instance it supersedes is skipped only while it still
    waits, so an ended task is never resurrected or ended twice and a user's change wins. The SQL store
    (``adapters.sql.external.SqlExternalTryStore``) and the memory one (``adapters.memory_external``) are held to
    each other by tests/integration/test_external_store_parity.py."""

    def register_try(
        self, key: ExternalKey, try_number: int, row: TaskRow, logical_date: datetime | None, superseded: Superseded
    ) -> TryRegistration:
        """In one transaction: a try already registered with the same wait (``TaskRow.waits_as``), or an older try
        than the key's, writes nothing; a first or newer try, or the same try with another check, inserts ``row``
        (waking the shard workers for a smart_pending one) and maps the key to it, skipping the previous task
        instance while it still waits (with ``superseded``'s error for the case). InsertConflict (nothing written)
        when another registration inserted or moved the key meanwhile, or took ``row``'s key."""
        ...

    def register_new_tries(self, tries: Sequence[NewTry]) -> set[ExternalKey]:
        """In one transaction: the tries whose key has no mapping yet get their task instance and mapping; a key
        that has one is left to ``register_try``. The keys registered. InsertConflict (nothing written) when another
        registration inserted one of them meanwhile, or ``tries`` names a key (or a task instance) twice."""
        ...

    def read_states(self, keys: Sequence[ExternalKey]) -> dict[ExternalKey, ExternalState]:
        """{key: its mapping's try and its task instance's state, error, hashcode} for those of ``keys`` mapped to a
        task instance that exists."""
        ...
