"""What `smartsensor status` reports, typed: ``service.status.collect_status`` builds a ``StatusReport``; the status
API, `status --json`, ``/metrics``, the status page and `status`'s text read its attributes. ``StatusReport.as_json``
is the one conversion to the JSON the API serves (``GET /api/v1/status``): every field under its own name, in field
order, datetimes as ISO 8601 strings, tuples as lists; a dataclass's ``JSON_ALIASES`` (deprecated old names) follow
its fields."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass
from datetime import datetime
from typing import Any, ClassVar, Mapping

from smartsensor.domain.clock import iso


@dataclass(frozen=True)
class LeaseStatus:
    """A shard_lease row as `status` shows it: ``expires_in`` seconds from now (negative: lapsed), ``expired``
    when it has an owner that no longer holds it (``domain.leases.LeaseRow.held``)."""

    shard_min: int
    shard_max: int
    owner: str | None
    epoch: int
    expires_at: datetime | None
    expires_in: float | None
    expired: bool


@dataclass(frozen=True)
class LiveWorker:
    """A leased worker process's row: its heartbeat's age, ``stale`` past the lease timeout, the ranges it owns."""

    worker_id: str
    hostname: str | None
    pid: int | None
    heartbeat_age: float | None
    stale: bool
    ranges: tuple[int, ...]


@dataclass(frozen=True)
class ShardRow:
    """A configured shard range [min, max): its waiting tasks and their distinct checks."""

    min: int
    max: int
    waiting: int
    distinct_hashes: int


@dataclass(frozen=True)
class WorkerRoundRow:
    """A range rounds' last round (worker_round): ``range_rounds_id`` (``"{worker}:{shard_min}-{shard_max}"``), when,
    how long it took, and its summary as the worker wrote it (``service.round.report``'s JSON: loaded, marked, error,
    module_errors, fenced_out…). The JSON also carries it as ``worker_id``, deprecated (its name until 0.3.0)."""

    JSON_ALIASES: ClassVar[Mapping[str, str]] = {"worker_id": "range_rounds_id"}

    range_rounds_id: str
    pid: int | None
    shard_min: int
    shard_max: int
    last_round_at: datetime | None
    age_seconds: float | None
    last_round_seconds: float | None
    last_round: Mapping[str, Any]


@dataclass(frozen=True)
class StuckTask:
    """A stuck kind's most overdue task: its key, and seconds past its due time plus the convergence bound."""

    dag_id: str
    task_id: str
    execution_date: datetime
    late_seconds: float


@dataclass(frozen=True)
class StuckCount:
    """How many tasks are stuck in one way, and the most overdue of them."""

    count: int
    oldest: StuckTask | None


@dataclass(frozen=True)
class Stuck:
    """``service.status.collect_stuck``: smart tasks still waiting ``bound_seconds`` after a worker should have
    ended them, by kind."""

    bound_seconds: float
    after_landing: StuckCount
    past_time_limit: StuckCount

    def kinds(self) -> list[tuple[str, StuckCount]]:
        """(kind, count) in report order; the kind is the JSON key and the metrics' label."""
        return [("after_landing", self.after_landing), ("past_time_limit", self.past_time_limit)]


@dataclass(frozen=True)
class Zombie:
    """A classic run that stopped heartbeating (the scheduler ends it)."""

    dag_id: str
    task_id: str
    execution_date: datetime
    hostname: str | None
    heartbeat_age: float


@dataclass(frozen=True)
class UnknownLanding:
    """A landing whose earlier post may have reached Airflow, not posted again until Airflow says whether it holds
    its event: its outbox row (``landing_id``, the ``smartsensor_landing_id`` of its event's ``extra``), table and
    partition, since when (``unknown_for`` seconds), the last error, and whether that is past ``[landings]
    unknown_outcome_patience`` (``unknowable``: it still waits)."""

    landing_id: int
    table: str
    partition: str
    unknown_since: datetime
    unknown_for: float
    last_error: str | None
    unknowable: bool


@dataclass(frozen=True)
class RefusedLanding:
    """A landing refused for good (``rejected``): never posted again; why."""

    landing_id: int
    table: str
    partition: str
    why: str | None


@dataclass(frozen=True)
class LandingsStatus:
    """The landing publisher's outbox (``[landings] publish``): the tables watched, its rows by state, the
    ``backlog`` (pending + sending) and its oldest landing (``oldest_age`` seconds ago), the ``duplicates`` known
    (2xx answers past a row's first), the attempts whose outcome was not known when they ended (each since looked
    up in Airflow before the row was posted again), and the landings whose outcome is still unknown (Airflow has
    not answered the look-up yet), by name."""

    watched_tables: int
    by_state: Mapping[str, int]
    backlog: int
    oldest_undelivered: datetime | None
    oldest_age: float | None
    duplicates: int
    unknown_outcomes: int
    unresolved: int = 0  # landings of unknown outcome now, waiting for Airflow's answer
    unresolved_landings: tuple[UnknownLanding, ...] = ()  # the longest unknown of them, by name
    rejected_landings: tuple[RefusedLanding, ...] = ()  # the latest refused for good, by name, with why
    paused_consumers: Mapping[str, str] = field(default_factory=dict)  # db.table → its consumers Airflow paused
    orphaned_tables: Mapping[str, int] = field(default_factory=dict)  # db.table no range serves → rows waiting


@dataclass(frozen=True)
class StatusReport:
    """Everything `status` shows. ``tasks_by_state`` is sorted by state; ``dedup_ratio`` is waiting tasks per
    distinct check (None: nothing waits); ``stranded`` counts waiting tasks whose shardcode no range serves;
    ``problems`` are the WARNING lines."""

    leases: tuple[LeaseStatus, ...]
    lease_workers: tuple[LiveWorker, ...]
    tasks_by_state: Mapping[str, int]
    waiting: int
    distinct_hashes: int
    dedup_ratio: float | None
    shards: tuple[ShardRow, ...]
    workers: tuple[WorkerRoundRow, ...]
    stranded: int
    problems: tuple[str, ...]
    stuck: Stuck
    zombies: tuple[Zombie, ...]
    landings: LandingsStatus | None = None  # None: [landings] publish is off

    def as_json(self) -> dict[str, Any]:
        """The JSON object of ``GET /api/v1/status`` and `status --json`."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}


def _plain(value: Any) -> Any:
    """``value`` as JSON data: a dataclass as an object of its fields, a tuple or list as a list, a mapping as an
    object, a datetime as its ISO 8601 string (naive UTC, ``clock.iso``); anything else as it is."""
    if is_dataclass(value) and not isinstance(value, type):
        out = {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
        out.update({old: out[new] for old, new in getattr(value, "JSON_ALIASES", {}).items()})
        return out
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, datetime):
        return iso(value)
    return value
