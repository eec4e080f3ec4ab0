"""The metastore-database backend on a real metastore service on PostgreSQL, then on MySQL (./scripts/test.sh's
MariaDB): the shared catalog matrix (escaping, unicode, typed columns, partial specs, missing and unpartitioned
tables) answered from the metastore's own tables exactly as the thrift backend answers it over the same service, in
one statement per round."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from smartsensor.adapters import metastore_db_setup, metastore_service
from smartsensor.adapters.catalog.batch import BatchChecker
from smartsensor.adapters.catalog.metastore_db import MetastoreDbCatalog
from smartsensor.adapters.catalog.partition_feed import PartitionFeed
from smartsensor.adapters.catalog.thrift_catalog import ThriftCatalog
from smartsensor.adapters.sql.engine import init_db, make_engine, normalize_url
from smartsensor.adapters.sql.registration_store import SqlRegistrationStore
from smartsensor.config import Config
from smartsensor.sensors import HivePartitionSensor, NamedHivePartitionSensor
from smartsensor.sensors.checks import PartitionCheck
from smartsensor.sensors.errors import TransientCheckError
from smartsensor.standalone.registration import register
from tests.support.catalog_cases import CASES, DB, outcome
from tests.support.common import DAY, ROOT, make_cfg
from tests.support.metastore_service import run_spark
from tests.support.mysql import needs_test_mysql
from tests.support.pg import needs_test_pg
from tests.support.proc_helpers import cli_env, run_cli

pytestmark = pytest.mark.slow
USES_SERVICES_GROUP = True  # its module fixture asks for pg_service or mysql_service by name (tests/conftest.py)

LAND = r"""
from smartsensor.config import load_config
from smartsensor.adapters.spark import get_spark
from tests.support.catalog_cases import SETUP
spark = get_spark(load_config())
for sql in SETUP:
    spark.sql(sql)
"""
ADD = """
from smartsensor.config import load_config
from smartsensor.adapters.spark import get_spark
get_spark(load_config()).sql("{sql}")
"""


# Per database: its service fixture, a URL that reaches no server, and a database of the same server without DBS.
DATABASES = {
    "postgresql": ("pg_service", "postgresql://nobody:x@127.0.0.1:9/hive", "postgres"),
    "mysql": ("mysql_service", "mysql://nobody:x@127.0.0.1:9/hive", "mysql"),
}


@pytest.fixture(
    scope="module",
    params=[
        pytest.param("postgresql", marks=needs_test_pg),
        # CI: MySQL's metastore database through the oracle (test_metastore_oracle.py) and the schema test below
        pytest.param("mysql", marks=[needs_test_mysql, pytest.mark.extended]),
    ],
)
def landed(request: pytest.FixtureRequest) -> tuple[Config, str]:
    """The matrix's tables and partitions, landed through Spark on the service on PostgreSQL, then MySQL."""
    started: tuple[Config, str] = request.getfixturevalue(DATABASES[request.param][0])
    service, _ = started
    run_spark(service, LAND)
    return started


def answers(checker: BatchChecker) -> list[Any]:
    got = checker.check_all(c for c, _ in CASES)
    return [outcome(got[c]) for c, _ in CASES]


def test_the_database_backend_answers_the_matrix_as_thrift_does(landed: tuple[Config, str]) -> None:
    service, url = landed
    expected = [want for _, want in CASES]
    over_thrift = answers(BatchChecker(lister=ThriftCatalog(service.metastore_uris, 5.0)))
    catalog = MetastoreDbCatalog.from_url(url, 10.0)
    try:
        first = BatchChecker(lister=catalog)
        from_db = answers(first)
        assert (first.schema_calls, first.catalog_calls, catalog.statements) == (1, 1, 2)  # whatever the tables
        again = BatchChecker(lister=catalog)
        assert answers(again) == from_db
        # Types are cached, but the two missing tables are looked for again (they may have been created since).
        assert (again.schema_calls, again.catalog_calls, catalog.statements) == (1, 1, 4)
        existing = BatchChecker(lister=catalog)
        existing.check_all(c for c, _ in CASES if c.table not in ("missing", "flat") and c.db == DB)
        assert (existing.schema_calls, existing.catalog_calls, catalog.statements) == (0, 1, 5)  # one statement
    finally:
        catalog.close()
    wrong = [(c, want, got) for (c, want), got in zip(CASES, from_db, strict=True) if got != want]
    assert not wrong, wrong
    assert from_db == over_thrift == expected


