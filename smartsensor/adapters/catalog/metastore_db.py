"""The metastore-database catalog backend: partition names read from the Hive metastore's own database, one
statement per round for every due check of the process, whatever the number of tables.

Production metastores keep their catalog in PostgreSQL or MySQL; the thrift service answers from it one
table per call. This backend reads the same rows directly, read-only, in the schema Hive 2.3 through 4 share
(upper-case, quoted identifiers):

- ``"DBS"("DB_ID", "NAME")`` and ``"TBLS"("TBL_ID", "DB_ID", "TBL_NAME")``: names as Hive stores them, lower-case;
- ``"PARTITION_KEYS"("TBL_ID", "PKEY_NAME", "PKEY_TYPE", "INTEGER_IDX")``: the partition columns, in order;
- ``"PARTITIONS"("PART_ID", "TBL_ID", "PART_NAME")``: each partition's name, escaped as ``SHOW PARTITIONS``
  prints it (``ds=10%3A00/hr=0``), unique per table (Hive's index ``UNIQUEPARTITION``).

**Catalogs.** From Hive 3 on, ``DBS`` also has ``CTLG_NAME`` and is keyed by (``NAME``, ``CTLG_NAME``): HDP 3 ships
a ``hive`` and a ``spark`` catalog, each with a ``default`` database. Only the databases of the ``hive`` catalog are
read, as the thrift backend reads them (its calls name no catalog: the metastore's default, ``hive``), so a
partition of ``spark.default.t`` never answers a check on ``default.t``. Whether ``DBS`` has the column is looked up
once per process, with its first statement, in the database's own catalog (``pg_attribute``,
``information_schema.COLUMNS``); a process that runs across an upgrade from Hive 2.3 reads every catalog until it
restarts.

A round makes at most two statements (three in the round that finds the database went back: see partition_feed): the
column types of tables it has not cached (``fetch_types``), then ``list_tables``, where an exact check, or a partial
one that gives every column, is its partition's name looked up through that unique index (the values cast as Spark
stores them, then escaped as Hive does) and another partial one lists the partitions whose name starts with the
leading columns it gives (all of the table's when it gives none of them). Tables and names go in as array
parameters: no user text is ever part of the SQL. The grant it needs: SELECT on those four tables, and on
``SEQUENCE_TABLE`` for the feed's check of the id sequence.

**The id sequence.** Following the feed, the statement also reads DataNucleus's ``"SEQUENCE_TABLE"`` (``NEXT_VAL``
of the row ``SEQUENCE_NAME`` = ``org.apache.hadoop.hive.metastore.model.MPartition``: where the next block of
``PART_ID`` values starts), a row of kind 4 (NULL until the metastore's first partition), so that the feed sees the
sequence go back. Whether the table is there, and readable, is looked up with ``CTLG_NAME``, and again every
``SEQUENCE_PROBE_SECONDS`` while it is not (DataNucleus creates it at the metastore's first write where the
schema did not): without it the statement has no such row and the feed no sequence check.

On MySQL and MariaDB (``mysql://`` URLs, PyMySQL) the same two statements take one JSON parameter per list,
unpacked by ``JSON_TABLE`` (MySQL 8, MariaDB 10.6+), with the identifiers unquoted upper case (``DBS``,
``PART_NAME``). Names are compared byte for byte (``CAST(... AS BINARY)``) whatever the columns' collation (Hive's
MySQL scripts make them latin1_bin; ``smartsensor metastore start`` makes PART_NAME utf8mb3_bin), so a name
matches exactly as on PostgreSQL; the sessions are read-only (``SET SESSION TRANSACTION READ ONLY``).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Sequence

from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.sql.elements import TextClause

from smartsensor.adapters.catalog.partition_feed import FeedRead, PartitionFeed
from smartsensor.adapters.catalog.partition_types import PartitionTypes
from smartsensor.adapters.catalog.python_casts import python_cast_all, python_castable
from smartsensor.adapters.sql.engine import CallWatchdog, guarded_connection_class, normalize_url
from smartsensor.hive_filter.names import TableName
from smartsensor.ports import AnsweredListing, ListingRequest
from smartsensor.sensors.errors import CheckError, PermanentCheckError, TransientCheckError, first_line

# The statements below are templates: where a database is found by its name, @IN_HIVE@ restricts it to the hive
# catalog, and where the feed reads a partition's database, @DB_NAME@ is its name (NULL in another catalog); see
# _catalog_variant.
_TYPES = """
    SELECT w.db, w.tbl, k."PKEY_NAME", k."PKEY_TYPE"
    FROM unnest(CAST(:dbs AS text[]), CAST(:tbls AS text[])) AS w(db, tbl)
    JOIN "DBS" d ON d."NAME" = w.db@IN_HIVE@
    JOIN "TBLS" t ON t."DB_ID" = d."DB_ID" AND t."TBL_NAME" = w.tbl
    LEFT JOIN "PARTITION_KEYS" k ON k."TBL_ID" = t."TBL_ID"
    ORDER BY w.db, w.tbl, k."INTEGER_IDX"
