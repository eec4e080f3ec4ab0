"""Ports: what the service needs from the outside, as Protocols. Adapters implement them.

- ``RoundStore``: the metadata database as a shard round sees it. ``adapters.sql.round_store`` is
  the real one (SQLite or PostgreSQL); ``adapters.memory`` keeps the same rules in dicts, so the
  round's logic is unit-tested without a database.
- ``LeaseStore``: the shard_lease and worker rows the lease manager claims, renews and releases, one
  transaction at a time (``LeaseOps``). ``adapters.sql.lease_store`` and ``adapters.memory`` again.
- ``CheckAnswerer``: answers batched partition/path checks (one catalog call per table).
  ``smartsensor.adapters.catalog.batch.BatchChecker`` answers them through Spark or the metastore's thrift
  API (``[smart_sensor] catalog_backend``); a unit test answers them from a dict.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Iterable, Protocol, Sequence

from smartsensor.domain.keys import CohortRows, ExternalKey, Fence, TaskKey
from smartsensor.domain.landings import ClaimedLanding, EventLookup, HiveAsset, PostOutcome, WatchRow
from smartsensor.domain.leases import LeaseRow
from smartsensor.domain.rows import ExternalState, NewTry, RetryRow, Superseded, TaskRow, TryRegistration, ZombieRow
from smartsensor.domain.transitions import RoundWrites
from smartsensor.hive_filter.names import TableName
from smartsensor.sensors.checks import Check, PartitionCheck
from smartsensor.sensors.errors import CheckError


class RoundStore(Protocol):
    """Reads and guarded writes of one shard range's round. Every write is idempotent and, with a
    ``fence``, applies only while that lease epoch is still held at the time of the write."""

    def load_cohorts(
        self, shard_min: int, shard_max: int, now: datetime, hostname: str, fence: Fence | None
    ) -> tuple[CohortRows, int]:
        """Start the pending tasks of the range, give a start to started ones that have none, then return every
        waiting one counted per (check, cohort), and how many were started: what an incremental worker rebuilds
        its index from (first round, takeover, every index_rebuild_interval)."""
        ...

    def start_new(
        self, shard_min: int, shard_max: int, now: datetime, hostname: str, fence: Fence | None
    ) -> CohortRows:
        """Start the range's pending tasks (those that arrived since the last call) and return them per
        (check, cohort): an incremental round's change feed. Nothing under a fence no longer held."""
        ...

    def changed_since(self, shard_min: int, shard_max: int, since: datetime, starter: str) -> CohortRows:
        """The started (smart_running) tasks of the range whose row changed at or after ``since``, per (check,
        cohort), except those ``starter`` started and nobody changed since (its own feed already counted them):
        what a reconciliation compares with the index. Read-only."""
        ...

    def oldest_open_write(self) -> datetime | None:
        """When the oldest transaction another session holds open on the database began (aware UTC, the clock
        ``updated_at`` is stamped in), or None when none is open or the store cannot tell: a row such a
        transaction stamps commits later, with a time at or after that. Read-only."""
        ...

    def write_round(
        self, shard_min: int, shard_max: int, writes: RoundWrites, now: datetime, fence: Fence | None
    ) -> dict[str, int]:
        """Apply a round's state changes in one transaction; returns how many tasks went to each state."""
        ...

    def holds(self, fence: Fence, now: datetime) -> bool:
        """True while the lease of ``fence`` is held by its owner under its epoch."""
        ...

    def record_round(
        self,
        range_rounds_id: str,
        hostname: str,
        pid: int,
        shard_min: int,
        shard_max: int,
        now: datetime,
        seconds: float,
        summary_json: str,
    ) -> None:
        """Keep this range rounds' last round for `smartsensor status`, under its ``range_rounds_id``."""
        ...

    def forget_range_rounds(self, range_rounds_id: str) -> None:
        """Remove a range rounds' round row (clean stop)."""
        ...

    def statements(self) -> int:
        """Statements sent to the store so far: a counter that never wobbles, read before and after a round for its
        ``db_statements``."""
        ...

    def write_concurrency(self) -> int:
        """How many ranges' ``write_round`` may run at once (1 where writers serialise anyway, as on SQLite)."""
        ...


