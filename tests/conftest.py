"""Shared fixtures: a metadata DB per test on SQLite and on the throwaway PostgreSQL server, one
SparkSession for the whole run, and a unique Hive database per test."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
from sqlalchemy import create_engine, text

from smartsensor.config import Config, load_config
from smartsensor.adapters.sql.engine import init_db, make_engine

PG_URL = os.environ.get("SMARTSENSOR_TEST_PG_URL")
PG_ADMIN_URL = os.environ.get("SMARTSENSOR_TEST_PG_ADMIN_URL")


def _new_pg_database() -> tuple[str, str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return name, PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name


def _drop_pg_database(name: str) -> None:
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


# Without ./scripts/test.sh (plain `pytest`) there is no throwaway PostgreSQL server: its cases are skipped.
needs_test_pg = pytest.mark.skipif(not PG_ADMIN_URL or "SMARTSENSOR_TEST_PG_OPTS" not in os.environ,
                                   reason="needs the throwaway PostgreSQL of ./scripts/test.sh")
# For tests of a Postgres-only mechanism (row locks, session settings): db_url on Postgres alone.
postgres_only = pytest.mark.parametrize("db_url", [pytest.param("postgres", marks=needs_test_pg)], indirect=True)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=needs_test_pg)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty metadata database URL: SQLite file, or a new database on the test server."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'meta.db'}"
        return
    name, url = _new_pg_database()
    try:
        yield url
    finally:
        _drop_pg_database(name)


def make_cfg(home: Path, db_url: str, **overrides: str) -> Config:
    """A Config for tests: home folder, DB URL, and SMARTSENSOR__SECTION__KEY-style overrides."""
    env = {"SMARTSENSOR_HOME": str(home), "SMARTSENSOR__CORE__SQL_ALCHEMY_CONN": db_url}
    for key, value in overrides.items():
        section, name = key.split("__")
        env[f"SMARTSENSOR__{section.upper()}__{name.upper()}"] = value
    return load_config(environ=env)


@pytest.fixture
def cfg(tmp_path: Path, db_url: str) -> Config:
    return make_cfg(tmp_path / "home", db_url)


@pytest.fixture
def engine(cfg: Config) -> Iterator[Any]:
    eng = make_engine(cfg.sql_alchemy_conn)
    init_db(eng)
    yield eng
    eng.dispose()


@pytest.fixture(scope="session", autouse=True)
def no_orphaned_metastores() -> Iterator[None]:
    """Whatever a test did (or a timeout cut short), no metastore JVM started by this run outlives it."""
    yield
    from smartsensor.adapters import metastore
    left = metastore.terminate_started_here()
    if left:
        print(f"\nstopped {len(left)} metastore JVM(s) left running by tests: {left}")


@pytest.fixture(scope="session")
def spark_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("spark-home")


@pytest.fixture(scope="session")
def spark(spark_home: Path) -> Any:
    """The one SparkSession of the test run (embedded Derby metastore in a temp folder)."""
    from smartsensor.adapters.spark import get_spark
    cfg = load_config(environ={"SMARTSENSOR_HOME": str(spark_home)})
    return get_spark(cfg)


@pytest.fixture
def hive_db(spark: Any) -> Iterator[str]:
    """A unique Hive database for one test, dropped with CASCADE afterwards."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    spark.sql(f"CREATE DATABASE {name}")
    yield name
    spark.sql(f"DROP DATABASE IF EXISTS {name} CASCADE")