"""
# The look-ups and the feed travel as one text parameter each, records split by chr(30) and fields by chr(31)
# (control characters a partition value, an escaped name or an identifier never holds): a single literal that
# PostgreSQL parses in no time, where an array parameter reached it as ~3 MB of element literals to parse and plan.
_PG_RECORDS = (
    "(SELECT split_part(r, chr(31), 1) AS db, split_part(r, chr(31), 2) AS tbl, split_part(r, chr(31), 3) AS {value} "
    "FROM unnest(string_to_array(CAST(:{param} AS text), chr(30))) AS r) AS w"
)
_PG_TABLE = 'JOIN "DBS" d ON d."NAME" = w.db@IN_HIVE@ JOIN "TBLS" t ON t."DB_ID" = d."DB_ID" AND t."TBL_NAME" = w.tbl'
_PG_LOOKUPS = f"""
    SELECT 1 AS kind, p."PART_ID" AS part_id, w.db, w.tbl, p."PART_NAME"
    FROM {_PG_RECORDS.format(param="names", value="name")}
    {_PG_TABLE}
    JOIN "PARTITIONS" p ON p."TBL_ID" = t."TBL_ID" AND p."PART_NAME" = w.name
    UNION ALL
    SELECT 1, p."PART_ID", w.db, w.tbl, p."PART_NAME"
    FROM {_PG_RECORDS.format(param="prefixes", value="prefix")}
    {_PG_TABLE}
    JOIN "PARTITIONS" p ON p."TBL_ID" = t."TBL_ID" AND starts_with(p."PART_NAME", w.prefix)
"""
# The feed: partitions above the high-water mark, and the gaps below it (index reads of the primary key). At the
# first statement there is no mark yet: it starts :span ids below the highest, and a row of kind 2 says where.
# Rows of kind 3 are the witnesses, ids read again as they are now (primary-key probes): one gone or changed means
# the database went back (see partition_feed). @SEQUENCE@ is the id sequence's row of kind 4 (see _SEQUENCE), or
# nothing on a metastore without SEQUENCE_TABLE. The reissued ids travel with the gaps (see _statement).
_PG_START = 'COALESCE(CAST(:after AS bigint), (SELECT COALESCE(max("PART_ID"), 0) FROM "PARTITIONS") - :span)'
_PG_DELIVERED = f"""
    SELECT 0, p."PART_ID", @DB_NAME@, t."TBL_NAME", p."PART_NAME"
    FROM "PARTITIONS" p JOIN "TBLS" t ON t."TBL_ID" = p."TBL_ID" JOIN "DBS" d ON d."DB_ID" = t."DB_ID"
    WHERE p."PART_ID" > {_PG_START}
        OR p."PART_ID" = ANY(CAST(string_to_array(CAST(:gaps AS text), ',') AS bigint[]))
    UNION ALL
    SELECT 2, {_PG_START}, NULL, NULL, NULL
    UNION ALL
    SELECT 3, p."PART_ID", @DB_NAME@, t."TBL_NAME", p."PART_NAME"
    FROM "PARTITIONS" p JOIN "TBLS" t ON t."TBL_ID" = p."TBL_ID" JOIN "DBS" d ON d."DB_ID" = t."DB_ID"
    WHERE p."PART_ID" = ANY(CAST(string_to_array(CAST(:witnesses AS text), ',') AS bigint[]))@SEQUENCE@
