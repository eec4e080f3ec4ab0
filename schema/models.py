"""The tables of the metadata database, as SQLAlchemy Core ``Table`` objects on one ``MetaData``. Alembic migrations
in schema/migrations match them (``tests/integration/test_schema.py``).

Core, not ORM declarative classes: nothing here maps rows to objects (the adapters build Core statements on the
tables), and ``sqlalchemy.orm`` with the classes it builds cost every process (CLI calls, workers, serve) about 0.2 s
of CPU at startup (``tests/unit/test_startup_imports.py`` keeps it out of ``smartsensor.cli``'s imports)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Dialect,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    text,
)
from sqlalchemy.types import TypeDecorator

from smartsensor.domain.clock import as_utc, naive_utc


class UtcDateTime(TypeDecorator[datetime]):
    """A time column: stored as naive UTC (the column is a plain DateTime, as every migration made it, on SQLite and
    PostgreSQL alike), handed out as an aware UTC datetime. A naive datetime is refused on the way in
    (``smartsensor.domain.clock.NaiveDatetimeError``): which zone it meant cannot be known."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else naive_utc(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        return None if value is None else as_utc(value)


# Every table below; Alembic's target metadata (schema/migrations/env.py).
metadata = MetaData()


# The partial indexes' predicates. A query that should use one repeats its predicate word for word (SQLite's rule).
PENDING_PREDICATE = "state = 'smart_pending'"
WAITING_PREDICATE = "state IN ('smart_pending', 'smart_running')"
RUNNING_PREDICATE = "state = 'smart_running'"
CLASSIC_PREDICATE = "state IN ('scheduled', 'running', 'up_for_retry')"


# One sensor task for one execution date. Times are aware UTC (``UtcDateTime``: naive UTC in the table).
task_instance = Table(
    "task_instance",
    metadata,
    Column("dag_id", String(250), primary_key=True),
    Column("task_id", String(250), primary_key=True),
    Column("execution_date", UtcDateTime, primary_key=True),
    Column("state", String(20)),
    Column("try_number", Integer, nullable=False, default=1),
    Column("max_tries", Integer, nullable=False, default=0),
    Column("start_date", UtcDateTime),
    Column("end_date", UtcDateTime),
    Column("updated_at", UtcDateTime),
    Column("operator", String(100)),
    Column("classpath", String(500)),
    Column("fileloc", String(2000)),
    Column("hostname", String(250)),
    Column("error", Text),
    Column("attr_dict", Text),
    Column("exec_dict", Text),
    Column("hashcode", BigInteger),
    Column("shardcode", Integer),
    # Marking a task ended inserts into the full indexes only (primary key, hashcode): the others hold just the
    # states they serve (migration 0005 says why).
    Index("ti_hashcode", "hashcode"),
    Index(
        "ti_pending_shardcode",
        "shardcode",
        postgresql_where=text(PENDING_PREDICATE),
        sqlite_where=text(PENDING_PREDICATE),
    ),
    Index(
        "ti_waiting_shardcode",
        "shardcode",
        postgresql_where=text(WAITING_PREDICATE),
        sqlite_where=text(WAITING_PREDICATE),
    ),
    Index(
        "ti_running_updated",
        "updated_at",
        postgresql_where=text(RUNNING_PREDICATE),
        sqlite_where=text(RUNNING_PREDICATE),
    ),
    Index("ti_classic_state", "state", postgresql_where=text(CLASSIC_PREDICATE), sqlite_where=text(CLASSIC_PREDICATE)),
)


# The last round of each range rounds (one worker serving one range), for `smartsensor status`, under its
# ``range_rounds_id`` (``"{worker}:{shard_min}-{shard_max}"``; the column was ``worker_id`` before migration 0007).
worker_round = Table(
    "worker_round",
    metadata,
    Column("range_rounds_id", String(250), primary_key=True),
    Column("hostname", String(250)),
    Column("pid", Integer),
    Column("shard_min", Integer, nullable=False),
    Column("shard_max", Integer, nullable=False),
    Column("last_round_at", UtcDateTime),
    Column("last_round_seconds", Float),
    Column("last_round_json", Text),
)


# A worker process that holds (or stands by for) shard leases; heartbeat_at shows it is alive.
worker = Table(
    "worker",
    metadata,
    Column("worker_id", String(250), primary_key=True),
    Column("hostname", String(250)),
    Column("pid", Integer),
    Column("started_at", UtcDateTime),
    Column("heartbeat_at", UtcDateTime),
    Column("checks_failing_since", UtcDateTime),  # every check of its rounds failing since (None: not failing)
    Column("checks_answered_at", UtcDateTime),  # when a check of its rounds last answered
)


# Ownership of one configured shard range. epoch grows by one at every claim (fencing token).
shard_lease = Table(
    "shard_lease",
    metadata,
    Column("shard_min", Integer, primary_key=True, autoincrement=False),
    Column("shard_max", Integer, nullable=False),
    Column("owner", String(250)),
    Column("epoch", Integer, nullable=False, default=0),
    Column("expires_at", UtcDateTime),
)