class LeaseOps(Protocol):
    """Lease and worker-row operations inside one transaction. Claims and reshapes are compare-and-set
    on the epoch read; a lease that lapsed is never renewed, only re-claimed (which bumps its epoch)."""

    def upsert_worker(self, worker_id: str, hostname: str, pid: int, started_at: datetime, now: datetime) -> None:
        """Record this worker's heartbeat."""
        ...

    def delete_worker(self, worker_id: str) -> None: ...

    def live_workers(self, since: datetime) -> int:
        """Workers that heartbeated after ``since``."""
        ...

    def load_leases(self) -> list[LeaseRow]:
        """Every lease row in range order."""
        ...

    def ensure_leases(self, ranges: Sequence[Any]) -> None:
        """A free row for every configured range (``.lo``/``.hi``) that has none."""
        ...

    def renew_leases(self, owner: str, now: datetime, expires_at: datetime) -> int:
        """Extend what ``owner`` still holds unexpired."""
        ...

    def reshape_lease(self, shard_min: int, seen_epoch: int, shard_max: int | None, now: datetime) -> bool:
        """Fit a free or expired row to a new upper bound (epoch bumped), or delete it (``shard_max`` None)."""
        ...

    def claim_lease(self, shard_min: int, seen_epoch: int, owner: str, now: datetime, expires_at: datetime) -> bool:
        """Take a free or expired range if its epoch is still ``seen_epoch``; the epoch goes up by one."""
        ...

    def release_lease(self, shard_min: int, owner: str, epoch: int) -> bool: ...

    def release_all_leases(self, owner: str) -> int: ...


class LeaseStore(Protocol):
    """Where leases live."""

    def transaction(self) -> AbstractContextManager[LeaseOps]:
        """Operations that commit together when the block ends, and not at all if it raises."""
        ...


class CheckAnswerer(Protocol):
    """Answers checks in batches and counts what that cost."""

    catalog_calls: int
    schema_calls: int
    fs_calls: int
    catalog_seconds: float

    @property
    def spark(self) -> Any:
        """Handed to user sensors' poke(context) as context["spark"]; None without Spark."""
        ...

    def check_all(self, checks: Iterable[Check]) -> dict[Check, bool | CheckError]:
        """Each distinct check's answer: True (landed), False (not yet) or the error it raised."""
        ...


class PartitionTypeCache(Protocol):
    """A catalog backend's partition column types, cached per process
    (``adapters.catalog.partition_types.PartitionTypes``)."""

    def cached(self, db: str, table: str) -> dict[str, str] | None:
        """The table's partition column types if known and fresh, else None (no catalog call)."""
        ...

    def fetch(self, db: str, table: str) -> dict[str, str] | None:
        """One catalog call: {lower-cased partition column: type}, or None if the table is missing."""
        ...

    def forget(self, db: str, table: str) -> None:
        """Drop a table's cached types (it went missing, or its listing was rejected)."""
        ...

    def normalize(
        self, db: str, table: str, types: dict[str, str], specs: list[tuple[tuple[str, str], ...]]
    ) -> Sequence[tuple[tuple[str, str], ...] | CheckError]:
        """Each spec with its values cast as the catalog stores them, or the error naming a value its column
        rejects."""
        ...

    def prepared(self, db: str, table: str) -> dict[Any, Any]:
        """The table's memo of checks made ready for a listing under its cached types (dropped with them)."""
        ...


class PartitionLister(Protocol):
    """One catalog backend's partition listing (Spark's external catalog, or the metastore's thrift API):
    what ``adapters.catalog.batch.BatchChecker`` lists through."""

    @property
    def types(self) -> PartitionTypeCache:
        """The backend's cache of partition column types."""
        ...

    def list_rows(self, db: str, table: str, spec: dict[str, str], columns: dict[str, str]) -> list[str] | None:
        """Escaped partition names (``ds=a%2Fb/hr=00``) of db.table, at least those matching ``spec`` (whose
        keys are all among ``columns``, the table's partition column types); None if the table or database
        is missing. Raises Transient/PermanentCheckError."""
        ...


@dataclass(frozen=True)
class ListingRequest:
    """One table's part of a round's listing: its partition column types (in partition order), its checks with
    values as the catalog stores them, and ``narrowing``, the plain values common to all of them (a listing may
    be narrowed by them)."""

    db: str
    table: str
    columns: dict[str, str]
    checks: tuple[PartitionCheck, ...]
    narrowing: dict[str, str]

    @property
    def table_name(self) -> TableName:
        """The table this request lists: what a listing's answer is keyed by."""
        return TableName(self.db, self.table)


