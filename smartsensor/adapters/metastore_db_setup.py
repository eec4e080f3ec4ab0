"""The metastore database of the metastore service smartsensor starts, on PostgreSQL or MySQL (``[metastore]
database_url``): the JDBC driver, the service's ``hive-site.xml`` and the metastore's schema in that database,
created once with the DataNucleus SchemaTool that pyspark ships.

**MySQL and MariaDB** (``mysql://``; verified on MariaDB 10.11) go through the MariaDB driver (``MYSQL_JDBC_JAR``)
with ``jdbc:mariadb://host:port/db?useMysqlMetadata=true``: the driver then names the server MySQL, the product
Hive 2.3's DataNucleus adapter and direct SQL know. SchemaTool creates the same 44 tables with the same columns,
named in plain upper case (``DBS``, ``PART_NAME``; no quotes needed, case-sensitive on Linux), as latin1 tables with
a binary collation (``MYSQL_DATANUCLEUS``, as Hive's own MySQL scripts: in utf8mb4 or utf8mb3 some privilege
tables' keys exceed InnoDB's 3072 bytes), package.jdo's VARCHAR(32672) columns as TEXT (too long a row otherwise);
then ``UNICODE_COLUMNS`` (PART_NAME, PART_KEY_VAL, LOCATION, parameter values) become utf8mb3 with a binary
collation, so unicode partition values are stored (outside the BMP they are not: PART_NAME's unique key would
be too long in utf8mb4). A MySQL named lock (``GET_LOCK``) stands in for PostgreSQL's advisory lock. Hive sends
its default password when given an empty one: the MySQL user needs a password.

**Creating the schema.** ``datanucleus.schema.autoCreateAll`` deadlocks on an empty PostgreSQL database (the
service's first CREATE TABLE waits on itself), so the service runs with it off, and the first start against a
database without the metastore's tables runs ``org.datanucleus.store.schema.SchemaTool -create -api JDO`` over
``package.jdo`` from the hive-metastore jar first (44 tables, a few seconds). SchemaTool is given the DataNucleus
settings Hive itself runs with (``HIVE_DATANUCLEUS``): with DataNucleus's own defaults it names list-position
columns ``"IDX"`` instead of ``"INTEGER_IDX"`` and makes the ids SERIAL, a schema the service cannot use. A start
that finds every table skips SchemaTool; one that finds some runs it again, and SchemaTool adds only what is
missing. A PostgreSQL advisory lock keeps two services starting on one database from creating it at once. The
service itself adds ``"SEQUENCE_TABLE"`` (DataNucleus's id counters) at its first write. The ``"VERSION"`` table
stays empty (``hive.metastore.schema.verification`` is off, as on Derby).

**The schema, for code that reads it directly** (verified on PostgreSQL 15 with Hive 2.3.10's package.jdo, and the
same names as Hive's own ``hive-schema-2.3.0.postgres.sql``, i.e. as a production metastore created by Hive's
schematool; some integer types differ, e.g. ``CREATE_TIME`` is integer here and bigint there). Every table and
column name is UPPER CASE and must be double-quoted (``SELECT "PART_NAME" FROM "PARTITIONS"``); the tables are
in the connecting user's current schema (``public`` by default). ``READER_COLUMNS`` lists, and
``tests/process/test_metastore_postgres.py`` checks, the columns of the tables a partition reader needs:

- ``"DBS"``: ``"DB_ID"`` bigint (key), ``"NAME"`` (the database's name, lower case, unique), ``"DESC"``,
  ``"DB_LOCATION_URI"``, ``"OWNER_NAME"``, ``"OWNER_TYPE"``.
- ``"TBLS"``: ``"TBL_ID"`` bigint (key), ``"DB_ID"`` (→ DBS), ``"TBL_NAME"`` (lower case, unique per DB_ID),
  ``"TBL_TYPE"`` (``MANAGED_TABLE``, ``EXTERNAL_TABLE``, ``VIRTUAL_VIEW``), ``"SD_ID"`` (→ SDS), ``"CREATE_TIME"``,
  ``"LAST_ACCESS_TIME"``, ``"OWNER"``, ``"RETENTION"``, ``"IS_REWRITE_ENABLED"``, ``"VIEW_EXPANDED_TEXT"``,
  ``"VIEW_ORIGINAL_TEXT"``.
- ``"PARTITION_KEYS"``: ``"TBL_ID"`` (→ TBLS), ``"PKEY_NAME"`` (the column, lower case), ``"PKEY_TYPE"``
  (``string``, ``int``, ``date``, ...), ``"INTEGER_IDX"`` (its position, from 0), ``"PKEY_COMMENT"``; key
  (TBL_ID, PKEY_NAME). An unpartitioned table has no rows here.
- ``"PARTITIONS"``: ``"PART_ID"`` bigint (key), ``"TBL_ID"`` (→ TBLS), ``"PART_NAME"`` (the escaped name exactly
  as ``SHOW PARTITIONS`` and the thrift API's ``get_partition_names`` print it, ``ds=a%2Fb/hr=00``; unique per
  TBL_ID), ``"SD_ID"``, ``"CREATE_TIME"``, ``"LAST_ACCESS_TIME"``.
- ``"PARTITION_KEY_VALS"``: ``"PART_ID"`` (→ PARTITIONS), ``"PART_KEY_VAL"`` (the raw, unescaped value),
  ``"INTEGER_IDX"`` (which key: PARTITION_KEYS' ``"INTEGER_IDX"``); key (PART_ID, INTEGER_IDX).

For example, the partition names of ``db.t``: ``SELECT p."PART_NAME" FROM "PARTITIONS" p JOIN "TBLS" t ON
t."TBL_ID" = p."TBL_ID" JOIN "DBS" d ON d."DB_ID" = t."DB_ID" WHERE d."NAME" = 'db' AND t."TBL_NAME" = 't'``.

**The password** never reaches a command line or the log: the service reads it from ``conf/hive-site.xml`` and
SchemaTool from ``conf/schematool.properties`` (deleted after the run), both owner-only, under
``<home>/metastore_service``.
"""

