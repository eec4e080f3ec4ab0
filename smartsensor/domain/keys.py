"""The keys and records the layers pass each other: a task, one vigil and its cohorts, a lease fence."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple


class TaskKey(NamedTuple):
    """A task instance, by its primary key. A named tuple: it is still the plain tuple (dag_id, task_id,
    execution_date) that SQL parameters, sorting and comparison see."""

    dag_id: str
    task_id: str
    execution_date: datetime


class VigilKey(NamedTuple):
    """One vigil: the tasks waiting on one distinct check, keyed by the hash of what is checked, the sensor's class
    and its canonical attributes (a hash may collide; the three together never do). A named tuple: the index hashes,
    sorts and compares millions of them."""

    hashcode: int
    classpath: str
    attr_dict: str


class Cohort(NamedTuple):
    """The tasks of one vigil that share their exec settings and their try (its number and its start): they are
    due, time out and retry together, so a shard worker keeps a count of them instead of a row per task. Tasks
    started by the same round share a start, so a vigil has as many cohorts as distinct settings and starts."""

    exec_dict: str
    start_date: datetime
    try_number: int


CohortRows = list[tuple[VigilKey, Cohort, int]]  # (vigil, cohort, how many tasks): waiting tasks, aggregated


@dataclass(frozen=True)
class Fence:
    """A lease a worker writes under: its writes apply only while it still owns this epoch."""

    shard_min: int
    owner: str
    epoch: int


class ExternalKey(NamedTuple):
    """A task of another scheduler: Airflow's (dag_id, task_id, run_id, map_index; -1 when not mapped), in the
    deployment its connection names (``instance``; "" when it names none). A named tuple: the states path hashes
    and compares thousands of them per request."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int = -1
    instance: str = ""
