"""A Hive metastore service for tests: its Config, the environment of a Spark process that uses it, and
fixtures: ``service`` on embedded Derby (``derby_service``), and ``pg_service`` and ``mysql_service`` on their own
database of ./scripts/test.sh's throwaway PostgreSQL and MariaDB (standing in for MySQL), as production metastores
run. All three are session-scoped in tests/conftest.py: one per test process, shared by every module (each uses
databases and tables of its own names, or lands the same idempotent ones); tests/conftest.py's ``xdist_group``
keeps the tests of ``pg_service`` and ``mysql_service`` in one worker, so that each starts once a run."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

from smartsensor.adapters import metastore_service
from smartsensor.adapters.metastore_service_process import free_port
from smartsensor.config import Config
from tests.support.common import ROOT, make_cfg
from tests.support.mysql import MYSQL_URL, drop_mysql_database, new_mysql_database
from tests.support.pg import PG_ADMIN_URL, drop_pg_database, new_pg_database

# A loaded CI machine has taken up to ~60 s for a first start on MySQL (schema included): the default deadline.
START_TIMEOUT = "300"


def service_cfg(home: Path, port: int, **overrides: str) -> Config:
    return make_cfg(
        home,
        "sqlite://",
        metastore__port=str(port),
        metastore__start_timeout=START_TIMEOUT,
        spark__metastore_uris=f"thrift://127.0.0.1:{port}",
        **overrides,
    )


def spark_env(cfg: Config) -> dict[str, str]:
    """Environment of a Spark subprocess: same home, metastore URI and warehouse as the service."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SMARTSENSOR__")}
    env.pop("SMARTSENSOR_CONFIG", None)
    env.update(
        SMARTSENSOR_HOME=str(cfg.home),
        SPARK_LOCAL_IP="127.0.0.1",
        PYTHONPATH=str(ROOT),
        SMARTSENSOR__SPARK__METASTORE_URIS=cfg.get("spark", "metastore_uris"),
        SMARTSENSOR__SPARK__WAREHOUSE_DIR=cfg.get("spark", "warehouse_dir"),
        SMARTSENSOR__SPARK__CONF="spark.driver.memory=512m",
    )
    return env


def run_spark(cfg: Config, code: str) -> str:
    """Run ``code`` in a Python subprocess with Spark's environment for the service of ``cfg`` (``spark_env``);
    assert it succeeded and return its standard output."""
    proc = subprocess.run(
        [sys.executable, "-c", code], env=spark_env(cfg), cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@contextlib.contextmanager
def derby_service(home: Path) -> Iterator[Config]:
    """A running metastore service on embedded Derby under ``home``, stopped whatever happened (tests/conftest.py's
    session-scoped ``service``: one per test process, for every module that uses it)."""
    cfg = service_cfg(home, free_port())
    try:
        metastore_service.start(cfg)
        yield cfg
    finally:
        metastore_service.stop(cfg)


@contextlib.contextmanager
def service_on(home: Path, database: tuple[str, str], drop: Callable[[str], None]) -> Iterator[tuple[Config, str]]:
    """A running metastore service keeping its tables in ``database`` (name, URL; new and empty: the first start
    creates the schema); stopped, and the database dropped with ``drop``, whatever happened."""
    name, url = database
    cfg = service_cfg(home, free_port(), metastore__database_url=url)
    try:
        metastore_service.start(cfg)
        yield cfg, url
    finally:
        try:
            metastore_service.stop(cfg)
        finally:
            drop(name)


@pytest.fixture(scope="session", name="pg_service")
def pg_service_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Config, str]]:
    """One running metastore service for the test process on a new, empty PostgreSQL database (the first start
    creates the schema): its Config and the database's SQLAlchemy URL. The service is stopped and the database
    dropped when the process ends, whatever happened. A test using it carries ``tests.support.pg.needs_test_pg``."""
    if not PG_ADMIN_URL or "SMARTSENSOR_TEST_PG_OPTS" not in os.environ:
        raise RuntimeError("no throwaway PostgreSQL: mark the test with tests.support.pg.needs_test_pg")
    with service_on(tmp_path_factory.mktemp("metastore-pg-home"), new_pg_database(), drop_pg_database) as running:
        yield running


@pytest.fixture(scope="session", name="mysql_service")
def mysql_service_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Config, str]]:
    """As ``pg_service``, on a new, empty database of ./scripts/test.sh's throwaway MariaDB: its Config and the
    database's ``mysql://`` URL. A test using it carries ``tests.support.mysql.needs_test_mysql``."""
    if not MYSQL_URL:
        raise RuntimeError("no throwaway MariaDB: mark the test with tests.support.mysql.needs_test_mysql")
    home = tmp_path_factory.mktemp("metastore-mysql-home")
    with service_on(home, new_mysql_database(), drop_mysql_database) as running:
        yield running
