"""SQLAlchemy models of the metadata database. Alembic migrations in schema/migrations match them."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import BigInteger, DateTime, Dialect, Float, Index, Integer, String, Table, Text, text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
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


class Base(DeclarativeBase):
    # Every model here is mapped to a Table (DeclarativeBase types __table__ as any FromClause), so that
    # insert(Model.__table__) and Model.__table__.c type-check in adapters/sql.
    __table__: ClassVar[Table]


# The partial indexes' predicates. A query that should use one repeats its predicate word for word (SQLite's rule).
PENDING_PREDICATE = "state = 'smart_pending'"
WAITING_PREDICATE = "state IN ('smart_pending', 'smart_running')"
RUNNING_PREDICATE = "state = 'smart_running'"
CLASSIC_PREDICATE = "state IN ('scheduled', 'running', 'up_for_retry')"


class TaskInstance(Base):
    """One sensor task for one execution date. Times are aware UTC (``UtcDateTime``: naive UTC in the table)."""

    __tablename__ = "task_instance"

    dag_id: Mapped[str] = mapped_column(String(250), primary_key=True)
    task_id: Mapped[str] = mapped_column(String(250), primary_key=True)
    execution_date: Mapped[datetime] = mapped_column(UtcDateTime, primary_key=True)
    state: Mapped[str | None] = mapped_column(String(20))
    try_number: Mapped[int] = mapped_column(Integer, nullable=False, default=1)
    max_tries: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    start_date: Mapped[datetime | None] = mapped_column(UtcDateTime)
    end_date: Mapped[datetime | None] = mapped_column(UtcDateTime)
    updated_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    operator: Mapped[str | None] = mapped_column(String(100))
    classpath: Mapped[str | None] = mapped_column(String(500))
    fileloc: Mapped[str | None] = mapped_column(String(2000))
    hostname: Mapped[str | None] = mapped_column(String(250))
    error: Mapped[str | None] = mapped_column(Text)
    attr_dict: Mapped[str | None] = mapped_column(Text)
    exec_dict: Mapped[str | None] = mapped_column(Text)
    hashcode: Mapped[int | None] = mapped_column(BigInteger)
    shardcode: Mapped[int | None] = mapped_column(Integer)

    # Marking a task ended inserts into the full indexes only (primary key, hashcode): the others hold just the
    # states they serve (migration 0005 says why).
    __table_args__ = (
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
        Index(
            "ti_classic_state", "state", postgresql_where=text(CLASSIC_PREDICATE), sqlite_where=text(CLASSIC_PREDICATE)
        ),
    )


class WorkerRound(Base):
    """The last round of each range rounds (one worker serving one range), for `smartsensor status`, under its
    ``range_rounds_id`` (``"{worker}:{shard_min}-{shard_max}"``; the column was ``worker_id`` before migration 0007)."""

    __tablename__ = "worker_round"

    range_rounds_id: Mapped[str] = mapped_column(String(250), primary_key=True)
    hostname: Mapped[str | None] = mapped_column(String(250))
    pid: Mapped[int | None] = mapped_column(Integer)
    shard_min: Mapped[int] = mapped_column(Integer, nullable=False)
    shard_max: Mapped[int] = mapped_column(Integer, nullable=False)
    last_round_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    last_round_seconds: Mapped[float | None] = mapped_column(Float)
    last_round_json: Mapped[str | None] = mapped_column(Text)


class Worker(Base):
    """A worker process that holds (or stands by for) shard leases; heartbeat_at shows it is alive."""

    __tablename__ = "worker"

    worker_id: Mapped[str] = mapped_column(String(250), primary_key=True)
    hostname: Mapped[str | None] = mapped_column(String(250))
    pid: Mapped[int | None] = mapped_column(Integer)
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class ShardLease(Base):
    """Ownership of one configured shard range. epoch grows by one at every claim (fencing token)."""

    __tablename__ = "shard_lease"

    shard_min: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    shard_max: Mapped[int] = mapped_column(Integer, nullable=False)
    owner: Mapped[str | None] = mapped_column(String(250))
    epoch: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class PartitionSignal(Base):
    """A pipeline's hint that a partition landed (canonical ``db.table/k=v/...``)."""

    __tablename__ = "partition_signal"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(2000), nullable=False)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False)

    __table_args__ = (Index("signal_created_at", "created_at"),)


