"""What the benchmark (bench.py) measures and shows, shared by its rounds and its tables (tables.py): a strategy's
numbers for one round, the strategies by kind, and the console they print on."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

console = Console(width=int(os.environ.get("COLUMNS", "170")))


@dataclass
class Measure:
    """One strategy's numbers for one kind of round."""

    catalog_calls: float = 0
    db_statements: float = 0
    wall: float = 0.0
    catalog_seconds: float = 0.0
    marked: int = 0
    extrapolated: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    schema_calls: float = (
        0  # partition-type look-ups, cached per process (smartsensor.adapters.catalog.partition_types)
    )

    @property
    def wall_excl_catalog(self) -> float:
        return self.wall - self.catalog_seconds


ALL_STRATEGIES = (
    "classic",
    "per-hash",
    "batched",
    "incremental",
    "thrift-parallel",
    "metastore-db",
    "metastore-db-lookup",
    "fleet",
    "triggerer",
)
# The product's round in this process (each range's index built once, timed apart, then a round with every check
# due): on each catalog backend, and Airflow's one check per hash.
IN_PROCESS = ("per-hash", "batched", "incremental", "thrift-parallel", "metastore-db", "metastore-db-lookup")
# The strategies whose round is one process's catalog term, in the metastore-load and catalog-growth tables.
CATALOG_ROUNDS = ("batched", "incremental", "thrift-parallel", "metastore-db", "metastore-db-lookup")