from __future__ import annotations

import os
import time
import zipfile
from pathlib import Path
from xml.sax.saxutils import escape

from sqlalchemy import URL, Connection, create_engine, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from smartsensor.adapters.metastore_service_process import MetastoreServiceError, log_path, run_to_log, service_dir
from smartsensor.config import Config, MetastoreDb

__all__ = [
    "HIVE_DATANUCLEUS",
    "JDBC_JAR",
    "READER_COLUMNS",
    "TABLES",
    "conf_dir",
    "ensure_schema",
    "jdbc_jar",
    "write_hive_site",
]

JDBC_JAR = Path("/usr/share/java/postgresql.jar")  # Debian/Ubuntu: libpostgresql-jdbc-java
DRIVER = "org.postgresql.Driver"
# MySQL and MariaDB: the MariaDB driver (LGPL; Connector/J is GPL), with jdbc:mariadb:// URLs.
MYSQL_JDBC_JAR = Path("/usr/share/java/mariadb-java-client.jar")  # Debian/Ubuntu: libmariadb-java
MYSQL_DRIVER = "org.mariadb.jdbc.Driver"
SCHEMA_TOOL = "org.datanucleus.store.schema.SchemaTool"
# Hive 2.3's HiveConf defaults that shape the schema; SchemaTool must create it with the same ones.
HIVE_DATANUCLEUS = {
    "datanucleus.identifierFactory": "datanucleus1",
    "datanucleus.rdbms.useLegacyNativeValueStrategy": "true",
}
# MySQL: the tables in latin1 with a binary collation, as Hive's own MySQL scripts make them (in utf8mb4 or utf8mb3
# some of the privilege tables' keys exceed InnoDB's 3072 bytes); the binary collation compares names exactly, as
# PostgreSQL does. Then the columns that hold partition values (UNICODE_COLUMNS) become utf8mb3, binary too:
# latin1 cannot hold unicode values, and utf8mb4 makes the unique key (PART_NAME, TBL_ID) too long.
MYSQL_DATANUCLEUS = {
    "datanucleus.rdbms.mysql.characterSet": "latin1",
    "datanucleus.rdbms.mysql.collation": "latin1_bin",
}
UNICODE_COLUMNS = (
    ("PARTITIONS", "PART_NAME"),
    ("PARTITION_KEY_VALS", "PART_KEY_VAL"),
    ("SDS", "LOCATION"),
    ("PARTITION_PARAMS", "PARAM_VALUE"),
    ("TABLE_PARAMS", "PARAM_VALUE"),
)
# The 44 tables SchemaTool creates from Hive 2.3.10's package.jdo.
TABLES = (
    *("BUCKETING_COLS", "CDS", "COLUMNS_V2", "DATABASE_PARAMS", "DBS", "DB_PRIVS", "DELEGATION_TOKENS", "FUNCS"),
    *("FUNC_RU", "GLOBAL_PRIVS", "IDXS", "INDEX_PARAMS", "KEY_CONSTRAINTS", "MASTER_KEYS", "NOTIFICATION_LOG"),
    *("NOTIFICATION_SEQUENCE", "PARTITIONS", "PARTITION_EVENTS", "PARTITION_KEYS", "PARTITION_KEY_VALS"),
    *("PARTITION_PARAMS", "PART_COL_PRIVS", "PART_COL_STATS", "PART_PRIVS", "ROLES", "ROLE_MAP", "SDS", "SD_PARAMS"),
    *("SERDES", "SERDE_PARAMS", "SKEWED_COL_NAMES", "SKEWED_COL_VALUE_LOC_MAP", "SKEWED_STRING_LIST"),
    *("SKEWED_STRING_LIST_VALUES", "SKEWED_VALUES", "SORT_COLS", "TABLE_PARAMS", "TAB_COL_STATS", "TBLS"),
    *("TBL_COL_PRIVS", "TBL_PRIVS", "TYPES", "TYPE_FIELDS", "VERSION"),
)
# Every column of the tables a partition reader needs (see the module docstring), in table order.
READER_COLUMNS = {
    "DBS": ("DB_ID", "DESC", "DB_LOCATION_URI", "NAME", "OWNER_NAME", "OWNER_TYPE"),
    "TBLS": (
        *("TBL_ID", "CREATE_TIME", "DB_ID", "LAST_ACCESS_TIME", "OWNER", "RETENTION", "IS_REWRITE_ENABLED"),
        *("SD_ID", "TBL_NAME", "TBL_TYPE", "VIEW_EXPANDED_TEXT", "VIEW_ORIGINAL_TEXT"),
    ),
    "PARTITION_KEYS": ("TBL_ID", "PKEY_COMMENT", "PKEY_NAME", "PKEY_TYPE", "INTEGER_IDX"),
    "PARTITIONS": ("PART_ID", "CREATE_TIME", "LAST_ACCESS_TIME", "PART_NAME", "SD_ID", "TBL_ID"),
    "PARTITION_KEY_VALS": ("PART_ID", "PART_KEY_VAL", "INTEGER_IDX"),
}
# package.jdo's longest columns (PARAM_VALUE, FTYPE, ...), created as TEXT on MySQL.
_LONG_VARCHAR = 'length="32672" jdbc-type="VARCHAR"'
# pg_advisory_lock key of "the metastore schema is being created" (any constant; ours spells "smsensor").
_SCHEMA_LOCK = 0x736D73656E736F72