def test_following_the_feed_answers_the_matrix_and_sees_what_the_service_adds(landed: tuple[Config, str]) -> None:
    """With ``[catalog] metastore_db_feed`` (the default): the matrix answered as by look-ups, then a partition
    added through the real metastore service (its own PART_ID) is read by the next round's one statement."""
    service, url = landed
    expected = [want for _, want in CASES]
    catalog = MetastoreDbCatalog.from_url(url, 10.0, PartitionFeed())
    arrives = PartitionCheck(DB, "empty", (("ds", "arrives"),), True)
    try:
        first = BatchChecker(lister=catalog)
        assert answers(first) == expected
        assert first.check_all([arrives]) == {arrives: False}
        assert (first.schema_calls, catalog.statements) == (1, 3)  # the types, then a statement per check_all
        assert answers(BatchChecker(lister=catalog)) == expected
        assert catalog.statements == 5  # the feed, and the two missing tables' types again
        run_spark(service, ADD.format(sql=f"ALTER TABLE {DB}.empty ADD PARTITION (ds='arrives')"))
        after = BatchChecker(lister=catalog)
        assert after.check_all([arrives]) == {arrives: True}
        assert (after.schema_calls, after.catalog_calls, catalog.statements) == (0, 1, 6)
        # The matrix's partial check ds=1 gives every column of empty: a name looked up, as ds=arrives is.
        assert catalog.feed is not None and catalog.feed.covered(DB, "empty")[0] == {"ds=1", "ds=arrives"}
        # DataNucleus's SEQUENCE_TABLE, MPartition's row: read with the statement, above every id handed out.
        assert catalog.sequence is True and catalog.feed.resets == 0
        assert catalog.feed.sequence is not None and catalog.feed.high_water is not None
        assert catalog.feed.sequence > catalog.feed.high_water and not catalog.feed.reissued
    finally:
        catalog.close()


def test_names_are_looked_up_and_partial_specs_listed_by_their_leading_columns(landed: tuple[Config, str]) -> None:
    _, url = landed
    catalog = MetastoreDbCatalog.from_url(url, 10.0)
    try:
        checker = BatchChecker(lister=catalog)
        assert checker.list_partitions(DB, "esc", {"ds": "10:00"}) == [{"ds": "10:00", "hr": "00"}]
        assert checker.list_partitions(DB, "esc", {"hr": "00"}) is not None  # no leading column: the whole table
        assert len(checker.list_partitions(DB, "esc", {}) or []) == 10
        assert checker.list_partitions(DB, "missing", {}) is None
    finally:
        catalog.close()


def test_an_unreachable_or_foreign_database_is_an_error_per_check_not_a_crash(landed: tuple[Config, str]) -> None:
    _, url = landed
    _, dead_url, other = DATABASES["mysql" if url.startswith("mysql") else "postgresql"]
    dead = MetastoreDbCatalog.from_url(dead_url, 2.0)
    got = BatchChecker(lister=dead).check_all([c for c, _ in CASES[:3]])
    assert all(isinstance(v, TransientCheckError) for v in got.values()), got
    dead.close()
    foreign = MetastoreDbCatalog.from_url(url.rsplit("/", 1)[0] + "/" + other, 5.0)  # a database without DBS
    got = BatchChecker(lister=foreign).check_all([c for c, _ in CASES[:3]])
    assert {type(v).__name__ for v in got.values()} == {"PermanentCheckError"}, got
    assert "is it a Hive metastore" in str(next(iter(got.values())))
    foreign.close()


