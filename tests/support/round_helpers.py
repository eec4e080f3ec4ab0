"""A range under test: one range's RangeRounds, its answerer, and the one round entry point run on it alone."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable

from sqlalchemy import Engine

from smartsensor.adapters.catalog.batch import BatchChecker
from smartsensor.adapters.sql.round_store import SqlRoundStore
from smartsensor.ports import CheckAnswerer, RoundStore
from smartsensor.service.round.range_rounds import RangeRounds, run_round
from smartsensor.service.round.report import RoundResult


class RangeUnderTest:
    """``run_round()`` runs ``service.round.run_round`` on this one range; other attributes are the worker's."""

    def __init__(self, worker: RangeRounds, answerer: Callable[[], CheckAnswerer]) -> None:
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
    store: RoundStore = SqlRoundStore(engine_or_store) if isinstance(engine_or_store, Engine) else engine_or_store
    if clock is not None:
        kw["clock"] = clock
    worker = RangeRounds(store, cfg, lo, hi or cfg.shard_code_upper_limit, **kw)
    return RangeUnderTest(worker, lambda: BatchChecker(spark() if callable(spark) else spark))