"""

# MySQL/MariaDB: the same statements over JSON_TABLE rows, one JSON array parameter of [db, table, value] per list.
_MYSQL_ROWS = (
    "JSON_TABLE({param}, '$[*]' COLUMNS (db VARCHAR(128) CHARACTER SET utf8mb4 PATH '$[0]', "
    "tbl VARCHAR(256) CHARACTER SET utf8mb4 PATH '$[1]', {value} VARCHAR(767) {charset} PATH '$[2]')) AS w"
)
_MYSQL_TABLE = (
    "JOIN `DBS` d ON d.`NAME` = w.db AND CAST(d.`NAME` AS BINARY) = CAST(w.db AS BINARY)@IN_HIVE@ "
    "JOIN `TBLS` t ON t.`DB_ID` = d.`DB_ID` AND t.`TBL_NAME` = w.tbl "
    "AND CAST(t.`TBL_NAME` AS BINARY) = CAST(w.tbl AS BINARY)"
)
_MYSQL_TYPES = f"""
    SELECT w.db, w.tbl, k.`PKEY_NAME`, k.`PKEY_TYPE`
    FROM {_MYSQL_ROWS.format(param=":tables", value="unused", charset="CHARACTER SET utf8mb4")}
    {_MYSQL_TABLE}
    LEFT JOIN `PARTITION_KEYS` k ON k.`TBL_ID` = t.`TBL_ID`
    ORDER BY w.db, w.tbl, k.`INTEGER_IDX`
"""
# The exact names' column is utf8mb3_bin, as `metastore start` makes PART_NAME, so the unique index can serve it.
_MYSQL_LOOKUPS = f"""
    SELECT 1 AS kind, p.`PART_ID` AS part_id, w.db, w.tbl, p.`PART_NAME`
    FROM {_MYSQL_ROWS.format(param=":names", value="name", charset="CHARACTER SET utf8mb3 COLLATE utf8mb3_bin")}
    {_MYSQL_TABLE}
    JOIN `PARTITIONS` p ON p.`TBL_ID` = t.`TBL_ID` AND p.`PART_NAME` = w.name
        AND CAST(p.`PART_NAME` AS BINARY) = CAST(w.name AS BINARY)
    UNION ALL
    SELECT 1, p.`PART_ID`, w.db, w.tbl, p.`PART_NAME`
    FROM {_MYSQL_ROWS.format(param=":prefixes", value="prefix", charset="CHARACTER SET utf8mb4")}
    {_MYSQL_TABLE}
    JOIN `PARTITIONS` p ON p.`TBL_ID` = t.`TBL_ID`
        AND CAST(LEFT(p.`PART_NAME`, CHAR_LENGTH(w.prefix)) AS BINARY) = CAST(w.prefix AS BINARY)
"""
_MYSQL_START = "COALESCE(:after, (SELECT COALESCE(max(`PART_ID`), 0) FROM `PARTITIONS`) - :span)"
_MYSQL_DELIVERED = f"""
    SELECT 0, p.`PART_ID`, @DB_NAME@, t.`TBL_NAME`, p.`PART_NAME`
    FROM `PARTITIONS` p JOIN `TBLS` t ON t.`TBL_ID` = p.`TBL_ID` JOIN `DBS` d ON d.`DB_ID` = t.`DB_ID`
    WHERE p.`PART_ID` > {_MYSQL_START}
    UNION ALL
    SELECT 0, p.`PART_ID`, @DB_NAME@, t.`TBL_NAME`, p.`PART_NAME`
    FROM JSON_TABLE(:gaps, '$[*]' COLUMNS (id BIGINT PATH '$')) AS g
    JOIN `PARTITIONS` p ON p.`PART_ID` = g.id
    JOIN `TBLS` t ON t.`TBL_ID` = p.`TBL_ID` JOIN `DBS` d ON d.`DB_ID` = t.`DB_ID`
    UNION ALL
    SELECT 2, {_MYSQL_START}, NULL, NULL, NULL
    UNION ALL
    SELECT 3, p.`PART_ID`, @DB_NAME@, t.`TBL_NAME`, p.`PART_NAME`
    FROM JSON_TABLE(:witnesses, '$[*]' COLUMNS (id BIGINT PATH '$')) AS w
    JOIN `PARTITIONS` p ON p.`PART_ID` = w.id
    JOIN `TBLS` t ON t.`TBL_ID` = p.`TBL_ID` JOIN `DBS` d ON d.`DB_ID` = t.`DB_ID`@SEQUENCE@