def conf_dir(cfg: Config) -> Path:
    """``<home>/metastore_service/conf``: the service's hive-site.xml, first on its classpath."""
    return service_dir(cfg) / "conf"


def jdbc_jar(kind: str = "postgresql") -> Path:
    """The JDBC driver for ``kind`` (postgresql, mysql); MetastoreServiceError naming the package when it is not
    installed."""
    if kind == "mysql":
        if not MYSQL_JDBC_JAR.is_file():
            raise MetastoreServiceError(
                f"the metastore service on MySQL needs the MariaDB JDBC driver at {MYSQL_JDBC_JAR}, which is missing: "
                "install it (Debian/Ubuntu: apt-get install -y libmariadb-java; ./scripts/test.sh does), or leave "
                "[metastore] database_url empty for embedded Derby"
            )
        return MYSQL_JDBC_JAR
    if not JDBC_JAR.is_file():
        raise MetastoreServiceError(
            f"the metastore service on PostgreSQL needs the PostgreSQL JDBC driver at {JDBC_JAR}, which is missing: "
            "install it (Debian/Ubuntu: apt-get install -y libpostgresql-jdbc-java; ./scripts/test.sh and "
            "./scripts/bench.sh --postgres do), or leave [metastore] database_url empty for embedded Derby"
        )
    return JDBC_JAR


