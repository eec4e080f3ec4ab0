"""The configuration keys: section, name, default, parser, help text and numeric bounds of each.

``smartsensor.config`` reads a file and the environment against this table; ``render_config`` writes it out
as a commented file: ``airflow.cfg.example`` is ``render_config({})`` (a test checks), and
``smartsensor config init`` writes it with a deployment's own values.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from typing import Any, Callable


def parse_bool(raw: str) -> bool:
    """``true/1/yes/on`` or ``false/0/no/off``, any case."""
    value = raw.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {raw!r}")


def parse_int(raw: str) -> int:
    """A whole number."""
    return int(raw.strip())


def parse_float(raw: str) -> float:
    """A finite number."""
    value = float(raw.strip())
    if not math.isfinite(value):  # float() accepts "nan" and "inf"; no setting means either
        raise ValueError(f"not a finite number: {raw!r}")
    return value


def parse_str(raw: str) -> str:
    """The text, stripped."""
    return raw.strip()


def parse_list(raw: str) -> list[str]:
    """Items separated by commas or newlines, blanks dropped."""
    return [item.strip() for item in raw.replace("\n", ",").split(",") if item.strip()]


def parse_tables(raw: str) -> list[str]:
    """``parse_list`` of ``db.table`` names (lower-cased, as Hive stores them), or ``*`` alone for every table."""
    items = [item.lower() for item in parse_list(raw)]
    if "*" in items and len(items) > 1:
        raise ValueError(f"'*' means every table: give it alone, not with others: {raw!r}")
    for item in items:
        db, dot, table = item.partition(".")
        if item != "*" and (not dot or not db or not table or "." in table or any(c.isspace() for c in item)):
            raise ValueError(f"not a table name of the form db.table: {item!r}")
    return items


@dataclass(frozen=True)
class Key:
    """One documented configuration key."""

    section: str
    name: str
    default: str
    parse: Callable[[str], Any]
    help: str
    bounds: tuple[float, float] | None = None  # (lowest, highest) for a numeric key


DAY = 24 * 3600.0
CATALOG_BACKENDS = ("auto", "thrift", "spark", "metastore_db")

KEYS: tuple[Key, ...] = (
    Key(
        "core",
        "sql_alchemy_conn",
        "sqlite:///{SMARTSENSOR_HOME}/smartsensor.db",
        parse_str,
        "SQLAlchemy URL of the metadata database. {SMARTSENSOR_HOME} is replaced by the home folder. "
        "SQLite (the embedded default, one host): sqlite:////abs/path/smartsensor.db; its folder is created only "
        "under the home folder. PostgreSQL (several hosts): postgresql://user:password@db-host:5432/smartsensor "
        "(postgresql:// and postgres:// use the psycopg2 driver smartsensor installs; postgresql+psycopg2:// too).",
    ),
    Key(
        "core",
        "dag_file_import_timeout",
        "60",
        parse_float,
        "Seconds `submit` lets a DAG file's import take; a file that loops or blocks at import is reported.",
        bounds=(1, 3600),
    ),
    Key(
        "core",
        "sql_call_timeout",
        "60",
        parse_float,
        "PostgreSQL: seconds one call to the metadata database (a statement, a commit, a pool's ping) may wait "
        "for its answer; past that the process closes that connection itself and the call fails (a worker's "
        "round or lease heartbeat then fails, is logged, and the next one reconnects). Bounds what no server "
        "timeout and no TCP keepalive can: a connection that stalls without closing (a hung proxy or pooler, a "
        "frozen server), whose peer still acknowledges every packet. Connecting is bounded apart, at 5 s. Every "
        "smartsensor process but `db init` (a migration may run long) applies it.",
        bounds=(1, DAY),
    ),
    Key(
        "core",
        "listen_check_interval",
        "10",
        parse_float,
        "PostgreSQL: seconds a process's LISTEN connection (a worker's wake-ups, `serve`'s held requests) may hear "
        "nothing before it is asked `SELECT 1`, an answer awaited at most `sql_call_timeout`; a connection that "
        "stalled without closing fails there and a new one listens. A stalled LISTEN connection is noticed within "
        "this plus `sql_call_timeout`; without the check, notifications would be lost until a restart.",
        bounds=(0.5, DAY),
    ),
    Key(
        "smart_sensor",
        "use_smart_sensor",
        "True",
        parse_bool,
        "Route eligible sensor tasks to the shard workers (smart_pending) instead of classic mode.",
    ),
    Key(
        "smart_sensor",
        "shard_code_upper_limit",
        "10000",
        parse_int,
        "shardcode = hashcode mod this value. After changing it run `smartsensor db reshard` to move "
        "rows already registered.",
        bounds=(1, 2**31 - 1),
    ),
    Key(
        "smart_sensor",
        "shards",
        "5",
        parse_int,
        "Number of shard ranges when shard_ranges is empty: [0, limit) split evenly.",
        bounds=(1, 100_000),
    ),
    Key(
        "smart_sensor",
        "shard_ranges",
        "",
        parse_str,
        "Explicit half-open ranges covering [0, limit) without gap or overlap, e.g. 0-2000, 2000-10000.",
    ),
    Key(
        "smart_sensor",
        "sensors_enabled",
        "NamedHivePartitionSensor, HivePartitionSensor, SuccessFileSensor",
        parse_list,
        "Class names (marked @smart_eligible in code) that may run in the shard workers.",
    ),
    Key(
        "smart_sensor",
        "sensor_modules",
        "",
        parse_list,
        "Extra importable modules defining smart-eligible sensor classes; workers import only these "
        "and the built-in smartsensor.sensors package, never a class path read from the database.",
    ),
    Key(
        "smart_sensor",
        "poke_interval",
        "5",
        parse_float,
        "Seconds between worker rounds. Each task is still poked by its own poke_interval.",
        bounds=(0.05, DAY),
    ),
    Key(
        "smart_sensor",
        "index_rebuild_interval",
        "600",
        parse_float,
        "Seconds between full rebuilds of a worker's in-memory index of waiting checks from the database. Between "
        "rebuilds a round reads the tasks that arrived (the change feed) and, every reconcile_interval, the "
        "waiting tasks changed recently by anyone (reconciliation); a rebuild also forgets tasks another process "
        "ended and adopts rows written straight into the database.",
        bounds=(1, 7 * DAY),
    ),
    Key(
        "smart_sensor",
        "reconcile_interval",
        "5",
        parse_float,
        "Seconds between a worker's reconciliations: one indexed query per shard range for the waiting tasks "
        "changed since the last one (a set-state by hand, another process, `db reshard`), added to the index if "
        "it lacks them. A waiting task is in the index within reconcile_interval + poke_interval (the bound that "
        "`status` reports stuck tasks against).",
        bounds=(0.05, DAY),
    ),
    Key(
        "smart_sensor",
        "reconcile_lookback",
        "15",
        parse_float,
        "Seconds a reconciliation looks back before the previous one: covers clocks that differ between hosts. "
        "A transaction that commits after the time it stamped is covered on PostgreSQL by reading from when the "
        "oldest transaction still open began (pg_stat_activity: the workers' role needs pg_read_all_stats to see "
        "other roles' sessions), up to index_rebuild_interval back; on SQLite only this lookback covers it, and "
        "a longer one is read at the next index rebuild. Larger costs only rows read again.",
        bounds=(0, DAY),
    ),
    Key(
        "smart_sensor",
        "write_threads",
        "2",
        parse_int,
        "PostgreSQL: how many of a worker's shard ranges write their round at once, each in its own transaction "
        "(a landing round that marks many tasks uses that many database cores). SQLite writes one at a time.",
        bounds=(1, 64),
    ),
    Key(
        "smart_sensor",
        "poke_timeout",
        "60",
        parse_float,
        "Seconds a user sensor's own poke() may take (in a worker or a classic run). One that takes longer is "
        "a transient error for its check, and the check is not poked again until that call returns.",
        bounds=(0.1, DAY),
    ),
    Key(
        "smart_sensor",
        "heartbeat_interval",
        "5",
        parse_float,
        "Seconds between a worker's lease renewals (and claims of free or expired ranges).",
        bounds=(0.05, DAY),
    ),
    Key(
        "smart_sensor",
        "lease_timeout",
        "15",
        parse_float,
        "Seconds a shard lease lives without renewal; after that another worker takes the range over.",
        bounds=(0.1, 7 * DAY),
    ),
    Key(
        "smart_sensor",
        "failover_after",
        "60",
        parse_float,
        "Seconds a worker's checks may all fail (the metastore out of its reach: every check of its rounds a "
        "transient error) while another live worker's succeed, before it hands its ranges over to the workers "
        "that can answer them; when every worker fails, nobody moves. 0: never.",
        bounds=(0, 7 * DAY),
    ),
    Key(
        "smart_sensor",
        "signal_poll_interval",
        "0.2",
        parse_float,
        "SQLite only: seconds between polls for landing signals (Postgres uses LISTEN/NOTIFY).",
        bounds=(0.01, 3600),
    ),
    Key(
        "smart_sensor",
        "catalog_backend",
        "auto",
        parse_str,
        "How workers list partitions: thrift (straight to the metastore service at [spark] metastore_uris, over "
        "its thrift API, no JVM), spark (the SparkSession's external catalog), metastore_db (the metastore "
        "database, the service's own PostgreSQL or MySQL tables, [catalog] metastore_db_url: one statement per "
        "round), or auto: thrift when metastore_uris is set, else spark.",
    ),
    Key(
        "smart_sensor",
        "metastore_timeout",
        "10",
        parse_float,
        "Seconds the thrift catalog backend waits on a metastore service socket (connect and each call) before "
        "the check is a transient error and the connection is dropped. The metastore_db backend: each connection "
        "attempt and each statement (MySQL: the client's read timeout; PostgreSQL: the server's statement_timeout, "
        "and the answer awaited at most 1 s longer before the connection is closed from this side, so that a "
        "connection that stalls without closing fails too). A round makes one call per table on thrift (one "
        "statement per round on metastore_db), each bounded by this: a round whose every call times out takes "
        "that many times this (thrift: twice per call at most with several metastore_uris, a timed-out call "
        "being tried once more on the next URI).",
        bounds=(0.1, 3600),
    ),
    Key("spark", "master", "local[1]", parse_str, "Spark master URL."),
    Key("spark", "app_name", "smartsensor", parse_str, "Spark application name."),
    Key("spark", "warehouse_dir", "{SMARTSENSOR_HOME}/warehouse", parse_str, "spark.sql.warehouse.dir."),
    Key(
        "spark",
        "metastore_uris",
        "",
        parse_str,
        "Thrift URIs of a Hive metastore service (thrift://host:port), comma separated. Empty: embedded Derby "
        "under the home folder, usable by ONE process only. The thrift catalog backend connects to them in order; "
        "one whose call timed out or whose connection failed is tried after the others for 60 s, and a call that "
        "failed there is tried once more on the next one.",
    ),
    Key("spark", "conf", "", parse_list, "Extra Spark settings passed through, comma separated key=value pairs."),
    Key(
        "catalog",
        "parallelism",
        "1",
        parse_int,
        "Tables the thrift catalog backend lists at once in a round, each on its own metastore service "
        "connection (1: one after another). More shortens a round over many tables and adds that many concurrent "
        "calls to the metastore service's load.",
        bounds=(1, 64),
    ),
    Key(
        "catalog",
        "metastore_db_url",
        "",
        parse_str,
        "The metastore database (the Hive metastore service's own tables), for catalog_backend = metastore_db: "
        "a SQLAlchemy URL such as "
        "postgresql://reader:secret@metastore-db:5432/hive, or mysql://reader:secret@metastore-db:3306/hive "
        "(MySQL 8 or MariaDB 10.6+, through PyMySQL). Give it read-only credentials: the backend reads "
        "DBS, TBLS, PARTITION_KEYS and PARTITIONS and needs SELECT on those four tables only.",
    ),
    Key(
        "catalog",
        "metastore_db_feed",
        "true",
        parse_bool,
        "catalog_backend = metastore_db: follow the metastore database's PARTITIONS by id (a partition is looked "
        "up once, "
        "then the round reads only the partitions added since the last one) instead of looking every due "
        "partition up in every round. false: every round looks every due partition up.",
    ),
    Key(
        "catalog",
        "metastore_db_verify_seconds",
        "600",
        parse_float,
        "Following the feed: seconds between full look-ups of every due partition, which also see partitions "
        "dropped or renamed and tables re-created since (until then a dropped partition still counts as present), "
        "and ids given up by metastore_db_max_gaps.",
        bounds=(1, 7 * 24 * 3600),
    ),
    Key(
        "catalog",
        "metastore_db_max_gaps",
        "10000",
        parse_int,
        "Following the feed: unseen ids below the highest one read that every round asks for again, the highest "
        "kept. The metastore service hands out ids in blocks, one per instance, used for as long as the instance runs, "
        "so an id can commit long after higher ones: it is seen the round after it commits, however late, while "
        "it is among these. No time limit applies; ids never used (blocks thrown away by restarts, rolled-back "
        "additions) fill the rest, and an id given up for its count is seen at the next full look-up. A database "
        "that went back (failover, restore) is found by the next round whatever this is. Each costs one "
        "primary-key probe per round.",
        bounds=(100, 1_000_000),
    ),
    Key(
        "landings",
        "publish",
        "false",
        parse_bool,
        'Publish landings to Airflow 3.3+ as asset events (docs/airflow.md, "Schedule on landings"): each worker '
        "lists the tables of the hive:// assets that Airflow DAGs are scheduled on, among the tables its leases "
        "cover, and posts one event per partition that landed since the table was first watched, with its "
        "partition key, through an outbox in this database (at least once; a duplicate is counted).",
    ),
    Key(
        "landings",
        "airflow_url",
        "",
        parse_str,
        "Airflow's api-server, e.g. http://airflow:8080 (required when publish is on).",
    ),
    Key("landings", "airflow_username", "", parse_str, "The Airflow user the events are posted as."),
    Key(
        "landings",
        "airflow_password_file",
        "",
        parse_str,
        "File whose first line is that user's password (read at start; required when publish is on).",
    ),
    Key(
        "landings",
        "asset_uri_prefix",
        "",
        parse_str,
        "The hive:// assets watched: those whose URI starts with this, e.g. hive://metastore:10000/ (the "
        "host:port your DAGs name this metastore by; Airflow's Hive provider uses 10000 by default). Required when "
        "publish is on.",
    ),
    Key(
        "landings",
        "publish_existing",
        "false",
        parse_bool,
        "When a table is first watched, publish the partitions already present too (false: they are the table's "
        "baseline, kept in the outbox as such and never published; only later landings are).",
    ),
    Key(
        "landings",
        "interval",
        "2",
        parse_float,
        "Seconds between two publishing cycles of a worker (list its watched tables, enqueue what landed, post "
        "what is due), where each cycle lists every watched table (catalog_backend thrift or spark, or "
        "metastore_db without its feed).",
        bounds=(0.1, 3600),
    ),
    Key(
        "landings",
        "change_record_interval",
        "0.5",
        parse_float,
        "Seconds between two publishing cycles of a worker that follows the metastore's change record "
        "(catalog_backend metastore_db with [catalog] metastore_db_feed): a cycle reads what the metastore added "
        "since the last one in one statement, whatever the number of tables watched, so it can run more often.",
        bounds=(0.1, 3600),
    ),
    Key(
        "landings",
        "assets_refresh_interval",
        "60",
        parse_float,
        "Seconds between two reads of Airflow's assets (which tables are watched). A table Airflow has not listed "
        "for three of these is no longer published.",
        bounds=(1, DAY),
    ),
    Key(
        "landings",
        "request_timeout",
        "10",
        parse_float,
        "Seconds each call to Airflow's API may take as a whole (its redirects and the reading of its answer "
        "included). A post that times out is of unknown outcome: looked up in Airflow before it is posted again. "
        "Under [smart_sensor] lease_timeout less 1 s: a post ends before its claim lapses.",
        bounds=(0.1, 600),
    ),
    Key(
        "landings",
        "retry_base",
        "1",
        parse_float,
        "Seconds before the first retry of a failed post; doubled at each failure up to retry_max.",
        bounds=(0.01, 3600),
    ),
    Key(
        "landings",
        "retry_max",
        "300",
        parse_float,
        "Seconds between two retries of a failed post at most.",
        bounds=(0.01, DAY),
    ),
    Key(
        "landings",
        "unknown_outcome_patience",
        "3600",
        parse_float,
        "Seconds a landing whose post had an unknown outcome (a timeout, a worker killed mid-post) may wait for "
        "Airflow to say whether it holds its event before `status` and the workers' log call it unknowable. It "
        "keeps waiting past it: it is never posted again without Airflow's answer (no silent duplicate).",
        bounds=(60, 30 * DAY),
    ),
    Key(
        "landings",
        "publish_recreated",
        "",
        parse_tables,
        "Tables (db.table, comma separated; * for every table) whose partitions, dropped and added again, are "
        "published again, as a new landing with the same partition key (each starts its consumers again). Only "
        "where the change record tells a partition added again from one kept: catalog_backend metastore_db with "
        "[catalog] metastore_db_feed (the partition's id in the metastore changes). A partition overwritten in "
        "place (INSERT OVERWRITE) keeps its id and is never published again. Empty: a partition name is published "
        "once, however often it is dropped and added.",
    ),
    Key(
        "landings",
        "batch",
        "200",
        parse_int,
        "Outbox rows a worker claims and posts per cycle at most.",
        bounds=(1, 100_000),
    ),
    Key(
        "retention",
        "enabled",
        "true",
        parse_bool,
        "Let `smartsensor serve` delete, every interval, what is older than max_age_days: ended task instances "
        "and their Airflow keys, the settled landings of tables no longer watched, idle worker rounds (docs/"
        'deployment.md, "Retention"). `smartsensor db prune` does the same by hand. Never a waiting task or an '
        "undelivered landing.",
    ),
    Key(
        "retention",
        "max_age_days",
        "30",
        parse_float,
        "Days after its end a task instance, and the Airflow key of its try, are kept; an Airflow states poll for a "
        "key pruned answers unknown, so keep this far beyond any sensor's timeout. Also the days a table Airflow no "
        "longer watches keeps its landings, and the days a landing whose partition left its table is kept (with "
        "forget_dropped_landings).",
        bounds=(1, 36500),
    ),
    Key(
        "retention",
        "forget_dropped_landings",
        "true",
        parse_bool,
        "Let the landing publisher delete, once per interval, the settled landings of partitions its watched table "
        "has lacked for max_age_days in a row (each listing that lacks a partition marks it missing, one that has "
        "it again clears the mark). A partition back sooner (a replica that lagged, a table being rebuilt) keeps its "
        "landing and starts no second run; one made anew after that is a new landing. Off, a watched table's outbox "
        "keeps one row per partition it ever had.",
    ),
    Key(
        "retention",
        "interval",
        "3600",
        parse_float,
        "Seconds between two retention passes of a `serve` process (several servers may prune at once).",
        bounds=(60, 7 * DAY),
    ),
    Key(
        "retention",
        "batch_size",
        "5000",
        parse_int,
        "Rows one delete statement touches at most; each batch is a transaction of its own.",
        bounds=(100, 100_000),
    ),
    Key(
        "retention",
        "time_budget",
        "300",
        parse_float,
        "Seconds one retention pass of `serve` may take; the next pass goes on where the work is left.",
        bounds=(1, DAY),
    ),
    Key("metastore", "host", "127.0.0.1", parse_str, "Address `smartsensor metastore start` binds."),
    Key("metastore", "port", "9083", parse_int, "Port of `smartsensor metastore start`.", bounds=(1, 65535)),
    Key("metastore", "java_opts", "-Xmx512m", parse_str, "JVM options of the metastore service."),
    Key("metastore", "start_timeout", "60", parse_float, "Seconds to wait for the service's port.", bounds=(1, 3600)),
    Key(
        "metastore",
        "database_url",
        "",
        parse_str,
        "The metastore database, where the metastore service `smartsensor metastore start` runs keeps its "
        "tables. Empty: embedded Derby under the "
        "home folder. postgresql://user:password@host:port/db: that PostgreSQL database, through the JDBC driver "
        "at /usr/share/java/postgresql.jar (Debian: libpostgresql-jdbc-java); the schema is created on the first "
        "start against an empty database. mysql://user:password@host:port/db: that MySQL or MariaDB database, "
        "through the MariaDB JDBC driver at /usr/share/java/mariadb-java-client.jar (Debian: libmariadb-java), "
        "the schema likewise created on the first start (the user needs a non-empty password).",
    ),
    Key(
        "scheduler", "parallelism", "8", parse_int, "Classic-mode task processes at most at once.", bounds=(1, 1000)
    ),  # each classic run is a process with its own JVM
    Key("scheduler", "loop_interval", "2", parse_float, "Seconds between scheduler loops.", bounds=(0.05, 3600)),
    Key(
        "scheduler",
        "task_heartbeat_interval",
        "10",
        parse_float,
        "Seconds between heartbeats of a classic-mode run (`run-task`) while its task is running.",
        bounds=(0.05, DAY),
    ),
    Key(
        "scheduler",
        "stop_grace",
        "30",
        parse_float,
        "Seconds a stopping scheduler waits for its `run-task` children to hand their tasks back before "
        "killing them (a child still starting Spark answers SIGTERM only once Spark is up).",
        bounds=(0, 3600),
    ),
    Key(
        "scheduler",
        "zombie_threshold",
        "120",
        parse_float,
        "A running classic task whose run has not heartbeated for this many seconds (its process died) "
        "is failed by the scheduler: up_for_retry while tries remain, else failed.",
        bounds=(0.1, 7 * DAY),
    ),
    Key(
        "api",
        "host",
        "127.0.0.1",
        parse_str,
        "Address `smartsensor serve` listens on. Without a token it serves on 127.0.0.1 only, whatever this says.",
    ),
    Key("api", "port", "8794", parse_int, "Port of `smartsensor serve`.", bounds=(1, 65535)),
    Key(
        "api",
        "token",
        "",
        parse_str,
        "Bearer token every API request but /api/v1/health must carry (Authorization: Bearer TOKEN). "
        "Prefer token_file, which keeps the secret out of the config.",
    ),
    Key(
        "api",
        "token_file",
        "",
        parse_str,
        "File whose first line is the bearer token (read at start; wins over token).",
    ),
    Key(
        "api",
        "history_interval",
        "60",
        parse_float,
        "Seconds between the samples of tasks by state that `serve` writes for the status page's chart "
        "(one per interval whatever the number of servers).",
        bounds=(5, DAY),
    ),
    Key(
        "api",
        "history_retention",
        "604800",
        parse_float,
        "Seconds the status page's samples are kept; `serve` deletes older ones. At least history_interval.",
        bounds=(60, 366 * DAY),
    ),
    Key(
        "api",
        "status_max_age",
        "0",
        parse_float,
        "Seconds a `serve` process reuses one status snapshot for /api/v1/status, /metrics and the page, counted "
        "from the start of its read. One read runs at a time: requests that arrive during it wait for it and "
        "share its result, even when it takes longer than this. 0: every request reads the database (a status "
        "read scans the waiting tasks: ~3 s of database time at 1M waiting tasks; set a few seconds when "
        "several scrapers poll).",
        bounds=(0, 3600),
    ),
)

KEY_INDEX: dict[tuple[str, str], Key] = {(k.section, k.name): k for k in KEYS}

# Every numeric key's (lowest, highest) allowed value, checked when the config loads, so a value that would
# crash a loop later (a negative sleep, a timer past the end of time) is refused at once, naming the key.
BOUNDS: dict[tuple[str, str], tuple[float, float]] = {(k.section, k.name): k.bounds for k in KEYS if k.bounds}


CONFIG_HEADER = """\
# smartsensor configuration: every key with its default.
# Lookup: --config PATH, else $SMARTSENSOR_CONFIG, else $SMARTSENSOR_HOME/airflow.cfg (home: ~/smartsensor).
# A missing file means these defaults. Env SMARTSENSOR__<SECTION>__<KEY> overrides the file,
# e.g. SMARTSENSOR__SMART_SENSOR__SHARDS=8. {SMARTSENSOR_HOME} is replaced by the home folder.
"""


def render_config(values: dict[tuple[str, str], str], header: str = CONFIG_HEADER) -> str:
    """Every key of ``KEYS`` as a commented config file: its help text, its allowed range, then
    ``name = value``, with ``values[(section, name)]`` where given and the default elsewhere."""
    unknown = sorted(set(values) - set(KEY_INDEX))
    if unknown:
        raise KeyError(f"unknown configuration keys: {unknown}")
    lines = header.rstrip("\n").splitlines()
    section = None
    for key in KEYS:
        if key.section != section:
            lines += ["", "", f"[{key.section}]"] if section is not None else ["", f"[{key.section}]"]
            section = key.section
        else:
            lines.append("")
        lines += textwrap.wrap(
            key.help,
            width=102,
            initial_indent="# ",
            subsequent_indent="# ",
            break_on_hyphens=False,
            break_long_words=False,
        )
        if key.bounds is not None:
            lines.append(f"# Allowed: {key.bounds[0]:.10g} to {key.bounds[1]:.10g}.")
        value = values.get((key.section, key.name), key.default)
        lines.append(f"{key.name} = {value}")
    return "\n".join(lines) + "\n"
