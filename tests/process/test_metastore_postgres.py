"""The metastore service on PostgreSQL (``[metastore] database_url``), as production metastores run.

The first start on an empty database creates the schema with SchemaTool (the upper-case, quoted tables and the
columns ``metastore_db_setup`` documents for code that reads them directly); Spark lands the shared catalog cases
through the service; the thrift backend answers the shared matrix as on Derby; the partitions are rows of
PostgreSQL; a restart on the same database keeps them and skips SchemaTool. Cost: two JVM starts, one SchemaTool
run and one Spark subprocess (~8 s). The driver and database errors need no JVM.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from smartsensor.adapters import metastore_db_setup, metastore_service
from smartsensor.adapters.catalog.batch import BatchChecker
from smartsensor.adapters.catalog.thrift_catalog import ThriftCatalog
from smartsensor.adapters.metastore_service_process import free_port
from smartsensor.config import Config
from tests.support.catalog_cases import CASES, DB, ODD_VALUES, outcome
from tests.support.metastore_service import run_spark, service_cfg
from tests.support.pg import needs_test_pg

pytestmark = pytest.mark.slow

LAND = r"""
from smartsensor.config import load_config
from smartsensor.adapters.spark import get_spark
from tests.support.catalog_cases import SETUP
spark = get_spark(load_config())
for sql in SETUP:
    spark.sql(sql)
"""

# The partitions of one table of the `backends` database, read from the metastore's own tables.
PARTITIONS_SQL = """
SELECT p."PART_NAME", v."PART_KEY_VAL", k."PKEY_NAME"
FROM "PARTITIONS" p
JOIN "TBLS" t ON t."TBL_ID" = p."TBL_ID"
JOIN "DBS" d ON d."DB_ID" = t."DB_ID"
JOIN "PARTITION_KEY_VALS" v ON v."PART_ID" = p."PART_ID"
JOIN "PARTITION_KEYS" k ON k."TBL_ID" = t."TBL_ID" AND k."INTEGER_IDX" = v."INTEGER_IDX"
WHERE d."NAME" = :db AND t."TBL_NAME" = :table
"""


def schema_tool_runs(cfg: Config) -> int:
    """How many times a start ran SchemaTool (each run is logged with its command line)."""
    return (cfg.home / "metastore_service" / "metastore.log").read_text().count(f" {metastore_db_setup.SCHEMA_TOOL} ")


def sql(url: str, statement: str, **params: Any) -> list[tuple[Any, ...]]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.execute(text(statement), params)]
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def landed(pg_service: tuple[Config, str]) -> tuple[Config, str]:
    """The shared catalog cases' tables and partitions, created through Spark on the PostgreSQL-backed service."""
    cfg, _ = pg_service
    run_spark(cfg, LAND)
    return pg_service


@needs_test_pg
def test_the_first_start_creates_the_schema_hive_expects(pg_service: tuple[Config, str]) -> None:
    cfg, url = pg_service
    st = metastore_service.status(cfg)
    assert st.running and st.database == cfg.metastore_service_db.shown
    assert st.database.startswith("postgresql://postgres@127.0.0.1:")
    assert schema_tool_runs(cfg) == 1
    service = cfg.home / "metastore_service"
    assert not (service / "metastore_db").exists()  # no Derby
    assert (service / "conf" / "hive-site.xml").stat().st_mode & 0o777 == 0o600
    assert not (service / "conf" / "schematool.properties").exists()

    tables = {
        name for (name,) in sql(url, "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")
    }
    assert set(metastore_db_setup.TABLES) <= tables, set(metastore_db_setup.TABLES) - tables
    assert tables - set(metastore_db_setup.TABLES) <= {"SEQUENCE_TABLE"}  # DataNucleus's id counters, the service's own
    for table, columns in metastore_db_setup.READER_COLUMNS.items():
        got = sql(
            url,
            "SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' AND table_name = :t "
            "ORDER BY ordinal_position",
            t=table,
        )
        assert tuple(c for (c,) in got) == columns, table
    # Upper case and quoted: the unquoted (folded to lower case) name is another, missing table.
    assert sql(url, "SELECT to_regclass('partitions'), to_regclass('\"PARTITIONS\"') IS NOT NULL") == [(None, True)]