def test_a_worker_on_the_database_backend_marks_its_tasks(landed: tuple[Config, str], tmp_path: Path) -> None:
    """`smartsensor worker --once` with catalog_backend = metastore_db: typed, escaped and partial checks on two
    tables answered by one listing statement, the tasks marked success."""
    _, url = landed
    home, db_url = tmp_path / "home", f"sqlite:///{tmp_path}/w.db"
    cfg = make_cfg(home, db_url, smart_sensor__catalog_backend="metastore_db", catalog__metastore_db_url=url)
    engine = make_engine(db_url)
    init_db(engine)
    sensors = [
        NamedHivePartitionSensor(task_id="typed", partition_names=[f"{DB}.typed/ds=2026-1-5/hr=00"]),
        NamedHivePartitionSensor(task_id="escaped", partition_names=[f"{DB}.esc/ds=a%2Fb/hr=00"]),
        HivePartitionSensor(task_id="partial", table=f"{DB}.esc", partition={"ds": "ü日本"}),
    ]
    register(SqlRegistrationStore(engine), [(f"dag_{s.task_id}", s) for s in sensors], DAY, cfg)
    engine.dispose()
    env = cli_env(
        home,
        db_url,
        SMARTSENSOR__SMART_SENSOR__CATALOG_BACKEND="metastore_db",
        SMARTSENSOR__CATALOG__METASTORE_DB_URL=url,
        PYTHONPATH=str(ROOT),
    )
    run = run_cli(["worker", "--once", "--json", "--shard-min", "0", "--shard-max", "10000"], env, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    rounds = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert sum(r.get("marked", {}).get("success", 0) for r in rounds) == len(sensors), rounds
    assert sum(r["catalog_calls"] for r in rounds) == 1, rounds  # two tables, one statement


@needs_test_mysql
def test_on_mysql_the_schema_has_hive_names_and_unicode_partition_columns(
    mysql_service: tuple[Config, str],
) -> None:
    """SchemaTool made Hive's tables on MariaDB: the plain upper-case names and the columns metastore_db_setup lists,
    latin1 binary tables with the partition-value columns in utf8mb3; a restart finds them and skips SchemaTool."""
    cfg, url = mysql_service
    assert metastore_service.status(cfg).database == cfg.metastore_service_db.shown
    engine = create_engine(normalize_url(url))
    try:
        with engine.connect() as conn:
            tables = {
                name
                for (name,) in conn.execute(
                    text("SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()")
                )
            }
            assert set(metastore_db_setup.TABLES) <= tables, set(metastore_db_setup.TABLES) - tables
            for table, columns in metastore_db_setup.READER_COLUMNS.items():
                got = conn.execute(
                    text(
                        "SELECT column_name FROM information_schema.columns WHERE table_schema = DATABASE() "
                        "AND table_name = :t ORDER BY ordinal_position"
                    ),
                    {"t": table},
                )
                assert tuple(name for (name,) in got) == columns, table
            charsets: dict[str, str] = dict(
                conn.execute(
                    text(
                        "SELECT CONCAT(table_name, '.', column_name), collation_name FROM information_schema.columns "
                        "WHERE table_schema = DATABASE() AND table_name IN ('PARTITIONS', 'DBS')"
                        " AND column_name IN ('PART_NAME', 'NAME')"
                    )
                ).all()
            )
            assert charsets == {"PARTITIONS.PART_NAME": "utf8mb3_bin", "DBS.NAME": "latin1_bin"}
    finally:
        engine.dispose()
    log = cfg.home / "metastore_service" / "metastore.log"
    assert log.read_text().count(f" {metastore_db_setup.SCHEMA_TOOL} ") == 1
    metastore_service.stop(cfg)
    metastore_service.start(cfg)
    assert log.read_text().count(f" {metastore_db_setup.SCHEMA_TOOL} ") == 1  # found the tables, skipped SchemaTool
