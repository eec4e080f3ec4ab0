"""The Spark catalog backend's partition listing: the session's external (Hive) catalog, fetched in chunks.

``listPartitionNames`` gives the same escaped names as ``SHOW PARTITIONS`` without the SQL layer's extra
metastore calls (SHOW PARTITIONS made 6 per listing). Its result is joined into one string inside the JVM
and fetched in pieces of at most ``CHUNK`` characters: py4j replies over ~8 KB stall for ~44 ms each
(measured; 8–19 ms per 1,000-partition listing in chunks vs 52–56 ms fetched whole).
"""

from __future__ import annotations

from typing import Any

from smartsensor.adapters.catalog.catalog_errors import classify_error
from smartsensor.adapters.catalog.partition_types import PartitionTypes, narrowing_spec, partition_types_for
from smartsensor.sensors.errors import PermanentCheckError, TransientCheckError, first_line

CHUNK = 2_600  # characters per py4j reply: under ~8 KB even when every character takes 3 bytes


class SparkLister:
    """A PartitionLister over one SparkSession (its column types cached per session)."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.types: PartitionTypes = partition_types_for(spark)

    def list_rows(self, db: str, table: str, spec: dict[str, str], columns: dict[str, str]) -> list[str] | None:
        """Partition names of db.table, narrowed inside the metastore by the plain string values of ``spec``
        (None if the table or database is missing); the caller keeps exact membership, with values cast to
        the column types."""
        try:
            return self._names(db.lower(), table.lower(), narrowing_spec(spec, columns))
        except Exception as exc:  # classified below
            kind = classify_error(exc)
            if kind == "not_found":
                self.types.forget(db, table)
                return None
            message = first_line(exc)
            if kind == "transient":
                raise TransientCheckError(f"metastore unreachable listing {db}.{table}: {message}") from exc
            raise PermanentCheckError(f"listing partitions of {db}.{table} failed: {message}") from exc

    def _names(self, db: str, table: str, narrowing: dict[str, str]) -> list[str]:
        jvm = self.spark._jvm
        catalog = self.spark._jsparkSession.sharedState().externalCatalog()
        partial = (
            jvm.scala.Option.apply(jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(narrowing))
            if narrowing
            else jvm.scala.Option.empty()
        )
        names = catalog.listPartitionNames(db, table, partial)
        joined = names.addString(jvm.scala.collection.mutable.StringBuilder(), "", "\n", "")  # stays in the JVM
        size = joined.length()
        if not size:
            return []
        return "".join(joined.substring(i, min(i + CHUNK, size)) for i in range(0, size, CHUNK)).split("\n")
