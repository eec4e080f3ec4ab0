"""The throwaway MariaDB server of ./scripts/test.sh (scripts/mysql.sh, standing in for MySQL): a database per
test module."""

from __future__ import annotations

import os

import pytest

from scripts.harness.databases import drop_database, new_database

MYSQL_URL = os.environ.get("SMARTSENSOR_TEST_MYSQL_URL")
# Without ./scripts/test.sh (plain `pytest`) there is no throwaway MariaDB server: its cases are skipped.
needs_test_mysql = pytest.mark.skipif(not MYSQL_URL, reason="needs the throwaway MariaDB of ./scripts/test.sh")


def new_mysql_database() -> tuple[str, str]:
    """A new, empty database on the test server: its name and ``mysql://`` URL."""
    return new_database(MYSQL_URL or "", "t")


def drop_mysql_database(name: str) -> None:
    """Drop database ``name`` of the test server."""
    drop_database(MYSQL_URL or "", name)
