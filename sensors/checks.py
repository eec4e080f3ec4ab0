"""Atomic checks a sensor is decided by, answered in batches by smartsensor.adapters.catalog.batch.BatchChecker."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from smartsensor.hive_filter.names import TableName


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
    # A round hashes each of its 100,000 checks several times (sets, dicts, caches): computed once.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.db, self.table, self.spec, self.exact)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[Any, ...]:  # str hashes differ per process: never carry the cached one over
        return (PartitionCheck, (self.db, self.table, self.spec, self.exact))

    @property
    def table_key(self) -> TableName:
        """The table this check reads: what the batch and the index group checks by."""
        return TableName(self.db, self.table)


@dataclass(frozen=True, slots=True)
class PathCheck:
    """A path exists in the Hadoop FileSystem of the Spark JVM (file://, hdfs://, s3a://...)."""

    path: str


Check = PartitionCheck | PathCheck
