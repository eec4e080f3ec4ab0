"""Helpers for tests that touch the real Hive metastore through the session's SparkSession."""

from __future__ import annotations

from typing import Any

from smartsensor.sensors.partitions import quote_identifier, sql_string_literal


def create_table(spark: Any, db: str, table: str, keys: tuple[str, ...] = ("ds", "hr")) -> None:
    cols = ", ".join(f"{quote_identifier(k)} STRING" for k in keys)
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {quote_identifier(db)}.{quote_identifier(table)} (x INT) "
        f"PARTITIONED BY ({cols}) STORED AS PARQUET"
    )


def land(spark: Any, db: str, table: str, **spec: str) -> None:
    """Add one partition (metadata only: what sensors look at)."""
    parts = ", ".join(f"{quote_identifier(k)} = {sql_string_literal(v)}" for k, v in spec.items())
    spark.sql(f"ALTER TABLE {quote_identifier(db)}.{quote_identifier(table)} ADD IF NOT EXISTS PARTITION ({parts})")
