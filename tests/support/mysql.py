"""The throwaway MariaDB server of ./scripts/test.sh (scripts/mysql.sh, standing in for MySQL): a database per
test module."""

from __future__ import annotations

import os
import uuid

import pytest
from sqlalchemy import create_engine, text

MYSQL_URL = os.environ.get("SMARTSENSOR_TEST_MYSQL_URL")
# Without ./scripts/test.sh (plain `pytest`) there is no throwaway MariaDB server: its cases are skipped.
needs_test_mysql = pytest.mark.skipif(not MYSQL_URL, reason="needs the throwaway MariaDB of ./scripts/test.sh")


def new_mysql_database() -> tuple[str, str]:
    """A new, empty database on the test server: its name and ``mysql://`` URL."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(_pymysql(MYSQL_URL or ""), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE `{name}`"))
    admin.dispose()
    return name, (MYSQL_URL or "").rsplit("/", 1)[0] + "/" + name


def drop_mysql_database(name: str) -> None:
    admin = create_engine(_pymysql(MYSQL_URL or ""), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS `{name}`"))
    admin.dispose()


def _pymysql(url: str) -> str:
    return url.replace("mysql://", "mysql+pymysql://", 1)
