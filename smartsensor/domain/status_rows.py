"""The rows the status side's ports hand out (``ports.StatusReads``, ``OverviewReads``, ``ExpiredRows``): what
`status`, the status page and retention read, typed, with no storage behind them. The SQL adapters build them
(``adapters.sql.status``, ``overview``, ``landings``, ``retention``); the service reads them by attribute."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, NamedTuple, Sequence

from smartsensor.domain.leases import LeaseRow
from smartsensor.domain.rows import ZombieRow

# (dag_id, task_id, execution_date, when it became due): the most overdue waiting task of a kind.
OverdueTask = tuple[str, str, datetime, datetime]
# (exec_dict, cutoff) pairs: the waiting tasks of that exec_dict that started at or before the cutoff are past it.
Cutoffs = list[tuple[str | None, datetime]]
# Given (exec_dict, earliest start) per exec_dict (``waiting_start_by_exec``): the cutoffs to count, and the
# (exec_dict, cutoff) whose oldest task to name, None when no exec_dict is past its cutoff (nothing more is sent).
PastLimits = Callable[[list[tuple[str | None, datetime]]], tuple[Cutoffs, "tuple[str | None, datetime] | None"]]


class StatusQuery(NamedTuple):
    """What `status`'s read is asked: the stuck-task cutoffs (``landed_before``, ``past_limits``), the shard ranges
    to count the waiting tasks of, when a classic run is a zombie, and the shardcodes' upper limit (a task at or past
    it, or below 0, is stranded)."""

    landed_before: datetime
    past_limits: PastLimits
    ranges: list[tuple[int, int]]
    zombie_cutoff: datetime
    shard_limit: int


class WaitingCounts(NamedTuple):
    """``waiting_by_range``'s figures: waiting smart tasks and their distinct hashcodes (NULL counts as one), in
    all and per range (``per_range[i]``: the i-th range given, a range without waiting tasks left out)."""

    tasks: int
    hashes: int
    per_range: dict[int, tuple[int, int]]


class StuckRows(NamedTuple):
    """What ``read_stuck`` read: ``waiting_after_landing``'s count and task; the count past their time limit
    (``count_started_before``) and ``oldest_started_before``'s task, (0, None) when none is past it."""

    after_landing: tuple[int, OverdueTask | None]
    past_time_limit: tuple[int, "tuple[str, str, datetime, datetime] | None"]


class StatusRows(NamedTuple):
    """What ``read_status`` read, each part named for the query that read it."""

    stuck: StuckRows
    count_by_state: dict[str, int]
    waiting_by_range: WaitingCounts
    worker_rounds: list[dict[str, Any]]
    load_leases: list[LeaseRow]
    list_workers: list[dict[str, Any]]
    load_zombies: list[ZombieRow]
    stranded_count: int


@dataclass(frozen=True)
class UnknownOutcome:
    """An undelivered row whose earlier post may have reached Airflow, not settled yet (Airflow did not answer the
    look-up): which landing, since when, and the last error (the look-up's, or the post's)."""

    id: int
    uri: str
    partition_name: str
    state: str
    unknown_since: datetime
    last_error: str | None


@dataclass(frozen=True)
class RejectedLanding:
    """An outbox row refused for good (Airflow's own 4xx, a key no mapper could read, a table no longer watched):
    which landing, and why."""

    id: int
    uri: str
    partition_name: str
    why: str | None


@dataclass(frozen=True)
class OutboxSummary:
    """What `status` shows of the outbox: rows by state, the oldest undelivered landing, the duplicates known
    (2xx answers past a row's first) and the attempts whose outcome was never known."""

    by_state: dict[str, int]
    oldest_undelivered: datetime | None
    duplicates: int
    unknown_outcomes: int
    watched_tables: int
    unresolved: int = 0  # undelivered rows whose outcome is unknown now (``unknown_since`` set)
    unresolved_rows: tuple[UnknownOutcome, ...] = ()  # the SHOWN_UNKNOWN longest unknown of them
    rejected_rows: tuple[RejectedLanding, ...] = ()  # the SHOWN_REJECTED latest rows refused for good, and why
    paused: tuple[tuple[str, str], ...] = ()  # (uri, its paused consumers) of the watched tables that have some
    orphaned: tuple[tuple[str, int], ...] = ()  # (uri, its undelivered rows) of watched tables no range serves


class OverviewRows(NamedTuple):
    """What ``read_overview`` read: ``history.load_samples``, ``waiting_checks`` and ``recent_landings``."""

    samples: list[tuple[datetime, str, int]]
    checks: list[tuple[str | None, str | None, int]]
    landings: list[dict[str, Any]]


# A retention window's key: a table's primary key values, in its columns' order.
Key = tuple[Any, ...]


@dataclass(frozen=True)
class Batch:
    """What one batch did: the rows it deleted (or, in a dry run, would delete) and the key the next window starts
    after (None: the pass is over)."""

    rows: int
    after: Key | None


def revision_problem(revision: str | None, known: Sequence[str]) -> str | None:
    """Why a database at schema ``revision`` cannot be used by a smartsensor whose migrations define ``known``
    (newest, its head, first), with which side to upgrade (a host upgraded before or after the database); None when
    it can."""
    if revision == known[0]:
        return None
    if revision is None:
        return "is not initialised: run `smartsensor db init`"
    if revision in known:
        return (
            f"is at schema revision {revision}, this smartsensor needs {known[0]}: "
            "run `smartsensor db init` to upgrade it"
        )
    return (
        f"is at schema revision {revision}, newer than this smartsensor knows ({known[0]}): "
        "upgrade smartsensor on this host"
    )
