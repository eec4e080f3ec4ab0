"""The poke step of a round, for all ranges of a process at once: one batch of catalog calls, one
``poke()`` per distinct user check, each within ``[smart_sensor] poke_timeout``."""

from __future__ import annotations

import logging
from typing import Any, Callable

from smartsensor.config import Config
from smartsensor.ports import CheckAnswerer
from smartsensor.sensors.errors import TransientCheckError
from smartsensor.domain.transitions import combine
from smartsensor.service.bounded_poke import poker_for
from smartsensor.service.round_plan import RoundPlan

log = logging.getLogger(__name__)

Counters = dict[str, float]


def spark_answerer(cfg: Config, spark_provider: Callable[[], Any] | None = None) -> Callable[[], CheckAnswerer]:
    """The production answerer: a BatchChecker on this process's SparkSession (or the provider's),
    created only when a round has something to check, so a worker with nothing due starts no JVM."""
    def make() -> CheckAnswerer:
        from smartsensor.sensors.batch import BatchChecker
        if spark_provider is None:
            from smartsensor.adapters.spark import get_spark
            return BatchChecker(get_spark(cfg))
        return BatchChecker(spark_provider())
    return make


def poke_plans(plans: list[RoundPlan], answerer: Callable[[], CheckAnswerer], poke_timeout: float) -> Counters:
    """Answer the due checks of every plan; outcomes go into the plans' groups. Returns the call counters."""
    counters: Counters = {"catalog_calls": 0, "schema_calls": 0, "fs_calls": 0, "poke_calls": 0,
                          "catalog_seconds": 0.0}
    if not any(p.batched or p.sensors for p in plans):
        return counters
    try:
        checker = answerer()
    except Exception as exc:  # noqa: BLE001 - Spark failing to start is an outage, not a bad check
        log.warning("cannot start Spark: %s", exc)
        for p in plans:
            for g in p.due:
                if g.outcome is None:
                    g.outcome = TransientCheckError(f"Spark unavailable: {exc}")
        return counters
    answers = checker.check_all(c for p in plans for checks in p.batched.values() for c in checks)
    context = {"checker": checker, "spark": checker.spark}
    poker = poker_for(poke_timeout)
    for p in plans:
        for g in p.due:
            if g.key in p.batched:
                g.outcome = combine([answers[c] for c in p.batched[g.key]])
                continue
            sensor = p.sensors.get(g.key)
            if sensor is None:
                continue
            counters["poke_calls"] += 1
            g.outcome = poker.poke(g.key, lambda sensor=sensor: sensor.poke(context))  # type: ignore[misc]
            if isinstance(g.outcome, TransientCheckError):
                log.warning("poke of %s: %s (treated as transient)", g.key[1], g.outcome)
    counters.update(catalog_calls=checker.catalog_calls, schema_calls=checker.schema_calls, fs_calls=checker.fs_calls,
                    catalog_seconds=round(checker.catalog_seconds, 4))
    return counters