def _write_private(path: Path, content: str) -> None:
    """Write ``content`` to ``path``, readable by its owner only (it holds the database password)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an older file keeps its mode through O_CREAT
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(content)


def _connection_settings(db: MetastoreDb) -> dict[str, str]:
    return {
        "javax.jdo.option.ConnectionURL": db.jdbc_url,
        "javax.jdo.option.ConnectionDriverName": MYSQL_DRIVER if db.kind == "mysql" else DRIVER,
        "javax.jdo.option.ConnectionUserName": db.user,
        "javax.jdo.option.ConnectionPassword": db.password,
    }


def write_hive_site(cfg: Config, db: MetastoreDb) -> Path:
    """Write the service's connection settings to ``conf/hive-site.xml`` (owner-only); return the folder, to go
    first on the service's classpath, where Hive looks for hive-site.xml."""
    rows = "".join(
        f"  <property><name>{name}</name><value>{escape(value)}</value></property>\n"
        for name, value in _connection_settings(db).items()
    )
    _write_private(conf_dir(cfg) / "hive-site.xml", f'<?xml version="1.0"?>\n<configuration>\n{rows}</configuration>\n')
    return conf_dir(cfg)


def remove_hive_site(cfg: Config) -> None:
    """Forget a previous PostgreSQL start's settings (and password): a start on Derby does not use them."""
    (conf_dir(cfg) / "hive-site.xml").unlink(missing_ok=True)


def _properties_value(value: str) -> str:
    """``value`` for a Java .properties file: every character but [A-Za-z0-9._-] as a UTF-16 \\uXXXX escape."""
    out = []
    for ch in value:
        if ch.isascii() and (ch.isalnum() or ch in "._-"):
            out.append(ch)
        else:
            units = ch.encode("utf-16-be")
            out += [f"\\u{units[i]:02x}{units[i + 1]:02x}" for i in range(0, len(units), 2)]
    return "".join(out)


def _engine_url(db: MetastoreDb) -> URL:
    return URL.create(
        "mysql+pymysql" if db.kind == "mysql" else "postgresql+psycopg2",
        username=db.user,
        password=db.password or None,
        host=db.host,
        port=db.port,
        database=db.database,
    )


def _present(conn: Connection) -> set[str]:
    if conn.dialect.name == "mysql":
        rows = conn.execute(text("SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()"))
        return {row[0] for row in rows} & set(TABLES)
    rows = conn.execute(
        text(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = current_schema() AND table_name = ANY(:names)"
        ),
        {"names": list(TABLES)},
    )
    return {row[0] for row in rows}


def _unicode_columns(conn: Connection) -> None:
    """MySQL: make UNICODE_COLUMNS utf8mb3 (binary collation), keeping their types and nullability."""
    for table, column in UNICODE_COLUMNS:
        kind, nullable = conn.execute(
            text(
                "SELECT column_type, is_nullable FROM information_schema.columns "
                "WHERE table_schema = DATABASE() AND table_name = :t AND column_name = :c"
            ),
            {"t": table, "c": column},
        ).one()
        null = "NULL" if nullable == "YES" else "NOT NULL"
        conn.execute(
            text(f"ALTER TABLE `{table}` MODIFY `{column}` {kind} CHARACTER SET utf8mb3 COLLATE utf8mb3_bin {null}")
        )