"""
# DataNucleus's counter of PART_IDs: NEXT_VAL is above every id it handed out (a block at a time, see partition_feed).
SEQUENCE_NAME = "org.apache.hadoop.hive.metastore.model.MPartition"
_SEQUENCE = (
    "\n    UNION ALL\n    SELECT 4, (SELECT {q}NEXT_VAL{q} FROM {q}SEQUENCE_TABLE{q} "
    f"WHERE {{q}}SEQUENCE_NAME{{q}} = '{SEQUENCE_NAME}'), NULL, NULL, NULL"
)
# Seconds between two looks for SEQUENCE_TABLE while the metastore database has none (readable).
SEQUENCE_PROBE_SECONDS = 300.0
# Hive 3+ keys DBS by (NAME, CTLG_NAME) and may hold several catalogs (HDP 3: hive and spark, each with a `default`
# database). Only the default catalog is read, as the thrift backend reads it; Hive 2.3's DBS has no CTLG_NAME.
HIVE_CATALOG = "hive"
# PostgreSQL: seconds past ``metastore_timeout`` (the server's statement_timeout) that a statement's answer is awaited
# before the connection is shut down from this side (CallWatchdog): a live server's own timeout answers first; a
# connection that stalls without closing, whose answer never comes, fails here instead of waiting forever.
ANSWER_MARGIN = 1.0
# Whether DBS has CTLG_NAME, and whether SEQUENCE_TABLE is there to be read: the tables resolved as the statements
# resolve them (search_path; the connection's database).
_PROBE = {
    "postgresql": text(
        "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('\"DBS\"') "
        "AND attname = 'CTLG_NAME' AND NOT attisdropped), "
        "COALESCE(has_table_privilege(to_regclass('\"SEQUENCE_TABLE\"'), 'SELECT'), false)"
    ),
    "mysql": text(
        "SELECT EXISTS (SELECT 1 FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
        "AND TABLE_NAME = 'DBS' AND COLUMN_NAME = 'CTLG_NAME'), "
        "EXISTS (SELECT 1 FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
        "AND TABLE_NAME = 'SEQUENCE_TABLE' AND COLUMN_NAME = 'NEXT_VAL')"
    ),
}


def _catalog_variant(template: str, quote: str, catalogs: bool, sequence: bool) -> TextClause:
    """``template`` for a DBS with CTLG_NAME (``catalogs``: databases of the hive catalog only) or without, and
    with the id sequence's row (``sequence``: SEQUENCE_TABLE is there) or without."""
    name = f"d.{quote}NAME{quote}"
    in_hive = f"d.{quote}CTLG_NAME{quote} = '{HIVE_CATALOG}'"
    return text(
        template.replace("@IN_HIVE@", f" AND {in_hive}" if catalogs else "")
        .replace("@DB_NAME@", f"CASE WHEN {in_hive} THEN {name} END" if catalogs else name)
        .replace("@SEQUENCE@", _SEQUENCE.format(q=quote) if sequence else "")
    )


# The statements per (dialect, whether DBS has CTLG_NAME, whether SEQUENCE_TABLE is there): the column types, the
# look-ups only, the look-ups and the feed.
_STATEMENTS = {
    (dialect, catalogs, sequence): {
        kind: _catalog_variant(template, quote, catalogs, sequence)
        for kind, template in (("types", types), ("lookups", lookups), ("feed", lookups + " UNION ALL " + feed))
    }
    for dialect, quote, types, lookups, feed in (
        ("postgresql", '"', _TYPES, _PG_LOOKUPS, _PG_DELIVERED),
        ("mysql", "`", _MYSQL_TYPES, _MYSQL_LOOKUPS, _MYSQL_DELIVERED),
    )
    for catalogs in (False, True)
    for sequence in (False, True)
}
_RS, _US = chr(30), chr(31)
# MySQL error numbers that mean the server could not be reached or went away (2000+: the client's own).
_MYSQL_OUTAGES = (1040, 1053)


