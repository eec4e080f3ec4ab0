"""Atomic checks a sensor is decided by, answered in batches by smartsensor.adapters.catalog.batch.BatchChecker."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PartitionCheck:
    """A partition in ``db.table`` matching ``spec``.

    exact: the partition's full spec equals ``spec`` (a named partition); otherwise any partition
    whose spec contains every (key, value) pair of ``spec`` (a partial spec).
    """

    db: str
    table: str
    spec: tuple[tuple[str, str], ...]
    exact: bool

    @property
    def table_key(self) -> tuple[str, str]:
        return (self.db, self.table)


@dataclass(frozen=True, slots=True)
class PathCheck:
    """A path exists in the Hadoop FileSystem of the Spark JVM (file://, hdfs://, s3a://...)."""

    path: str


Check = PartitionCheck | PathCheck
