"""The metastore-database catalog backend: partition names read from the Hive metastore's own database, one
statement per round for every due check of the process, whatever the number of tables.

Production metastores keep their catalog in PostgreSQL or MySQL; the thrift service answers from it one
table per call. This backend reads the same rows directly, read-only, in the schema Hive 2.3 through 4 share
(upper-case, quoted identifiers):

- ``"DBS"("DB_ID", "NAME")`` and ``"TBLS"("TBL_ID", "DB_ID", "TBL_NAME")``: names as Hive stores them, lower-case;
- ``"PARTITION_KEYS"("TBL_ID", "PKEY_NAME", "PKEY_TYPE", "INTEGER_IDX")``: the partition columns, in order;
- ``"PARTITIONS"("PART_ID", "TBL_ID", "PART_NAME")``: each partition's name, escaped as ``SHOW PARTITIONS``
  prints it (``ds=10%3A00/hr=0``), unique per table (Hive's index ``UNIQUEPARTITION``).

A round makes at most two statements: the column types of tables it has not cached (``fetch_types``), then
``list_tables``, where an exact check is its partition's name looked up through that unique index (the values
cast as Spark stores them, then escaped as Hive does) and a partial one lists the partitions whose name starts
with the leading columns it gives (all of the table's when it gives none of them). Tables and names go in as
array parameters: no user text is ever part of the SQL. The grant it needs: SELECT on those four tables.

On MySQL and MariaDB (``mysql://`` URLs, PyMySQL) the same two statements take one JSON parameter per list,
unpacked by ``JSON_TABLE`` (MySQL 8, MariaDB 10.6+), with the identifiers unquoted upper case (``DBS``,
``PART_NAME``). Names are compared byte for byte (``CAST(... AS BINARY)``) whatever the columns' collation (Hive's
MySQL scripts make them latin1_bin; ``smartsensor metastore start`` makes PART_NAME utf8mb3_bin), so a name
matches exactly as on PostgreSQL; the sessions are read-only (``SET SESSION TRANSACTION READ ONLY``).
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from smartsensor.adapters.catalog.partition_types import PartitionTypes
from smartsensor.adapters.catalog.python_casts import python_cast_all, python_castable
from smartsensor.adapters.sql.engine import normalize_url
from smartsensor.ports import ListingRequest
from smartsensor.sensors.checks import PartitionCheck
from smartsensor.sensors.errors import CheckError, PermanentCheckError, TransientCheckError, first_line
from smartsensor.sensors.partitions import escape_partition_value

Key = tuple[str, str]

_TYPES = text(
    """
    SELECT w.db, w.tbl, k."PKEY_NAME", k."PKEY_TYPE"
    FROM unnest(CAST(:dbs AS text[]), CAST(:tbls AS text[])) AS w(db, tbl)
    JOIN "DBS" d ON d."NAME" = w.db
    JOIN "TBLS" t ON t."DB_ID" = d."DB_ID" AND t."TBL_NAME" = w.tbl
    LEFT JOIN "PARTITION_KEYS" k ON k."TBL_ID" = t."TBL_ID"
    ORDER BY w.db, w.tbl, k."INTEGER_IDX"
    """
)
_LISTING = text(
    """
    SELECT w.db, w.tbl, p."PART_NAME"
    FROM unnest(CAST(:names_db AS text[]), CAST(:names_tbl AS text[]), CAST(:names AS text[])) AS w(db, tbl, name)
    JOIN "DBS" d ON d."NAME" = w.db
    JOIN "TBLS" t ON t."DB_ID" = d."DB_ID" AND t."TBL_NAME" = w.tbl
    JOIN "PARTITIONS" p ON p."TBL_ID" = t."TBL_ID" AND p."PART_NAME" = w.name
    UNION ALL
    SELECT w.db, w.tbl, p."PART_NAME"
    FROM unnest(CAST(:prefix_db AS text[]), CAST(:prefix_tbl AS text[]), CAST(:prefixes AS text[]))
        AS w(db, tbl, prefix)
    JOIN "DBS" d ON d."NAME" = w.db
    JOIN "TBLS" t ON t."DB_ID" = d."DB_ID" AND t."TBL_NAME" = w.tbl
    JOIN "PARTITIONS" p ON p."TBL_ID" = t."TBL_ID" AND starts_with(p."PART_NAME", w.prefix)
    """
)

# MySQL/MariaDB: the same statements over JSON_TABLE rows, one JSON array parameter of [db, table, value] per list.
_MYSQL_ROWS = (
    "JSON_TABLE({param}, '$[*]' COLUMNS (db VARCHAR(128) CHARACTER SET utf8mb4 PATH '$[0]', "
    "tbl VARCHAR(256) CHARACTER SET utf8mb4 PATH '$[1]', {value} VARCHAR(767) {charset} PATH '$[2]')) AS w"
)
_MYSQL_TABLE = (
    "JOIN `DBS` d ON d.`NAME` = w.db AND CAST(d.`NAME` AS BINARY) = CAST(w.db AS BINARY) "
    "JOIN `TBLS` t ON t.`DB_ID` = d.`DB_ID` AND t.`TBL_NAME` = w.tbl "
    "AND CAST(t.`TBL_NAME` AS BINARY) = CAST(w.tbl AS BINARY)"
)
_MYSQL_TYPES = text(
    f"""
    SELECT w.db, w.tbl, k.`PKEY_NAME`, k.`PKEY_TYPE`
    FROM {_MYSQL_ROWS.format(param=":tables", value="unused", charset="CHARACTER SET utf8mb4")}
    {_MYSQL_TABLE}
    LEFT JOIN `PARTITION_KEYS` k ON k.`TBL_ID` = t.`TBL_ID`
    ORDER BY w.db, w.tbl, k.`INTEGER_IDX`
    """
)
# The exact names' column is utf8mb3_bin, as `metastore start` makes PART_NAME, so the unique index can serve it.
_MYSQL_LISTING = text(
    f"""
    SELECT w.db, w.tbl, p.`PART_NAME`
    FROM {_MYSQL_ROWS.format(param=":names", value="name", charset="CHARACTER SET utf8mb3 COLLATE utf8mb3_bin")}
    {_MYSQL_TABLE}
    JOIN `PARTITIONS` p ON p.`TBL_ID` = t.`TBL_ID` AND p.`PART_NAME` = w.name
        AND CAST(p.`PART_NAME` AS BINARY) = CAST(w.name AS BINARY)
    UNION ALL
    SELECT w.db, w.tbl, p.`PART_NAME`
    FROM {_MYSQL_ROWS.format(param=":prefixes", value="prefix", charset="CHARACTER SET utf8mb4")}
    {_MYSQL_TABLE}
    JOIN `PARTITIONS` p ON p.`TBL_ID` = t.`TBL_ID`
        AND CAST(LEFT(p.`PART_NAME`, CHAR_LENGTH(w.prefix)) AS BINARY) = CAST(w.prefix AS BINARY)
    """
)
# MySQL error numbers that mean the server could not be reached or went away (2000+: the client's own).
_MYSQL_OUTAGES = (1040, 1053)


def partition_name(columns: Sequence[str], spec: dict[str, str]) -> str:
    """The stored name of the partition ``spec`` gives every column of (``ds=10%3A00/hr=0``)."""
    return "/".join(f"{escape_partition_value(c)}={escape_partition_value(spec[c])}" for c in columns)


def leading_prefix(columns: Sequence[str], spec: dict[str, str]) -> str:
    """The start every matching partition's name has: the leading columns ``spec`` gives, each followed by
    ``/`` ("" when it does not give the first column: every partition of the table)."""
    parts = []
    for column in columns:
        if column not in spec:
            break
        parts.append(f"{escape_partition_value(column)}={escape_partition_value(spec[column])}/")
    return "".join(parts)


class MetastoreDbCatalog:
    """A BatchLister over a Hive metastore's PostgreSQL or MySQL database, shared by every round of one process."""

    def __init__(self, engine: Engine) -> None:
        if engine.dialect.name not in ("postgresql", "mysql"):
            raise ValueError(
                f"the metastore_db catalog backend reads PostgreSQL and MySQL metastores, not {engine.dialect.name} "
                "(use catalog_backend = thrift)"
            )
        self.engine = engine
        self.mysql = engine.dialect.name == "mysql"
        self.statements = 0  # statements sent so far (the bench and the tests count them)
        self.types = PartitionTypes(None, read_schema=self._read_schema, cast=python_cast_all, castable=python_castable)

    @classmethod
    def from_url(cls, url: str, timeout: float) -> MetastoreDbCatalog:
        """A read-only pool of two connections to the metastore database at ``url``."""
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
        engine = create_engine(
            parsed, pool_size=2, max_overflow=0, pool_pre_ping=True, connect_args=connect, execution_options=options
        )
        return cls(engine)

    def close(self) -> None:
        self.engine.dispose()

    # -- statements ------------------------------------------------------------------------------------

    def _rows(self, statement: Any, what: str, **params: Any) -> list[Any]:
        """One read-only statement. A lost connection is a TransientCheckError; anything else the database
        refuses (not a metastore, a missing grant) a PermanentCheckError naming it."""
        self.statements += 1
        try:
            with self.engine.connect() as conn:
                return list(conn.execute(statement, params))
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

    def _types_of(self, tables: Sequence[Key]) -> dict[Key, dict[str, str] | None]:
        found: dict[Key, dict[str, str] | None] = {key: None for key in tables}
        if self.mysql:
            tables_json = json.dumps([[db, t, ""] for db, t in tables], ensure_ascii=False)
            rows = self._rows(_MYSQL_TYPES, "reading partition columns", tables=tables_json)
        else:
            rows = self._rows(
                _TYPES, "reading partition columns", dbs=[db for db, _ in tables], tbls=[t for _, t in tables]
            )
        for db, table, column, kind in rows:
            columns = found.get((db, table))
            if columns is None:
                columns = found[(db, table)] = {}
            if column is not None:
                columns[column.lower()] = kind.lower()
        return found

    # -- the PartitionLister ---------------------------------------------------------------------------

    def _read_schema(self, db: str, table: str) -> dict[str, str] | None:
        return self._types_of([(db, table)])[(db, table)]

    def list_rows(self, db: str, table: str, spec: dict[str, str], columns: dict[str, str]) -> list[str] | None:
        """The partition names of db.table starting with ``spec``'s leading columns (one statement)."""
        listings, _ = self.list_tables([ListingRequest(db, table, columns, (), dict(spec))])
        listing = listings[(db, table)]
        if isinstance(listing, CheckError):
            raise listing
        return listing

    # -- the BatchLister -------------------------------------------------------------------------------

    def fetch_types(self, tables: Sequence[Key]) -> tuple[dict[Key, dict[str, str] | None | CheckError], int]:
        """Every table's partition columns in one statement, into the types cache."""
        try:
            found = self._types_of(tables)
        except CheckError as exc:
            return {key: exc for key in tables}, 1
        for (db, table), columns in found.items():
            if columns is not None:
                self.types.store(db, table, columns)
        return dict(found), 1

    def list_tables(self, requests: Sequence[ListingRequest]) -> tuple[dict[Key, list[str] | None | CheckError], int]:
        """Every request's names in one statement: exact checks by name, partial ones (and a request without
        checks: its ``narrowing``) by the start of the name."""
        names: list[tuple[str, str, str]] = []
        prefixes: list[tuple[str, str, str]] = []
        for request in requests:
            order = list(request.columns)
            checks: Sequence[PartitionCheck] = request.checks
            if not checks:
                prefixes.append((request.db, request.table, leading_prefix(order, request.narrowing)))
            for check in checks:
                spec = dict(check.spec)
                if check.exact and set(spec) == set(order):
                    names.append((request.db, request.table, partition_name(order, spec)))
                else:
                    prefixes.append((request.db, request.table, leading_prefix(order, spec)))
        listings: dict[Key, list[str] | None | CheckError] = {(r.db, r.table): [] for r in requests}
        try:
            rows = self._listing(names, prefixes, len(requests))
        except CheckError as exc:
            return {key: exc for key in listings}, 1
        seen: dict[Key, set[str]] = {key: set() for key in listings}
        for db, table, name in rows:
            if name not in seen[(db, table)]:  # a name may match both an exact and a partial check
                seen[(db, table)].add(name)
                listing = listings[(db, table)]
                assert isinstance(listing, list)
                listing.append(name)
        return listings, 1

    def _listing(
        self, names: list[tuple[str, str, str]], prefixes: list[tuple[str, str, str]], count: int
    ) -> list[Any]:
        what = f"listing {count} table(s)"
        if self.mysql:
            return self._rows(
                _MYSQL_LISTING,
                what,
                names=json.dumps([list(n) for n in names], ensure_ascii=False),
                prefixes=json.dumps([list(p) for p in prefixes], ensure_ascii=False),
            )
        return self._rows(
            _LISTING,
            what,
            names_db=[n[0] for n in names],
            names_tbl=[n[1] for n in names],
            names=[n[2] for n in names],
            prefix_db=[p[0] for p in prefixes],
            prefix_tbl=[p[1] for p in prefixes],
            prefixes=[p[2] for p in prefixes],
        )


def _is_outage(exc: DBAPIError) -> bool:
    """Whether the database could not be reached or went away (not a refusal of the statement)."""
    if exc.orig is not None and type(exc.orig).__module__.startswith("pymysql"):
        number = exc.orig.args[0] if exc.orig.args and isinstance(exc.orig.args[0], int) else None
        return number is None or number >= 2000 or number in _MYSQL_OUTAGES
    code = getattr(exc.orig, "pgcode", None)
    return code is None or code.startswith(("08", "57P"))  # connection exceptions; admin shutdown
