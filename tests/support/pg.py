"""The throwaway PostgreSQL server of ./scripts/test.sh: a database per test, and marks for tests that need it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
from sqlalchemy import Engine, create_engine, text

from scripts.harness.databases import drop_database, new_database
from smartsensor.adapters.metastore_service_process import free_port
from smartsensor.adapters.sql.engine import make_engine

PG_URL = os.environ.get("SMARTSENSOR_TEST_PG_URL")
PG_ADMIN_URL = os.environ.get("SMARTSENSOR_TEST_PG_ADMIN_URL")


def new_pg_database(admin_url: str | None = None, template: str | None = None) -> tuple[str, str]:
    """A new database ``t_<12 hex digits>`` on the test server (or on the server of ``admin_url``): its name and URL.
    Empty, or a copy of the database named ``template`` (nobody connected to it meanwhile)."""
    return new_database(admin_url or PG_ADMIN_URL or "", "t", template)


def drop_pg_database(name: str) -> None:
    """Drop database ``name`` of the test server, its sessions ended first."""
    drop_database(PG_ADMIN_URL or "", name)


@contextmanager
def pg_engine() -> Iterator[tuple[Engine, str]]:
    """An engine on a new, empty database of the test server, and its URL; disposed and dropped at the end."""
    name, url = new_pg_database()
    engine = make_engine(url)
    try:
        yield engine, url
    finally:
        engine.dispose()
        drop_pg_database(name)


@contextmanager
def database_unreachable(name: str) -> Iterator[None]:
    """Database ``name`` of the test server refuses new connections and loses those it has (what its clients see
    while it fails over), until the block ends."""
    if not re.fullmatch(r"t_[0-9a-f]{12}", name):
        raise ValueError(f"not a database of new_pg_database: {name!r}")
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")  # type: ignore[arg-type]  # set: PG tests only
    try:
        with admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false'))
            conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"), {"n": name})
        yield
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true'))
        admin.dispose()


# Without ./scripts/test.sh (plain `pytest`) there is no throwaway PostgreSQL server: its cases are skipped.
# tests/conftest.py gives this mark to every test that asks for pg_url or private_pg too.
needs_test_pg = pytest.mark.skipif(
    not PG_ADMIN_URL or "SMARTSENSOR_TEST_PG_OPTS" not in os.environ,
    reason="needs the throwaway PostgreSQL of ./scripts/test.sh",
)
# For tests of a Postgres-only mechanism (row locks, session settings): db_url on Postgres alone.
postgres_only = pytest.mark.parametrize("db_url", [pytest.param("postgres", marks=needs_test_pg)], indirect=True)


class PrivateServer:
    """A PostgreSQL server of one test's own, for a test that stops and starts it (an outage): the run's shared
    server stays up for the tests running beside it on other workers. Built from the shared server's binaries and
    options (``initdb`` on a fresh folder, its own port); ``close`` stops it and deletes its folder."""

    def __init__(self) -> None:
        self.bin = os.environ["SMARTSENSOR_TEST_PG_BIN"]
        self.run_as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        # Not below pytest's tmp_path: as root the server runs as user postgres, who cannot enter root's folders.
        self.folder = Path(tempfile.mkdtemp(prefix="smartsensor-pg-own."))
        self.folder.chmod(0o755)
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres")
        self.port = free_port()
        shared = os.environ["SMARTSENSOR_TEST_PG_OPTS"]
        self.opts = re.sub(r"-k \S+", f"-k {self.folder}", re.sub(r"-p \d+", f"-p {self.port}", shared))
        self._pg("initdb", "-D", str(self.folder / "data"), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
        self.start()
        self.admin_url = f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/postgres"

    def _pg(self, program: str, *args: str, check: bool = True) -> None:
        subprocess.run([*self.run_as, f"{self.bin}/{program}", *args], check=check, capture_output=True, timeout=120)

    def start(self) -> None:
        """Start the server (waits until it takes connections)."""
        data, log = str(self.folder / "data"), str(self.folder / "server.log")
        self._pg("pg_ctl", "-D", data, "-l", log, "-w", "-t", "60", "start", "-o", self.opts)

    def stop(self) -> None:
        """Stop the server as an operator would (fast: open sessions are ended)."""
        self._pg("pg_ctl", "-D", str(self.folder / "data"), "-w", "-t", "60", "stop", "-m", "fast")

    def new_database(self) -> str:
        """A new, empty database on this server: its URL."""
        return new_pg_database(self.admin_url)[1]

    def close(self) -> None:
        self._pg("pg_ctl", "-D", str(self.folder / "data"), "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.folder, ignore_errors=True)
