"""The status side: what `status`, the status page, its history, retention and `airflow report` read and delete."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Protocol, Sequence

from smartsensor.domain.airflow_history import AirflowHistory
from smartsensor.domain.status_rows import (
    Batch,
    Key,
    OutboxSummary,
    OverviewRows,
    PastLimits,
    StatusQuery,
    StatusRows,
    StuckRows,
)


class StatusReads(Protocol):
    """What `status` reads (``service.status``), each call on one connection.
    ``adapters.sql.status_store.SqlStatusReads`` and ``adapters.memory_status.MemoryStatusReads``, held to each other
    by tests/integration/test_status_reads_parity.py."""

    def read_status(self, query: StatusQuery) -> StatusRows:
        """Everything `status` shows but the outbox: the stuck-task figures (``read_stuck``), tasks per state,
        waiting tasks per range, the range rounds, leases, workers, zombies and stranded tasks."""
        ...

    def read_stuck(self, landed_before: datetime, past_limits: PastLimits) -> StuckRows:
        """The waiting tasks whose check landed before ``landed_before``, and those past the cutoffs
        ``past_limits`` gives for the earliest start of each exec_dict."""
        ...

    def read_outbox_summary(self, shard_limit: int) -> OutboxSummary:
        """The landing publisher's outbox as `status` shows it (``shard_limit``: shardcodes at or past it, or below
        0, are served by no range)."""
        ...

    def schema_revision(self) -> str | None:
        """The schema revision the database is at (None: never initialised)."""
        ...

    def schema_problem(self, revision: str | None) -> str | None:
        """Why a database at ``revision`` cannot be used by this smartsensor; None when it can."""
        ...


class StateSamples(Protocol):
    """The samples of tasks by state over time, one per time bucket (``service.history``; ``state_sample``): the
    first server to write a bucket wins, the others find it taken. ``adapters.sql.status_store.SqlStateSamples``
    and ``adapters.memory_status.MemoryStateSamples``, held to each other by tests/integration/test_status_parity.py."""

    def write_sample(self, bucket_at: datetime) -> bool:
        """Count the tasks by state and keep that as the sample of ``bucket_at``, in one transaction; False when a
        sample of that bucket is there already (written by another server, even meanwhile)."""
        ...

    def delete_before(self, before: datetime) -> int:
        """Drop the samples of buckets before ``before``; how many rows went."""
        ...

    def samples_since(self, since: datetime) -> list[tuple[datetime, str, int]]:
        """(bucket_at, state, count) of every bucket from ``since`` on, oldest first, states in order."""
        ...


class OverviewReads(Protocol):
    """What the status page shows beside `status` (``service.overview``): one read."""

    def read_overview(self, since: datetime, landings: int) -> OverviewRows:
        """The samples from ``since`` on, the waiting tasks per distinct check and the ``landings`` last landings."""
        ...


class ExpiredRows(Protocol):
    """Retention's guarded deletes (``service.retention``), each batch in a transaction of its own; with
    ``dry_run`` a batch counts what it would delete. ``adapters.sql.status_store.SqlExpiredRows`` and
    ``adapters.memory_retention.MemoryExpiredRows``, held to each other by
    tests/integration/test_retention_parity.py."""

    def prune_keys_batch(self, after: Key | None, size: int, cutoff: datetime, dry_run: bool) -> Batch:
        """One window of ``size`` Airflow keys after ``after``: those registered before ``cutoff`` whose task
        instance ended before it or is gone."""
        ...

    def prune_tasks_batch(self, after: Key | None, size: int, cutoff: datetime, dry_run: bool) -> Batch:
        """One window of ``size`` task instances after ``after``: those that ended before ``cutoff``."""
        ...

    def prune_rounds(self, cutoff: datetime, size: int, dry_run: bool) -> int:
        """The last rounds of ranges nobody served since ``cutoff``, at most ``size``."""
        ...

    def prune_workers(self, cutoff: datetime, size: int, dry_run: bool) -> int:
        """Workers that last heartbeated before ``cutoff`` and own no lease, at most ``size``."""
        ...

    def watch_cutoff(self, now: datetime, age: timedelta) -> datetime | None:
        """``age`` before Airflow's newest listing of the watched tables (or ``now`` if earlier); None: none."""
        ...

    def read_unwatched(self, cutoff: datetime, after: str, size: int) -> list[str]:
        """Up to ``size`` uris after ``after`` of the tables not listed as watched since ``cutoff``."""
        ...

    def count_unwatched_landings(self, uris: Sequence[str]) -> int:
        """The settled outbox rows of ``uris``."""
        ...

    def forget_unwatched_batch(self, uri: str, cutoff: datetime, size: int) -> tuple[int, bool]:
        """Up to ``size`` settled rows of ``uri`` gone, and whether its watch went too."""
        ...

    def statements(self) -> int:
        """Statements sent so far (a pass's report counts them per table)."""
        ...


class AirflowSensorHistory(Protocol):
    """An Airflow installation's Hive sensor tries, read-only (``service.savings``: `airflow report`).
    ``adapters.sql.status_store.SqlAirflowHistory`` and ``adapters.memory_airflow_history.MemoryAirflowHistory``, held
    to each other by tests/integration/test_airflow_history_parity.py."""

    def read_history(self, since: datetime) -> AirflowHistory:
        """Every try of a Hive sensor task that started or ended at or after ``since``, with its pokes, the rendered
        fields and the sensors' serialized settings."""
        ...
