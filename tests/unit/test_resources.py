"""Files the code points at by path exist where it looks (a module move must take its files along)."""

from __future__ import annotations

from smartsensor.adapters.spark import LOG4J2_CONFIG
from smartsensor.adapters.sql.engine import MIGRATIONS_DIR


def test_spark_log_config_is_beside_the_spark_adapter() -> None:
    assert LOG4J2_CONFIG.is_file(), LOG4J2_CONFIG


def test_migrations_are_where_alembic_is_pointed() -> None:
    assert (MIGRATIONS_DIR / "env.py").is_file() and any((MIGRATIONS_DIR / "versions").glob("0001_*.py"))