@dataclass(frozen=True)
class AnsweredListing:
    """A table's listing from a backend that decides some of the request's checks itself (the metastore-database
    backend following its feed knows which exact names are present): their ``answers``, and the escaped partition
    ``names`` the other checks are answered from (at least those they match)."""

    answers: dict[PartitionCheck, bool]
    names: list[str]


class BatchLister(PartitionLister, Protocol):
    """A backend that lists many tables in one go (several connections at once, or one statement)."""

    def fetch_types(
        self, tables: Sequence[TableName]
    ) -> tuple[dict[TableName, dict[str, str] | None | CheckError], int]:
        """The partition column types of ``tables`` (None: missing; a CheckError: could not be read), also put
        into ``types``' cache; and the catalog calls made."""
        ...

    def list_tables(
        self, requests: Sequence[ListingRequest]
    ) -> tuple[dict[TableName, list[str] | AnsweredListing | None | CheckError], int]:
        """For each request's table: escaped partition names, at least those its checks match, or an
        AnsweredListing (None: the table or its database is missing; a CheckError: that table could not be
        listed). Also the catalog calls made."""
        ...


class OutboxStore(Protocol):
    """The landing publisher's records (ARCHITECTURE.md, "Schedule on landings"): the tables watched and the
    outbox of landed partitions. Every change of a row is guarded: a claim takes only due rows nobody holds, a claim's
    end only a row its token still holds, a late 2xx settles a row whoever holds it. ``Ranges``: shard ranges
    ``[lo, hi)``. The SQL store (``adapters.sql.landings.SqlOutboxStore``) and the memory one
    (``adapters.memory_outbox.MemoryOutboxStore``) are held to each other by tests/integration/test_outbox_parity.py."""

    def record_watches(self, rows: list[dict[str, Any]], now: datetime) -> int:
        """Watch the tables of ``rows`` (uri, asset_id, db_name, table_name, shardcode, watched_since, seen_at),
        refreshing those watched already; how many are new."""
        ...

    def read_watches(self, ranges: Sequence[tuple[int, int]], seen_since: datetime) -> list[WatchRow]:
        """The watches of ``ranges`` Airflow listed at or after ``seen_since``, by uri."""
        ...

    def newest_watch_seen(self) -> datetime | None:
        """When Airflow last listed any watched table (None: nothing watched)."""
        ...

    def read_outbox_names(self, uri: str) -> dict[str, int | None]:
        """Each partition name of ``uri`` in the outbox, with the metastore's id of its latest landing (or None)."""
        ...

    def enqueue_landings(
        self,
        watch: WatchRow,
        landings: Iterable[tuple[str, str, int | None]],
        listed: Callable[[], Iterable[tuple[str, str, int | None]]],
        now: datetime,
        publish_existing: bool,
    ) -> tuple[str, int]:
        """Enqueue ``landings`` (name, key, id) while the table's baseline holds, or take the baseline
        (``listed()``); the state used and the rows that went in."""
        ...

    def enqueue_recreated(
        self, watch: WatchRow, listed: dict[str, tuple[str, int]], now: datetime
    ) -> tuple[int, dict[str, int | None]]:
        """The next generation of each listed partition whose id grew (dropped and added again); the rows that went
        in, and each name's id on record now."""
        ...

    def forget_dropped(self, uri: str, names: Sequence[str], cutoff: datetime) -> list[str]:
        """Delete the settled rows of ``uri`` among ``names`` older than ``cutoff``; the names deleted."""
        ...

    def claim_landings(
        self,
        ranges: Sequence[tuple[int, int]],
        owner: str,
        token: str,
        now: datetime,
        until: datetime,
        limit: int,
    ) -> list[ClaimedLanding]:
        """Claim up to ``limit`` due rows of ``ranges`` under ``token`` until ``until``, the oldest first."""
        ...

    def release_unposted(self, row_ids: list[int], token: str, now: datetime) -> int:
        """Hand rows ``token`` holds back unposted; how many."""
        ...

    def holds(self, row_id: int, token: str, until: datetime) -> bool:
        """Whether ``token`` still holds the row until at least ``until``."""
        ...

    def end_delivered(self, row_id: int, token: str, now: datetime, event_id: int | None) -> bool:
        """Airflow took the row's event (counted whoever holds it); whether the claim held."""
        ...

    def end_found(self, row_id: int, token: str, now: datetime, event_id: int) -> bool:
        """Airflow was found to hold the row's event; whether the claim held."""
        ...

    def end_unanswered(self, row_id: int, token: str, now: datetime, next_attempt_at: datetime, error: str) -> bool:
        """Airflow could not say whether it holds the event: pending again, still unknown; whether the claim held."""
        ...

    def end_failed(
        self, row_id: int, token: str, now: datetime, next_attempt_at: datetime, error: str, unknown: bool
    ) -> bool:
        """The post failed (``unknown``: it may have reached Airflow): pending again; whether the claim held."""
        ...

    def end_rejected(self, row_id: int, token: str, now: datetime, error: str) -> bool:
        """Airflow can never take the event: rejected; whether the claim held."""
        ...