class ExternalTask(Base):
    """A task of another scheduler (Airflow) waiting through smartsensor: its key (the deployment's ``instance``
    name, "" when its connection sets none, and Airflow's own key: migration 0009), the try of it that the current
    smartsensor task instance (ti_*) belongs to. A new try there starts a new task instance here, and so does the
    same try registered again with another check."""

    __tablename__ = "external_task"

    dag_id: Mapped[str] = mapped_column(String(250), primary_key=True)
    task_id: Mapped[str] = mapped_column(String(250), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(250), primary_key=True)
    map_index: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    try_number: Mapped[int] = mapped_column(Integer, nullable=False)
    logical_date: Mapped[datetime | None] = mapped_column(UtcDateTime)
    ti_task_id: Mapped[str] = mapped_column(String(250), nullable=False)
    ti_execution_date: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False)
    registered_at: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False)
    instance: Mapped[str] = mapped_column(String(64), primary_key=True, server_default="")


class StateSample(Base):
    """How many task instances were in each state at the start of one time bucket (``[api] history_interval``),
    written by one ``smartsensor serve`` per bucket (the primary key keeps N servers from multiplying it)."""

    __tablename__ = "state_sample"

    bucket_at: Mapped[datetime] = mapped_column(UtcDateTime, primary_key=True)
    state: Mapped[str] = mapped_column(String(20), primary_key=True)
    count: Mapped[int] = mapped_column(Integer, nullable=False)


class AssetWatch(Base):
    """A table Airflow consumes as a ``hive://`` asset, whose landings the workers publish as asset events (migration
    0008): its asset's id in Airflow, the shardcode that says which worker publishes it, and when it was first
    watched (the partitions present then are the outbox's ``baseline``)."""

    __tablename__ = "asset_watch"

    uri: Mapped[str] = mapped_column(String(500), primary_key=True)
    asset_id: Mapped[int] = mapped_column(BigInteger, nullable=False)
    db_name: Mapped[str] = mapped_column(String(128), nullable=False)
    table_name: Mapped[str] = mapped_column(String(256), nullable=False)
    shardcode: Mapped[int] = mapped_column(Integer, nullable=False)
    watched_since: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False)
    baselined_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    seen_at: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False)

    __table_args__ = (Index("asset_watch_shardcode", "shardcode"),)


# The outbox's undelivered rows, the ones a publisher claims and `status` counts.
UNDELIVERED_PREDICATE = "state IN ('pending', 'sending')"


class LandingOutbox(Base):
    """One landed partition of a watched table, to be published once as an asset event (migration 0008). Unique by
    (uri, partition_name, generation): a landing is enqueued once however many workers or cycles see it. A worker
    claims a row under a token until ``claimed_until``; only that claim's holder can end it. ``posts`` counts the 2xx
    answers Airflow gave for the row (more than one: a duplicate, visible), ``unknown_outcomes`` the attempts whose
    outcome was never known (a timeout, a claim that lapsed), ``unknown_since`` when the row's outcome became unknown
    until Airflow's answer, or its events looked up, settle it (migration 0010). ``generation`` numbers the landings of
    one partition name (a partition dropped and added again, published again by choice: ``[landings]
    publish_recreated``), ``part_id`` is the metastore's id of the partition it was (migration 0011)."""

    __tablename__ = "landing_outbox"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    uri: Mapped[str] = mapped_column(String(500), nullable=False)
    partition_name: Mapped[str] = mapped_column(String(767), nullable=False)  # Hive: PART_NAME varchar(767)
    partition_key: Mapped[str] = mapped_column(Text, nullable=False)
    shardcode: Mapped[int] = mapped_column(Integer, nullable=False)
    state: Mapped[str] = mapped_column(String(20), nullable=False)
    landed_at: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False)
    next_attempt_at: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False)
    claim_token: Mapped[str | None] = mapped_column(String(64))
    claimed_by: Mapped[str | None] = mapped_column(String(250))
    claimed_until: Mapped[datetime | None] = mapped_column(UtcDateTime)
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    posts: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    unknown_outcomes: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    last_error: Mapped[str | None] = mapped_column(Text)
    delivered_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    event_id: Mapped[int | None] = mapped_column(BigInteger)
    unknown_since: Mapped[datetime | None] = mapped_column(UtcDateTime)
    generation: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default="0")
    part_id: Mapped[int | None] = mapped_column(BigInteger)

    __table_args__ = (
        Index("outbox_landing", "uri", "partition_name", "generation", unique=True),
        Index(
            "outbox_undelivered",
            "shardcode",
            "next_attempt_at",
            postgresql_where=text(UNDELIVERED_PREDICATE),
            sqlite_where=text(UNDELIVERED_PREDICATE),
        ),
    )
