"""The metastore-database backend on a real PostgreSQL-backed metastore service: the shared catalog matrix
(escaping, unicode, typed columns, partial specs, missing and unpartitioned tables) answered from the metastore's
own tables exactly as the thrift backend answers it over the same service, in one statement per round."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from smartsensor.adapters.catalog.batch import BatchChecker
from smartsensor.adapters.catalog.metastore_db import MetastoreDbCatalog
from smartsensor.adapters.catalog.thrift_catalog import ThriftCatalog
from smartsensor.config import Config
from smartsensor.sensors.errors import TransientCheckError
from tests.support.catalog_cases import CASES, DB, outcome
from tests.support.common import ROOT
from tests.support.metastore_service import pg_service_fixture, spark_env  # noqa: F401 - fixture

pytestmark = pytest.mark.slow

LAND = r"""
from smartsensor.config import load_config
from smartsensor.adapters.spark import get_spark
from tests.support.catalog_cases import SETUP
spark = get_spark(load_config())
for sql in SETUP:
    spark.sql(sql)
"""


@pytest.fixture(scope="module")
def landed(pg_service: tuple[Config, str]) -> tuple[Config, str]:
    """The matrix's tables and partitions, landed through Spark on the PostgreSQL-backed service."""
    service, _ = pg_service
    proc = subprocess.run(
        [sys.executable, "-c", LAND], env=spark_env(service), cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return pg_service


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
    dead = MetastoreDbCatalog.from_url("postgresql://nobody:x@127.0.0.1:9/hive", 2.0)
    got = BatchChecker(lister=dead).check_all([c for c, _ in CASES[:3]])
    assert all(isinstance(v, TransientCheckError) for v in got.values()), got
    dead.close()
    foreign = MetastoreDbCatalog.from_url(url.rsplit("/", 1)[0] + "/postgres", 5.0)  # a database without DBS
    got = BatchChecker(lister=foreign).check_all([c for c, _ in CASES[:3]])
    assert {type(v).__name__ for v in got.values()} == {"PermanentCheckError"}, got
    assert "is it a Hive metastore" in str(next(iter(got.values())))
    foreign.close()
