"""The throwaway PostgreSQL server of ./scripts/test.sh: a database per test, and marks for tests that need it."""

from __future__ import annotations

import os
import uuid

import pytest
from sqlalchemy import create_engine, text

PG_URL = os.environ.get("SMARTSENSOR_TEST_PG_URL")
PG_ADMIN_URL = os.environ.get("SMARTSENSOR_TEST_PG_ADMIN_URL")


def new_pg_database() -> tuple[str, str]:
    """A new, empty database on the test server: its name and URL."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")  # type: ignore[arg-type]  # set: PG tests only
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return name, PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name


def drop_pg_database(name: str) -> None:
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")  # type: ignore[arg-type]  # set: PG tests only
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


# Without ./scripts/test.sh (plain `pytest`) there is no throwaway PostgreSQL server: its cases are skipped.
HAS_TEST_PG = bool(PG_ADMIN_URL) and "SMARTSENSOR_TEST_PG_OPTS" in os.environ
NO_TEST_PG = "needs the throwaway PostgreSQL of ./scripts/test.sh"
needs_test_pg = pytest.mark.skipif(not HAS_TEST_PG, reason=NO_TEST_PG)
# For tests of a Postgres-only mechanism (row locks, session settings): db_url on Postgres alone.
postgres_only = pytest.mark.parametrize("db_url", [pytest.param("postgres", marks=needs_test_pg)], indirect=True)
