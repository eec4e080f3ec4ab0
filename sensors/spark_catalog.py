"""The Spark catalog backend's partition listing: ``SHOW PARTITIONS`` through the process's SparkSession."""

from __future__ import annotations

from typing import Any, Callable

from smartsensor.sensors.catalog_errors import classify_error
from smartsensor.sensors.errors import PermanentCheckError, TransientCheckError, first_line
from smartsensor.sensors.partition_types import PartitionTypes, partition_types_for
from smartsensor.sensors.partitions import quote_identifier, sql_string_literal


class SparkLister:
    """A PartitionLister over one SparkSession (its column types cached per session)."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.types: PartitionTypes = partition_types_for(spark)

    def list_rows(self, db: str, table: str, spec: dict[str, str],
                  columns: Callable[[], dict[str, str] | None]) -> list[str] | None:
        """``SHOW PARTITIONS db.t PARTITION (k='v', ...)`` rows (None if the table or database is missing).

        Spark casts the spec's values to the column types itself, so ``columns`` is not needed here.
        """
        sql = f"SHOW PARTITIONS {quote_identifier(db)}.{quote_identifier(table)}"
        if spec:
            sql += " PARTITION (" + ", ".join(
                f"{quote_identifier(k)} = {sql_string_literal(v)}" for k, v in spec.items()) + ")"
        try:
            rows = self.spark.sql(sql).collect()
        except Exception as exc:  # noqa: BLE001 - classified below
            kind = classify_error(exc)
            if kind == "not_found":
                return None
            message = first_line(exc)
            if kind == "transient":
                raise TransientCheckError(f"metastore unreachable listing {db}.{table}: {message}") from exc
            raise PermanentCheckError(f"listing partitions of {db}.{table} failed: {message}") from exc
        return [row[0] for row in rows]
