"""A shard worker under test: one range, its answerer, and the one round entry point run on it alone."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable

from smartsensor.adapters.catalog.batch import BatchChecker
from smartsensor.adapters.sql.round_store import SqlRoundStore
from smartsensor.ports import CheckAnswerer, RoundStore
from smartsensor.service.round.report import RoundResult
from smartsensor.service.round.worker import ShardWorker, run_round


class RangeUnderTest:
    """``run_round()`` runs ``service.round.run_round`` on this one range; other attributes are the worker's."""

    def __init__(self, worker: ShardWorker, answerer: Callable[[], CheckAnswerer]) -> None:
        self.worker = worker
        self.answerer = answerer

    def run_round(self) -> RoundResult:
        return run_round([self.worker], self.answerer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.worker, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("worker", "answerer"):
            object.__setattr__(self, name, value)
        else:
            setattr(self.worker, name, value)


def spark_range(
    engine_or_store: Any,
    cfg: Any,
    spark: Any,
    lo: int = 0,
    hi: int | None = None,
    clock: Callable[[], datetime] | None = None,
    **kw: Any,
) -> RangeUnderTest:
    """A range on the SQL store (or the given store) whose checks are answered by a BatchChecker on ``spark``."""
    store: RoundStore = engine_or_store if hasattr(engine_or_store, "load_range") else SqlRoundStore(engine_or_store)
    if clock is not None:
        kw["clock"] = clock
    worker = ShardWorker(store, cfg, lo, hi or cfg.shard_code_upper_limit, **kw)
    return RangeUnderTest(worker, lambda: BatchChecker(spark() if callable(spark) else spark))
