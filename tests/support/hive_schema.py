"""The tables of a Hive metastore's database that the metastore-database backend reads (``DBS``, ``TBLS``,
``PARTITION_KEYS``, ``PARTITIONS``, with Hive's names, keys and unique index, and DataNucleus's ``SEQUENCE_TABLE``),
on the test PostgreSQL or MariaDB server, written to directly: partitions added with the ids a test chooses (out of
order, as the metastore commits them), and dropped, and the id sequence's row set as a test says. The real metastore
service writes the same rows in the process tier's tests.

By default ``DBS`` is Hive 2.3's, keyed by ``NAME``; with ``catalogs`` it is Hive 3's and 4's, keyed by
(``NAME``, ``CTLG_NAME``), so that two catalogs (HDP 3's ``hive`` and ``spark``) can each have a database of the
same name. Without ``sequence`` there is no ``SEQUENCE_TABLE`` (as before a metastore's first write)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Engine

_PG = [
    'CREATE TABLE "DBS" ("DB_ID" bigint PRIMARY KEY, "NAME" varchar(128) UNIQUE)',
    'CREATE TABLE "TBLS" ("TBL_ID" bigint PRIMARY KEY, "DB_ID" bigint REFERENCES "DBS", "TBL_NAME" varchar(256),'
    ' UNIQUE ("TBL_NAME", "DB_ID"))',
    'CREATE TABLE "PARTITION_KEYS" ("TBL_ID" bigint REFERENCES "TBLS", "PKEY_NAME" varchar(128),'
    ' "PKEY_TYPE" varchar(767), "INTEGER_IDX" bigint, PRIMARY KEY ("TBL_ID", "PKEY_NAME"))',
    'CREATE TABLE "PARTITIONS" ("PART_ID" bigint PRIMARY KEY, "TBL_ID" bigint REFERENCES "TBLS",'
    ' "PART_NAME" varchar(767), "CREATE_TIME" bigint, CONSTRAINT "UNIQUEPARTITION" UNIQUE ("PART_NAME", "TBL_ID"))',
]
_MYSQL = [
    "CREATE TABLE DBS (DB_ID bigint PRIMARY KEY, NAME varchar(128) UNIQUE) CHARACTER SET latin1 COLLATE latin1_bin",
    "CREATE TABLE TBLS (TBL_ID bigint PRIMARY KEY, DB_ID bigint, TBL_NAME varchar(256), UNIQUE (TBL_NAME, DB_ID))"
    " CHARACTER SET latin1 COLLATE latin1_bin",
    "CREATE TABLE PARTITION_KEYS (TBL_ID bigint, PKEY_NAME varchar(128), PKEY_TYPE varchar(767), INTEGER_IDX bigint,"
    " PRIMARY KEY (TBL_ID, PKEY_NAME)) CHARACTER SET latin1 COLLATE latin1_bin",
    "CREATE TABLE PARTITIONS (PART_ID bigint PRIMARY KEY, TBL_ID bigint,"
    " PART_NAME varchar(767) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin, CREATE_TIME bigint,"
    " UNIQUE KEY UNIQUEPARTITION (PART_NAME, TBL_ID)) CHARACTER SET latin1 COLLATE latin1_bin",
]
# DataNucleus's id counters (as DataNucleus creates the table for Hive 2.3's package.jdo, datanucleus1 identifiers):
# a row per model class, NEXT_VAL where its next block of ids starts. PARTITIONS' row is MPartition's.
_PG_SEQUENCE = 'CREATE TABLE "SEQUENCE_TABLE" ("SEQUENCE_NAME" varchar(255) PRIMARY KEY, "NEXT_VAL" bigint NOT NULL)'
_MYSQL_SEQUENCE = (
    "CREATE TABLE SEQUENCE_TABLE (SEQUENCE_NAME varchar(255) PRIMARY KEY, NEXT_VAL bigint NOT NULL)"
    " CHARACTER SET latin1 COLLATE latin1_bin"
)
PARTITION_SEQUENCE = "org.apache.hadoop.hive.metastore.model.MPartition"


# Hive 3's DBS (hive-schema-3.1.0.*.sql): the catalog's name beside the database's, the two unique together.
_PG_DBS_3 = (
    'CREATE TABLE "DBS" ("DB_ID" bigint PRIMARY KEY, "NAME" varchar(128), "CTLG_NAME" varchar(256) DEFAULT \'hive\''
    ' NOT NULL, CONSTRAINT "UNIQUE_DATABASE" UNIQUE ("NAME", "CTLG_NAME"))'
)
_MYSQL_DBS_3 = (
    "CREATE TABLE DBS (DB_ID bigint PRIMARY KEY, NAME varchar(128), CTLG_NAME varchar(256) NOT NULL DEFAULT 'hive',"
    " UNIQUE KEY UNIQUE_DATABASE (NAME, CTLG_NAME)) CHARACTER SET latin1 COLLATE latin1_bin"
)
HIVE = "hive"  # the default catalog


class HiveSchema:
    """A Hive-shaped metastore database a test writes to: tables and partitions with chosen ids (in the ``hive``
    catalog unless told; another catalog only with ``catalogs``)."""

    def __init__(self, engine: Engine, catalogs: bool = False, sequence: bool = True) -> None:
        self.engine = engine
        self.mysql = engine.dialect.name == "mysql"
        self.catalogs = catalogs
        self.sequence = sequence
        ddl = list(_MYSQL if self.mysql else _PG)
        if catalogs:
            ddl[0] = _MYSQL_DBS_3 if self.mysql else _PG_DBS_3
        if sequence:
            ddl.append(_MYSQL_SEQUENCE if self.mysql else _PG_SEQUENCE)
        with engine.begin() as conn:
            for statement in ddl:
                conn.execute(text(statement))
        self._tables: dict[tuple[str, str, str], int] = {}  # (catalog, db, table) → TBL_ID
        self._dbs: dict[tuple[str, str], int] = {}  # (catalog, db) → DB_ID

    def _sql(self, statement: str) -> Any:
        return text(statement.replace('"', "`") if self.mysql else statement)

    def create_table(self, db: str, table: str, columns: dict[str, str], catalog: str = HIVE) -> None:
        """A table with these partition columns (in order), its database created on first use."""
        if catalog != HIVE and not self.catalogs:
            raise ValueError("a catalog other than hive needs HiveSchema(catalogs=True): Hive 2.3 has none")
        with self.engine.begin() as conn:
            if (catalog, db) not in self._dbs:
                db_id = self._dbs[(catalog, db)] = len(self._dbs) + 1
                if self.catalogs:
                    conn.execute(
                        self._sql('INSERT INTO "DBS" ("DB_ID", "NAME", "CTLG_NAME") VALUES (:i, :n, :c)'),
                        {"i": db_id, "n": db, "c": catalog},
                    )
                else:
                    conn.execute(
                        self._sql('INSERT INTO "DBS" ("DB_ID", "NAME") VALUES (:i, :n)'), {"i": db_id, "n": db}
                    )
            tbl_id = self._tables[(catalog, db, table)] = len(self._tables) + 1
            conn.execute(
                self._sql('INSERT INTO "TBLS" ("TBL_ID", "DB_ID", "TBL_NAME") VALUES (:i, :d, :n)'),
                {"i": tbl_id, "d": self._dbs[(catalog, db)], "n": table},
            )
            for idx, (name, kind) in enumerate(columns.items()):
                conn.execute(
                    self._sql(
                        'INSERT INTO "PARTITION_KEYS" ("TBL_ID", "PKEY_NAME", "PKEY_TYPE", "INTEGER_IDX") '
                        "VALUES (:t, :n, :k, :i)"
                    ),
                    {"t": tbl_id, "n": name, "k": kind, "i": idx},
                )

    def add(self, db: str, table: str, name: str, part_id: int, catalog: str = HIVE) -> None:
        """Commit partition ``name`` (escaped, as Hive stores it) of db.table with id ``part_id``."""
        with self.engine.begin() as conn:
            conn.execute(
                self._sql(
                    'INSERT INTO "PARTITIONS" ("PART_ID", "TBL_ID", "PART_NAME", "CREATE_TIME") VALUES (:i, :t, :n, 0)'
                ),
                {"i": part_id, "t": self._tables[(catalog, db, table)], "n": name},
            )

    def drop(self, db: str, table: str, name: str, catalog: str = HIVE) -> None:
        """Drop partition ``name`` of db.table."""
        with self.engine.begin() as conn:
            conn.execute(
                self._sql('DELETE FROM "PARTITIONS" WHERE "TBL_ID" = :t AND "PART_NAME" = :n'),
                {"t": self._tables[(catalog, db, table)], "n": name},
            )

    def set_sequence(self, next_val: int | None) -> None:
        """Commit the id sequence's row of PARTITIONS (MPartition) as ``next_val`` (None: no row, as before the
        metastore's first partition or after a failover that lost its creation)."""
        with self.engine.begin() as conn:
            conn.execute(
                self._sql('DELETE FROM "SEQUENCE_TABLE" WHERE "SEQUENCE_NAME" = :s'), {"s": PARTITION_SEQUENCE}
            )
            if next_val is not None:
                conn.execute(
                    self._sql('INSERT INTO "SEQUENCE_TABLE" ("SEQUENCE_NAME", "NEXT_VAL") VALUES (:s, :v)'),
                    {"s": PARTITION_SEQUENCE, "v": next_val},
                )

    def clear_partitions(self) -> None:
        """Drop every partition, and the id sequence's row (a fresh start for the next example)."""
        with self.engine.begin() as conn:
            conn.execute(self._sql('DELETE FROM "PARTITIONS"'))
            if self.sequence:
                conn.execute(self._sql('DELETE FROM "SEQUENCE_TABLE"'))
