"""The status side's ports over one engine (``ports.StatusReads``, ``StateSamples``, ``OverviewReads``,
``ExpiredRows``; ``AirflowSensorHistory`` on Airflow's database): the operations of ``status``, ``landings``,
``history``, ``overview``, ``retention`` and ``airflow_history``, as
they were, with SQLAlchemy's errors raised as ``ports.StoreUnavailable`` (the original its ``__cause__``, its
message the same), so that nothing above the adapters names them. ``roots.serve`` and the CLI build these."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Sequence

from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError

from smartsensor.adapters.sql import (
    airflow_history as airflow_sql,
    history as history_sql,
    landings as landing_sql,
    overview as overview_sql,
    retention as retention_sql,
    status as status_sql,
)
from smartsensor.adapters.sql.engine import current_revision, schema_problem, statement_count
from smartsensor.adapters.sql.store_errors import any_error_unavailable
from smartsensor.domain import status_rows as rows
from smartsensor.domain.airflow_history import AirflowHistory
from smartsensor.ports import StoreUnavailable


class SqlStatusReads:
    """``ports.StatusReads`` on ``engine``: ``status.read_status``/``read_stuck``, ``landings.read_outbox_summary``
    and the schema revision."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def read_status(self, query: rows.StatusQuery) -> rows.StatusRows:
        """``status.read_status`` (9 statements, 11 when a task waits past its time limit)."""
        with any_error_unavailable():
            return status_sql.read_status(self.engine, *query)

    def read_stuck(self, landed_before: datetime, past_limits: rows.PastLimits) -> rows.StuckRows:
        """``status.read_stuck`` (2 statements, or 4)."""
        with any_error_unavailable():
            return status_sql.read_stuck(self.engine, landed_before, past_limits)

    def read_outbox_summary(self, shard_limit: int) -> rows.OutboxSummary:
        """``landings.read_outbox_summary`` (9 statements)."""
        with any_error_unavailable():
            return landing_sql.read_outbox_summary(self.engine, shard_limit)

    def schema_revision(self) -> str | None:
        """``engine.current_revision``."""
        with any_error_unavailable():
            return current_revision(self.engine)

    def schema_problem(self, revision: str | None) -> str | None:
        """``engine.schema_problem``: against this smartsensor's migrations."""
        return schema_problem(revision)


class SqlStateSamples:
    """``ports.StateSamples`` on ``engine``'s ``state_sample`` table."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def write_sample(self, bucket_at: datetime) -> bool:
        """``history.write_sample``; False too when another server wrote the bucket between its read and its
        insert (the primary key refused ours)."""
        try:
            with any_error_unavailable():
                return history_sql.write_sample(self.engine, bucket_at)
        except StoreUnavailable as exc:
            if isinstance(exc.__cause__, IntegrityError):
                return False
            raise

    def delete_before(self, before: datetime) -> int:
        """``history.delete_samples_before`` (1 statement)."""
        with any_error_unavailable():
            return history_sql.delete_samples_before(self.engine, before)

    def samples_since(self, since: datetime) -> list[tuple[datetime, str, int]]:
        """``history.load_samples`` on a connection of its own (1 statement)."""
        with any_error_unavailable(), self.engine.connect() as conn:
            return history_sql.load_samples(conn, since)


class SqlOverviewReads:
    """``ports.OverviewReads`` on ``engine``."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def read_overview(self, since: datetime, landings: int) -> rows.OverviewRows:
        """``overview.read_overview`` (3 statements on one connection)."""
        with any_error_unavailable():
            return overview_sql.read_overview(self.engine, since, landings)


class SqlExpiredRows:
    """``ports.ExpiredRows`` on ``engine``: ``adapters.sql.retention``'s operations."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def prune_keys_batch(self, after: rows.Key | None, size: int, cutoff: datetime, dry_run: bool) -> rows.Batch:
        """``retention.prune_keys_batch`` (2 statements)."""
        with any_error_unavailable():
            return retention_sql.prune_keys_batch(self.engine, after, size, cutoff, dry_run)

    def prune_tasks_batch(self, after: rows.Key | None, size: int, cutoff: datetime, dry_run: bool) -> rows.Batch:
        """``retention.prune_tasks_batch`` (2 statements)."""
        with any_error_unavailable():
            return retention_sql.prune_tasks_batch(self.engine, after, size, cutoff, dry_run)

    def prune_rounds(self, cutoff: datetime, size: int, dry_run: bool) -> int:
        """``retention.prune_rounds`` (1 statement)."""
        with any_error_unavailable():
            return retention_sql.prune_rounds(self.engine, cutoff, size, dry_run)

    def prune_workers(self, cutoff: datetime, size: int, dry_run: bool) -> int:
        """``retention.prune_workers`` (1 statement)."""
        with any_error_unavailable():
            return retention_sql.prune_workers(self.engine, cutoff, size, dry_run)

    def watch_cutoff(self, now: datetime, age: timedelta) -> datetime | None:
        """``retention.watch_cutoff`` (1 statement)."""
        with any_error_unavailable():
            return retention_sql.watch_cutoff(self.engine, now, age)

    def read_unwatched(self, cutoff: datetime, after: str, size: int) -> list[str]:
        """``retention.read_unwatched`` (1 statement)."""
        with any_error_unavailable():
            return retention_sql.read_unwatched(self.engine, cutoff, after, size)

    def count_unwatched_landings(self, uris: Sequence[str]) -> int:
        """``retention.count_unwatched_landings`` (1 statement)."""
        with any_error_unavailable():
            return retention_sql.count_unwatched_landings(self.engine, uris)

    def forget_unwatched_batch(self, uri: str, cutoff: datetime, size: int) -> tuple[int, bool]:
        """``retention.forget_unwatched_batch``."""
        with any_error_unavailable():
            return retention_sql.forget_unwatched_batch(self.engine, uri, cutoff, size)

    def statements(self) -> int:
        """``engine.statement_count``."""
        return statement_count(self.engine)


class SqlAirflowHistory:
    """``ports.AirflowSensorHistory`` on an Airflow metadata database's engine (``airflow_history.open_airflow_db``);
    a database that is not Airflow's still raises ``airflow_history.AirflowDbError``."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def read_history(self, since: datetime) -> AirflowHistory:
        """``airflow_history.read_history``."""
        with any_error_unavailable():
            return airflow_sql.read_history(self.engine, since)