@needs_test_pg
def test_the_catalog_matrix_answers_through_thrift_and_the_rows_are_in_postgres(landed: tuple[Config, str]) -> None:
    cfg, url = landed
    checker = BatchChecker(lister=ThriftCatalog(cfg.metastore_uris, 5.0), spark_provider=lambda: pytest.fail("Spark"))
    answers = checker.check_all(c for c, _ in CASES)
    wrong = [(c, want, outcome(answers[c])) for c, want in CASES if outcome(answers[c]) != want]
    assert not wrong, wrong

    [(count,)] = sql(
        url,
        'SELECT count(*) FROM "PARTITIONS" p JOIN "TBLS" t ON t."TBL_ID" = p."TBL_ID" '
        'JOIN "DBS" d ON d."DB_ID" = t."DB_ID" WHERE d."NAME" = :db AND t."TBL_NAME" IN (:esc, :typed, :daily)',
        db=DB,
        esc="esc",
        typed="typed",
        daily="daily",
    )
    # esc's partitions, typed's one and daily's one (the service is the run's: test_metastore_db_backend's feed test
    # adds one to empty)
    assert count == len(ODD_VALUES) + 2
    esc = sql(url, PARTITIONS_SQL, db=DB, table="esc")
    assert {value for _, value, key in esc if key == "ds"} == set(ODD_VALUES)  # raw values
    assert ("ds=a%2Fb/hr=00", "a/b", "ds") in esc  # the name escaped as SHOW PARTITIONS prints it
    assert sorted(sql(url, PARTITIONS_SQL, db=DB, table="typed")) == [
        ("ds=2026-01-05/hr=0", "0", "hr"),
        ("ds=2026-01-05/hr=0", "2026-01-05", "ds"),
    ]


@needs_test_pg
def test_a_restart_on_the_same_database_keeps_the_catalog_without_schema_tool(landed: tuple[Config, str]) -> None:
    cfg, _ = landed
    first = metastore_service.status(cfg).pid
    assert metastore_service.stop(cfg)
    started = time.monotonic()
    st = metastore_service.start(cfg)
    took = time.monotonic() - started
    assert st.running and st.pid != first
    assert schema_tool_runs(cfg) == 1, "the second start created the schema again"
    listed = BatchChecker(lister=ThriftCatalog(cfg.metastore_uris, 5.0)).list_partitions(DB, "typed", {})
    assert listed == [{"ds": "2026-01-05", "hr": "0"}]
    assert took < cfg.get("metastore", "start_timeout"), took


# -- errors, before any JVM ------------------------------------------------------------------------


def test_a_missing_jdbc_driver_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metastore_db_setup, "JDBC_JAR", tmp_path / "nope" / "postgresql.jar")
    cfg = service_cfg(tmp_path / "home", free_port(), metastore__database_url="postgresql://u:pw@127.0.0.1:1/db")
    with pytest.raises(metastore_service.MetastoreServiceError, match="libpostgresql-jdbc-java") as err:
        metastore_service.start(cfg)
    assert "database_url empty for embedded Derby" in str(err.value)
    assert metastore_service.status(cfg).pid is None


def test_an_unreachable_database_is_a_clear_error_without_the_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metastore_db_setup, "JDBC_JAR", tmp_path / "postgresql.jar")  # present: the database is checked
    metastore_db_setup.JDBC_JAR.write_bytes(b"")
    dead = free_port()
    url = f"postgresql://someone:s3cret-pw@127.0.0.1:{dead}/hive"
    cfg = service_cfg(tmp_path / "home", free_port(), metastore__database_url=url)
    with pytest.raises(metastore_service.MetastoreServiceError) as err:
        metastore_service.start(cfg)
    message = str(err.value)
    assert message.startswith(f"cannot use the metastore database postgresql://someone@127.0.0.1:{dead}/hive: ")
    assert "s3cret" not in message
    assert metastore_service.status(cfg).pid is None