class TableListings(Protocol):
    """Every partition name of the tables a landing publisher watches, through the worker's catalog backend: by
    listing each table every time, or, where the backend follows the metastore's change record
    (``follows_changes``), only the tables whose partitions changed."""

    follows_changes: bool

    def listings(self, tables: Sequence[TableName]) -> tuple[dict[TableName, list[str] | None | CheckError], int]:
        """The escaped partition names (None: the table is missing; a CheckError: it could not be listed) of those
        of ``tables`` whose partitions may have changed since a call last returned them (all of them, from a
        backend that lists), and the catalog calls made. A table left out has the names it had."""
        ...

    def relist(self) -> None:
        """The next call returns every table asked about (the caller lost what it read)."""
        ...

    def partition_ids(self, db: str, table: str) -> dict[str, int] | None:
        """The metastore's id of each partition name of db.table as the last call returned it (a partition dropped
        and added again has another), or None when this backend cannot tell."""
        ...


class AssetEvents(Protocol):
    """Airflow's side of the landing publisher: the watched assets, and one event per landed partition."""

    def consumed_hive_assets(self, uri_prefix: str) -> list[HiveAsset]:
        """The ``hive://`` assets under ``uri_prefix`` that at least one DAG is scheduled on. Raises on failure."""
        ...

    def post_event(self, asset_id: int, partition_key: str, extra: dict[str, Any]) -> PostOutcome:
        """Post one asset event; what it came to (never raises for a failure of Airflow or of the way to it)."""
        ...

    def find_events(self, asset_id: int, since: datetime, marks: dict[str, Any]) -> EventLookup:
        """The events of ``asset_id`` taken at or after ``since`` whose ``extra`` holds every item of ``marks``, or
        that Airflow could not tell (bounded in time and pages; never raises for a failure of Airflow or of the way
        to it)."""
        ...


class Notifications(Protocol):
    """A process's notifications from the database, by channel (``adapters.sql.notifications.NotificationHub``):
    hints that something changed, each read from the database again before anything acts on it."""

    def subscribe(
        self, channel: str, deliver: Callable[[list[str]], None], on_outage: Callable[[], None] | None = None
    ) -> None:
        """Deliver ``channel``'s payloads to ``deliver``; ``on_outage`` hears that the database is away. Before
        ``start``."""
        ...

    def start(self, timeout: float = 30.0) -> bool:
        """Start delivering; True once listening (every notification from then on is delivered), False when the
        first attempt failed or ``timeout`` passed (it goes on trying)."""
        ...


class LandingSignals(Protocol):
    """The landing signals pipelines send ("this partition landed"), kept an hour for whoever listens late."""

    def record(self, canonical_name: str, now: datetime) -> None:
        """Record a signal; its notification is delivered once it is stored."""
        ...

    def delete_before(self, cutoff: datetime) -> int:
        """Drop the signals recorded before ``cutoff``; how many went."""
        ...


class StoreError(Exception):
    """An outcome of a store operation its caller decides on, raised by the adapter in place of its own error (the
    ``__cause__``): a database library's exception types never reach the doors or the service."""


class StoreUnavailable(StoreError):
    """The store could not be reached or lost the connection (the database down or restarting): nothing was
    written, or a write's outcome is not known; the operation may be tried again. ``str()`` is the adapter's message,
    ``reason`` the driver's own words."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = message if reason is None else reason


class InsertConflict(StoreError):
    """Another writer inserted some of the rows meanwhile (a unique key): nothing was written; they exist now."""


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
        ...


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
