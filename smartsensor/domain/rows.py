"""The rows the storage seam hands out and takes, typed: a task instance whole (``TaskRow``), the few columns the
scheduler reads of a retry or of a dead run (``RetryRow``, ``ZombieRow``), an external key's mapping and its
states answer (``ExternalRow``, ``ExternalState``), and what the external door's store takes and answers
(``NewTry``, ``Superseded``, ``TryRegistration``). Named tuples, built straight from a result row (``_make``), read
by attribute; times aware UTC (``domain.clock``). Only attr_dict and exec_dict stay free-form: JSON text."""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from smartsensor.domain.keys import ExternalKey, TaskKey, VigilKey


class TaskRow(NamedTuple):
    """One task_instance row, its columns in the table's order (``select(TaskInstance)`` gives them so). The columns
    both doors' registration always writes (``service.task_rows.task_row``: state, classpath, attr_dict, exec_dict,
    hashcode, shardcode) are typed as written. A row of an older version or written by hand straight into the table
    may hold NULL there, read as None as before; the code that meets one handles it where it matters (the round's
    ``tasks._keep`` and ``memory._in_range``, ``timing.parse_exec``'s defaults for a NULL exec_dict)."""

    dag_id: str
    task_id: str
    execution_date: datetime
    state: str
    try_number: int
    max_tries: int
    start_date: datetime | None
    end_date: datetime | None
    updated_at: datetime | None
    operator: str | None
    classpath: str
    fileloc: str | None
    hostname: str | None
    error: str | None
    attr_dict: str
    exec_dict: str
    hashcode: int
    shardcode: int

    @property
    def key(self) -> TaskKey:
        return TaskKey(self.dag_id, self.task_id, self.execution_date)

    @property
    def vigil(self) -> VigilKey:
        """The vigil this task waits in: its hashcode, sensor class and canonical attr_dict."""
        return VigilKey(self.hashcode, self.classpath, self.attr_dict)

    def waits_as(self, other: TaskRow) -> bool:
        """Whether ``other`` is the same wait: the same vigil (class and canonical attr_dict) with the same exec
        fields (its timeout, its soft_fail…), so that this row's verdict answers it."""
        return self.vigil == other.vigil and self.exec_dict == other.exec_dict

    def columns(self) -> dict[str, Any]:
        """The row as the values of an INSERT or UPDATE, by column name."""
        return self._asdict()


class RetryRow(NamedTuple):
    """What the scheduler reads of an up_for_retry task to plan its next try (``scheduler_store.load_up_for_retry``)."""

    dag_id: str
    task_id: str
    execution_date: datetime
    end_date: datetime | None
    exec_dict: str
    classpath: str
    try_number: int

    @property
    def key(self) -> TaskKey:
        return TaskKey(self.dag_id, self.task_id, self.execution_date)


class ZombieRow(NamedTuple):
    """A `running` task whose classic run stopped heartbeating (``tasks.load_zombies``)."""

    dag_id: str
    task_id: str
    execution_date: datetime
    try_number: int
    exec_dict: str
    updated_at: datetime
    hostname: str | None

    @property
    def key(self) -> TaskKey:
        return TaskKey(self.dag_id, self.task_id, self.execution_date)


class ExternalRow(NamedTuple):
    """One external_task row: another scheduler's key, its try here, and that try's task instance (ti_*)."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int
    try_number: int
    logical_date: datetime | None
    ti_task_id: str
    ti_execution_date: datetime
    registered_at: datetime
    instance: str = ""

    @property
    def ti_key(self) -> TaskKey:
        """The task instance of the try registered (in the key's DAG)."""
        return TaskKey(self.dag_id, self.ti_task_id, self.ti_execution_date)


class ExternalState(NamedTuple):
    """A mapped key's states answer as read (``external.external_states``): the try registered, and its task
    instance's state, error and hashcode."""

    try_number: int
    state: str
    error: str | None
    hashcode: int


class Superseded(NamedTuple):
    """The errors a registration leaves on the task instance it supersedes while it waits."""

    newer_try: str  # a newer try of the key was registered
    other_check: str  # the same try was registered again with another check


class TryRegistration(NamedTuple):
    """What ``ExternalTryStore.register_try`` found: the try the key was at before (None: a new key), and that try's
    task instance when it is the try registered (then nothing was written)."""

    registered_try: int | None
    task: TaskRow | None


class NewTry(NamedTuple):
    """A try to register under a key that has no mapping yet: its task instance ``row``."""

    key: ExternalKey
    try_number: int
    row: TaskRow
    logical_date: datetime | None