# A pipeline's hint that a partition landed (canonical ``db.table/k=v/...``).
partition_signal = Table(
    "partition_signal",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(2000), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Index("signal_created_at", "created_at"),
)


# A task of another scheduler (Airflow) waiting through smartsensor: its key (the deployment's ``instance`` name, ""
# when its connection sets none, and Airflow's own key: migration 0009), the try of it that the current smartsensor
# task instance (ti_*) belongs to. A new try there starts a new task instance here, and so does the same try
# registered again with another check.
external_task = Table(
    "external_task",
    metadata,
    Column("dag_id", String(250), primary_key=True),
    Column("task_id", String(250), primary_key=True),
    Column("run_id", String(250), primary_key=True),
    Column("map_index", Integer, primary_key=True, autoincrement=False),
    Column("try_number", Integer, nullable=False),
    Column("logical_date", UtcDateTime),
    Column("ti_task_id", String(250), nullable=False),
    Column("ti_execution_date", UtcDateTime, nullable=False),
    Column("registered_at", UtcDateTime, nullable=False),
    Column("instance", String(64), primary_key=True, server_default=""),
)


# How many task instances were in each state at the start of one time bucket (``[api] history_interval``), written
# by one ``smartsensor serve`` per bucket (the primary key keeps N servers from multiplying it).
state_sample = Table(
    "state_sample",
    metadata,
    Column("bucket_at", UtcDateTime, primary_key=True),
    Column("state", String(20), primary_key=True),
    Column("count", Integer, nullable=False),
)


# A table Airflow consumes as a ``hive://`` asset, whose landings the workers publish as asset events (migration
# 0008): its asset's id in Airflow, the shardcode that says which worker publishes it, and when it was first watched
# (the partitions present then are the outbox's ``baseline``).
asset_watch = Table(
    "asset_watch",
    metadata,
    Column("uri", String(500), primary_key=True),
    Column("asset_id", BigInteger, nullable=False),
    Column("db_name", String(128), nullable=False),
    Column("table_name", String(256), nullable=False),
    Column("shardcode", Integer, nullable=False),
    Column("watched_since", UtcDateTime, nullable=False),
    Column("baselined_at", UtcDateTime),
    Column("seen_at", UtcDateTime, nullable=False),
    Column("forgotten_at", UtcDateTime),
    Column("paused_consumers", Text),
    Index("asset_watch_shardcode", "shardcode"),
)


# The outbox's undelivered rows, the ones a publisher claims and `status` counts.
UNDELIVERED_PREDICATE = "state IN ('pending', 'sending')"


# One landed partition of a watched table, to be published once as an asset event (migration 0008). Unique by
# (uri, partition_name, generation): a landing is enqueued once however many workers or cycles see it. A worker claims
# a row under a token until ``claimed_until``; only that claim's holder can end it. ``posts`` counts the 2xx answers
# Airflow gave for the row (more than one: a duplicate, visible), ``unknown_outcomes`` the attempts whose outcome was
# never known (a timeout, a claim that lapsed), ``unknown_since`` when the row's outcome became unknown until
# Airflow's answer, or its events looked up, settle it (migration 0010). ``generation`` numbers the landings of one
# partition name (a partition dropped and added again, published again by choice: ``[landings]
# publish_recreated``), ``part_id`` is the metastore's id of the partition it was (migration 0011).
landing_outbox = Table(
    "landing_outbox",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("uri", String(500), nullable=False),
    Column("partition_name", String(767), nullable=False),  # Hive: PART_NAME varchar(767)
    Column("partition_key", Text, nullable=False),
    Column("shardcode", Integer, nullable=False),
    Column("state", String(20), nullable=False),
    Column("landed_at", UtcDateTime, nullable=False),
    Column("next_attempt_at", UtcDateTime, nullable=False),
    Column("claim_token", String(64)),
    Column("claimed_by", String(250)),
    Column("claimed_until", UtcDateTime),
    Column("attempts", Integer, nullable=False, default=0),
    Column("posts", Integer, nullable=False, default=0),
    Column("unknown_outcomes", Integer, nullable=False, default=0),
    Column("last_error", Text),
    Column("delivered_at", UtcDateTime),
    Column("event_id", BigInteger),
    Column("unknown_since", UtcDateTime),
    Column("generation", Integer, nullable=False, default=0, server_default="0"),
    Column("part_id", BigInteger),
    Column("post_started_at", UtcDateTime),
    Column("missing_since", UtcDateTime),  # a listing of the table lacked the partition since (None: it had it)
    Index("outbox_landing", "uri", "partition_name", "generation", unique=True),
    Index(
        "outbox_undelivered",
        "shardcode",
        "next_attempt_at",
        postgresql_where=text(UNDELIVERED_PREDICATE),
        sqlite_where=text(UNDELIVERED_PREDICATE),
    ),
)