class MetastoreDbCatalog:
    """A BatchLister over a Hive metastore's PostgreSQL or MySQL database, shared by every round of one process."""

    def __init__(self, engine: Engine, feed: PartitionFeed | None = None) -> None:
        """Over ``engine``; following ``feed`` (see smartsensor.adapters.catalog.partition_feed) when given,
        else looking every due partition up in every round."""
        if engine.dialect.name not in ("postgresql", "mysql"):
            raise ValueError(
                f"the metastore_db catalog backend reads PostgreSQL and MySQL metastores, not {engine.dialect.name} "
                "(use catalog_backend = thrift)"
            )
        self.engine = engine
        self.mysql = engine.dialect.name == "mysql"
        self.statements = 0  # statements sent so far, the probes (CTLG_NAME, SEQUENCE_TABLE) aside (bench, tests)
        self.catalogs: bool | None = None  # whether DBS has CTLG_NAME (Hive 3+), probed with the first statement
        self.sequence: bool | None = None  # whether SEQUENCE_TABLE is readable: probed with it, and again while not
        self._probed_at = 0.0  # time.monotonic() of the last probe
        self.feed = feed
        self._lock = threading.Lock()  # one round's plan, statement and absorb at a time
        self.types = PartitionTypes(None, read_schema=self._read_schema, cast=python_cast_all, castable=python_castable)

    @classmethod
    def from_url(cls, url: str, timeout: float, feed: PartitionFeed | None = None) -> MetastoreDbCatalog:
        """A read-only pool of two connections to the metastore database at ``url``, following ``feed``. Each
        connection attempt and each statement waits at most ``timeout`` seconds (MySQL: read_timeout; PostgreSQL:
        the server's statement_timeout, and its answer at most ``ANSWER_MARGIN`` longer, on this side)."""
        parsed = normalize_url(url)
        connect: dict[str, Any] = {"connect_timeout": max(1, int(timeout))}
        options: dict[str, Any] = {}
        if parsed.get_backend_name() == "mysql":
            connect.update(
                read_timeout=max(1, int(timeout)),  # no server-side statement timeout MySQL and MariaDB share
                charset="utf8mb4",
                init_command="SET SESSION TRANSACTION READ ONLY",
            )
        else:
            connect["options"] = f"-c statement_timeout={int(timeout * 1000)}"
            options["postgresql_readonly"] = True
            if parsed.get_driver_name() == "psycopg2":  # libpq has no timeout on an answer (ANSWER_MARGIN)
                connect["connection_factory"] = guarded_connection_class(CallWatchdog(timeout + ANSWER_MARGIN))
        engine = create_engine(
            parsed, pool_size=2, max_overflow=0, pool_pre_ping=True, connect_args=connect, execution_options=options
        )
        return cls(engine, feed)

    def close(self) -> None:
        self.engine.dispose()

    # -- statements ------------------------------------------------------------------------------------

    def _rows(self, kind: str, what: str, **params: Any) -> list[Any]:
        """One read-only statement, of ``kind`` (see _STATEMENTS). A lost connection is a TransientCheckError;
        anything else the database refuses (not a metastore, a missing grant) a PermanentCheckError naming it."""
        self.statements += 1
        try:
            with self.engine.connect() as conn:
                self._probe(conn)
                return list(conn.execute(self.statement(kind), params))
        except DBAPIError as exc:
            reason = first_line(exc.orig if exc.orig is not None else exc)
            if exc.connection_invalidated or _is_outage(exc):
                raise TransientCheckError(f"metastore database unreachable {what}: {reason}") from exc
            raise PermanentCheckError(
                f"the metastore database refused {what} (is it a Hive metastore, with SELECT granted on DBS, TBLS, "
                f"PARTITION_KEYS and PARTITIONS?): {reason}"
            ) from exc
        except SQLAlchemyError as exc:
            raise TransientCheckError(f"metastore database unreachable {what}: {first_line(exc)}") from exc

    def _probe(self, conn: Connection) -> None:
        """Whether DBS has CTLG_NAME (once per process) and SEQUENCE_TABLE is readable (again every
        ``SEQUENCE_PROBE_SECONDS`` while it is not), on ``conn`` before a statement."""
        now = time.monotonic()
        if self.catalogs is not None and (self.sequence or now - self._probed_at < SEQUENCE_PROBE_SECONDS):
            return
        catalogs, sequence = conn.execute(_PROBE[self.engine.dialect.name]).one()
        if self.catalogs is None:
            self.catalogs = bool(catalogs)
        self.sequence = bool(sequence)
        self._probed_at = now

    def statement(self, kind: str) -> TextClause:
        """The statement of ``kind`` ("types", "lookups" or "feed": the look-ups and the feed) for this metastore's
        ``DBS``, with or without catalogs (without until the first statement has looked), and with the id
        sequence's row where SEQUENCE_TABLE is readable."""
        return _STATEMENTS[(self.engine.dialect.name, bool(self.catalogs), bool(self.sequence))][kind]

    def _types_of(self, tables: Sequence[TableName]) -> dict[TableName, dict[str, str] | None]:
        found: dict[TableName, dict[str, str] | None] = {key: None for key in tables}
        if self.mysql:
            tables_json = json.dumps([[db, t, ""] for db, t in tables], ensure_ascii=False)
            rows = self._rows("types", "reading partition columns", tables=tables_json)
        else:
            rows = self._rows(
                "types", "reading partition columns", dbs=[db for db, _ in tables], tbls=[t for _, t in tables]
            )
        for db, table, column, kind in rows:
            key = TableName(db, table)
            columns = found.get(key)
            if columns is None:
                columns = found[key] = {}
            if column is not None:
                columns[column.lower()] = kind.lower()
        return found

    # -- the PartitionLister ---------------------------------------------------------------------------

    def _read_schema(self, db: str, table: str) -> dict[str, str] | None:
        key = TableName(db, table)
        return self._types_of([key])[key]

    def list_rows(self, db: str, table: str, spec: dict[str, str], columns: dict[str, str]) -> list[str] | None:
        """The partition names of db.table starting with ``spec``'s leading columns (one statement)."""
        listings, _ = self.list_tables([ListingRequest(db, table, columns, (), dict(spec))])
        listing = listings[TableName(db, table)]
        if isinstance(listing, CheckError):
            raise listing
        return listing.names

    # -- the BatchLister -------------------------------------------------------------------------------

    def fetch_types(
        self, tables: Sequence[TableName]
    ) -> tuple[dict[TableName, dict[str, str] | None | CheckError], int]:
        """Every table's partition columns in one statement, into the types cache."""
        try:
            found = self._types_of(tables)
        except CheckError as exc:
            return {key: exc for key in tables}, 1
        for (db, table), columns in found.items():
            if columns is not None:
                self.types.store(db, table, columns)
            elif self.feed is not None:
                with self._lock:
                    self.feed.forget(db, table)
        return dict(found), 1

    def list_tables(
        self, requests: Sequence[ListingRequest]
    ) -> tuple[dict[TableName, AnsweredListing | CheckError], int]:
        """Every request's names in one statement: exact checks by name, partial ones (and a request without
        checks: its ``narrowing``) by the start of the name. Following the feed, only what is not covered yet is
        looked up, and the statement also reads the partitions added since the last one; when it finds that the
        database went back (the feed's reset), the round's statement runs once more, on a fresh coverage."""
        listings: dict[TableName, AnsweredListing | CheckError] = {}
        with self._lock:
            feed = self.feed if self.feed is not None else PartitionFeed()  # without the feed: a fresh memory
            made, failed = self._read_round(feed, requests)
            if failed is not None:
                return {r.table_name: failed for r in requests}, made
            for request in requests:
                listings[request.table_name] = feed.listing(request)
        return listings, made

    def list_changed(
        self, tables: Sequence[tuple[TableName, dict[str, str]]], seen: dict[TableName, int]
    ) -> tuple[dict[TableName, list[str] | CheckError], int]:
        """Every partition name of those of ``tables`` (each with its partition column types) whose partitions the
        feed saw change since ``seen`` says they were last read (absent: never; with the feed keeping ids, a name
        with another id than before is a change too), in one statement; ``seen`` is brought up to date. Without the
        feed, every table's names. Tables left out have the names they had: the cost of a call is the round's one
        statement and the names that came in, not the tables asked about (a table's first read, and every read
        after a verify or a reset, give all its names)."""
        requests = [ListingRequest(db, table, columns, (), {}) for (db, table), columns in tables]
        out: dict[TableName, list[str] | CheckError] = {}
        with self._lock:
            feed = self.feed if self.feed is not None else PartitionFeed()
            made, failed = self._read_round(feed, requests)
            if failed is not None:
                return {r.table_name: failed for r in requests}, made
            for request in requests:
                key = request.table_name
                serial = feed.changed_at(request.db, request.table)
                if self.feed is not None and serial is not None and seen.get(key) == serial:
                    continue
                out[key] = feed.listing(request).names
                if serial is not None:
                    seen[key] = serial
        return out, made

    def partition_ids(self, db: str, table: str) -> dict[str, int]:
        """The PART_ID of each partition of db.table the feed knows present, where it keeps them (else {})."""
        with self._lock:
            return self.feed.partition_ids(db, table) if self.feed is not None else {}

    def _read_round(self, feed: PartitionFeed, requests: Sequence[ListingRequest]) -> tuple[int, CheckError | None]:
        """The round's statement for ``requests`` into ``feed`` (once more when it finds the database went back:
        the feed's reset); the statements made, and the error that stopped them. Under the lock."""
        made = 0
        for _ in range(2):
            made += 1
            read = feed.plan(requests)
            if self.feed is None:
                read = FeedRead(read.names, read.prefixes)
            try:
                rows = self._statement(read, len(requests))
            except CheckError as exc:
                return made, exc
            start = next((part_id for kind, part_id, *_ in rows if kind == 2), None)
            sequence = next((part_id for kind, part_id, *_ in rows if kind == 4), None)
            feed.absorb(
                read,
                ((part_id, db, table, name) for kind, part_id, db, table, name in rows if kind == 0),
                ((db, table, name, part_id) for kind, part_id, db, table, name in rows if kind == 1),
                start,
                ((part_id, db, table, name) for kind, part_id, db, table, name in rows if kind == 3),
                None if sequence is None else int(sequence),
            )
            if not feed.reset_pending:
                break
        return made, None

    def _statement(self, read: FeedRead, count: int) -> list[Any]:
        """The round's one statement: ``read``'s look-ups, and the feed when it follows it."""
        what = f"listing {count} table(s)"
        params: dict[str, Any] = {}
        if read.follow:
            params["after"] = read.after
            params["span"] = read.span
            by_id = sorted({*read.gaps, *read.reissued})  # both read by id, one primary-key probe each
            params["gaps"] = json.dumps(by_id) if self.mysql else ",".join(map(str, by_id))
            params["witnesses"] = json.dumps(list(read.witnesses)) if self.mysql else ",".join(map(str, read.witnesses))
        if self.mysql:
            params["names"] = json.dumps([list(n) for n in read.names], ensure_ascii=False)
            params["prefixes"] = json.dumps([list(p) for p in read.prefixes], ensure_ascii=False)
        else:
            params["names"] = _RS.join(_US.join(n) for n in read.names)
            params["prefixes"] = _RS.join(_US.join(p) for p in read.prefixes)
        return self._rows("feed" if read.follow else "lookups", what, **params)


def _is_outage(exc: DBAPIError) -> bool:
    """Whether the database could not be reached or went away (not a refusal of the statement)."""
    if exc.orig is not None and type(exc.orig).__module__.startswith("pymysql"):
        number = exc.orig.args[0] if exc.orig.args and isinstance(exc.orig.args[0], int) else None
        return number is None or number >= 2000 or number in _MYSQL_OUTAGES
    code = getattr(exc.orig, "pgcode", None)
    return code is None or code.startswith(("08", "57P"))  # connection exceptions; admin shutdown
