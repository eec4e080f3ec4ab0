"""The keys and records the layers pass each other: a task, one try of it, one distinct check, a lease fence."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

TaskKey = tuple[str, str, datetime]
TryKey = tuple[str, str, datetime, int, datetime]  # a task key plus the try it is in: try_number, start_date


class WaitingTask(NamedTuple):
    """A task instance a shard worker is responsible for, as loaded at the start of a round. A named tuple,
    not a frozen dataclass: a round builds one per waiting task (a million on W3), ~5x cheaper this way."""

    dag_id: str
    task_id: str
    execution_date: datetime
    state: str
    try_number: int
    max_tries: int
    start_date: datetime | None
    classpath: str
    attr_dict: str
    exec_dict: str
    hashcode: int
    shardcode: int

    @property
    def key(self) -> TaskKey:
        return (self.dag_id, self.task_id, self.execution_date)

    @property
    def try_key(self) -> TryKey:
        """The key of this try: a later try or a reset (new start_date) has another one."""
        assert self.start_date is not None
        return (self.dag_id, self.task_id, self.execution_date, self.try_number, self.start_date)


CheckKey = tuple[int, str, str]  # (hashcode, classpath, attr_dict): one distinct check


class Cohort(NamedTuple):
    """The tasks of one check that share their exec settings and their try (its number and its start): they are
    due, time out and retry together, so a shard worker keeps a count of them instead of a row per task. Tasks
    started by the same round share a start, so a check has as many cohorts as distinct settings and starts."""

    exec_dict: str
    start_date: datetime
    try_number: int


CohortRows = list[tuple[CheckKey, Cohort, int]]  # (check, cohort, how many tasks): waiting tasks, aggregated


@dataclass(frozen=True)
class Fence:
    """A lease a worker writes under: its writes apply only while it still owns this epoch."""

    shard_min: int
    owner: str
    epoch: int


class ExternalKey(NamedTuple):
    """A task of another scheduler: Airflow's (dag_id, task_id, run_id, map_index; -1 when not mapped). A named
    tuple: the states path hashes and compares thousands of them per request."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int = -1
