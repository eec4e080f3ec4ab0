"""Ports: what the service needs from the outside, as Protocols. Adapters implement them.

- ``RoundStore``: the metadata database as a shard round sees it. ``adapters.sql.round_store`` is
  the real one (SQLite or PostgreSQL); ``adapters.memory`` keeps the same rules in dicts, so the
  round's logic is unit-tested without a database.
- ``CheckAnswerer``: answers batched partition/path checks (one catalog call per table).
  ``smartsensor.sensors.batch.BatchChecker`` answers them through Spark today; a unit test answers
  them from a dict.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable, Protocol

from smartsensor.domain.keys import Fence, WaitingTask
from smartsensor.domain.transitions import RoundWrites
from smartsensor.sensors.checks import Check
from smartsensor.sensors.errors import CheckError


class RoundStore(Protocol):
    """Reads and guarded writes of one shard range's round. Every write is idempotent and, with a
    ``fence``, applies only while that lease epoch is still held at the time of the write."""

    def load_range(self, shard_min: int, shard_max: int, now: datetime, hostname: str,
                   fence: Fence | None) -> tuple[list[WaitingTask], int]:
        """The waiting tasks of [shard_min, shard_max), after starting the pending ones
        (smart_pending → smart_running, start_date stamped). Returns (tasks as read, how many started)."""
        ...

    def write_round(self, shard_min: int, shard_max: int, writes: RoundWrites, now: datetime,
                    fence: Fence | None) -> dict[str, int]:
        """Apply a round's state changes in one transaction; returns how many tasks went to each state."""
        ...

    def holds(self, fence: Fence, now: datetime) -> bool:
        """True while the lease of ``fence`` is held by its owner under its epoch."""
        ...

    def record_round(self, worker_id: str, hostname: str, pid: int, shard_min: int, shard_max: int,
                     now: datetime, seconds: float, summary_json: str) -> None:
        """Keep this worker's last round for `smartsensor status`."""
        ...

    def forget_worker(self, worker_id: str) -> None:
        """Remove a worker's round row (clean stop)."""
        ...

    def statements(self) -> int:
        """Statements sent to the store so far (a counter that never wobbles, for benchmarks)."""
        ...


class CheckAnswerer(Protocol):
    """Answers checks in batches and counts what that cost."""

    spark: Any  # handed to user sensors' poke(context) as context["spark"]; None without Spark
    catalog_calls: int
    schema_calls: int
    fs_calls: int
    catalog_seconds: float

    def check_all(self, checks: Iterable[Check]) -> dict[Check, bool | CheckError]:
        """Each distinct check's answer: True (landed), False (not yet) or the error it raised."""
        ...
