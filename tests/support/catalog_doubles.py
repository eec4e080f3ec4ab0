"""Test doubles for the round's outside world: a clock the test moves, and a catalog answered from a dict."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Iterable

from smartsensor.sensors.checks import Check, PartitionCheck
from smartsensor.sensors.errors import CheckError
from smartsensor.sensors.partitions import parse_partition_name


class Clock:
    """A clock that moves only when the test says so."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class DictCatalog:
    """A ``CheckAnswerer`` over a set of landed partitions ("db.table/k=v/..."): one catalog call per table."""

    spark = None

    def __init__(self) -> None:
        self.landed: set[tuple[str, str, tuple[tuple[str, str], ...]]] = set()
        self.errors: dict[tuple[str, str, tuple[tuple[str, str], ...]], CheckError] = {}
        self.asked: list[Check] = []
        self.catalog_calls = self.schema_calls = self.fs_calls = 0
        self.catalog_seconds = 0.0

    @staticmethod
    def _key(name: str) -> tuple[str, str, tuple[tuple[str, str], ...]]:
        db, table, spec = parse_partition_name("partition", name)
        return db, table, tuple(spec.items())

    def land(self, name: str) -> None:
        self.landed.add(self._key(name))

    def fail(self, name: str, error: CheckError) -> None:
        self.errors[self._key(name)] = error

    def check_all(self, checks: Iterable[Check]) -> dict[Check, bool | CheckError]:
        answers: dict[Check, bool | CheckError] = {}
        tables = set()
        for c in checks:
            self.asked.append(c)
            assert isinstance(c, PartitionCheck), "this double answers partition checks only"
            tables.add((c.db, c.table))
            key = (c.db, c.table, c.spec)
            answers[c] = self.errors.get(key, key in self.landed)
        self.catalog_calls += len(tables)
        return answers