def _try_lock(conn: Connection) -> bool:
    if conn.dialect.name == "mysql":  # a named lock, per server: the database's name in it
        return bool(conn.execute(text("SELECT GET_LOCK(CONCAT('smartsensor-schema-', DATABASE()), 0)")).scalar())
    return bool(conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": _SCHEMA_LOCK}).scalar())


def _lock(conn: Connection, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not _try_lock(conn):
        if time.monotonic() >= deadline:
            raise MetastoreServiceError(
                f"another process kept creating the metastore schema for more than {timeout:g} s"
            )
        time.sleep(0.2)


def _run_schema_tool(cfg: Config, db: MetastoreDb, java: str, jars: Path, timeout: float) -> None:
    folder = conf_dir(cfg)
    folder.mkdir(parents=True, exist_ok=True)
    found = sorted(jars.glob("hive-metastore-*.jar"))
    if not found:
        raise MetastoreServiceError(f"no hive-metastore jar in {jars}: cannot create the metastore schema")
    with zipfile.ZipFile(found[-1]) as jar:
        jdo = jar.read("package.jdo").decode("utf-8")
    if db.kind == "mysql":  # VARCHAR(32672) exceeds MySQL's row size in utf8mb4: TEXT, as Hive's MySQL schema has
        jdo = jdo.replace(_LONG_VARCHAR, 'jdbc-type="CLOB"')
    (folder / "package.jdo").write_text(jdo, encoding="utf-8")
    settings = {
        **{
            name.replace("javax.jdo.option.", "datanucleus."): value for name, value in _connection_settings(db).items()
        },
        **HIVE_DATANUCLEUS,
        **(MYSQL_DATANUCLEUS if db.kind == "mysql" else {}),
    }
    props = folder / "schematool.properties"
    _write_private(props, "".join(f"{name}={_properties_value(value)}\n" for name, value in settings.items()))
    cmd = [java, "-Xmx256m", "-cp", f"{jars / '*'}:{jdbc_jar(db.kind)}", SCHEMA_TOOL, "-create", "-api", "JDO"]
    try:
        status, _ = run_to_log(
            cfg, "the metastore's SchemaTool", [*cmd, "-props", str(props), str(folder / "package.jdo")], timeout
        )
    finally:
        props.unlink(missing_ok=True)
    if status != 0:
        raise MetastoreServiceError(
            f"creating the metastore schema in {db.shown} failed (exit {status}); see {log_path(cfg)}"
        )


def ensure_schema(cfg: Config, db: MetastoreDb, java: str, jars: Path, timeout: float) -> float | None:
    """Create the metastore's tables in ``db`` unless they are all there; return SchemaTool's seconds, or None
    when it was not needed. Raises MetastoreServiceError when the database cannot be reached or SchemaTool fails."""
    engine = create_engine(
        _engine_url(db), poolclass=NullPool, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 10}
    )  # connect_timeout: psycopg2 and pymysql both take it
    try:
        with engine.connect() as conn:  # closed at the end (NullPool), which releases the advisory lock
            _lock(conn, timeout)
            if not set(TABLES) - _present(conn):
                return None
            started = time.monotonic()
            _run_schema_tool(cfg, db, java, jars, timeout)
            missing = sorted(set(TABLES) - _present(conn))
            if missing:
                raise MetastoreServiceError(
                    f"the metastore's SchemaTool left {len(missing)} tables uncreated in {db.shown} "
                    f"({', '.join(missing[:4])}, ...); see {log_path(cfg)}"
                )
            if db.kind == "mysql":
                _unicode_columns(conn)
            return time.monotonic() - started
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise MetastoreServiceError(f"cannot use the metastore database {db.shown}: {reason}") from None
    finally:
        engine.dispose()
