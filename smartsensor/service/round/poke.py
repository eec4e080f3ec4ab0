"""The poke step of a round, for all ranges of a process at once: one batch of catalog calls, one
``poke()`` per distinct user check, each within ``[smart_sensor] poke_timeout``."""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from smartsensor.config import Config
from smartsensor.domain.transitions import combine
from smartsensor.ports import CheckAnswerer
from smartsensor.sensors.errors import TransientCheckError
from smartsensor.service.round.bounded_poke import poker_for
from smartsensor.service.round.plan import RoundPlan

log = logging.getLogger(__name__)

Counters = dict[str, float]


def catalog_answerer(cfg: Config, spark_provider: Callable[[], Any] | None = None) -> Callable[[], CheckAnswerer]:
    """The production answerer factory: a BatchChecker per round over ``[smart_sensor] catalog_backend``.

    spark: the external catalog of this process's SparkSession (or the provider's). thrift: the process's
    ThriftCatalog. metastore_db: the process's MetastoreDbCatalog. On each, Spark starts only when a check needs
    it (a partition on the spark backend, a path that is not file://, a user sensor reading ``context['spark']``),
    so file:// and ``poke()`` checks work on a host without Java.
    """
    backend = cfg.resolved_catalog_backend
    catalogs: list[Any] = []
    lock = threading.Lock()

    def spark() -> Any:
        if spark_provider is not None:
            return spark_provider()
        from smartsensor.adapters.spark import get_spark

        return get_spark(cfg)

    def make() -> CheckAnswerer:
        from smartsensor.adapters.catalog.batch import BatchChecker

        if backend == "spark":
            return BatchChecker(spark_provider=spark)
        with lock:
            if not catalogs and backend == "metastore_db":
                from smartsensor.adapters.catalog.metastore_db import MetastoreDbCatalog
                from smartsensor.adapters.catalog.partition_feed import PartitionFeed

                url = cfg.settings.catalog.metastore_db_url
                feed = None
                if cfg.settings.catalog.metastore_db_feed:
                    feed = PartitionFeed(
                        verify_seconds=cfg.settings.catalog.metastore_db_verify_seconds,
                        max_gaps=cfg.settings.catalog.metastore_db_max_gaps,
                    )
                timeout = cfg.settings.smart_sensor.metastore_timeout
                catalogs.append(MetastoreDbCatalog.from_url(url, timeout, feed))
            elif not catalogs:
                from smartsensor.adapters.catalog.thrift_catalog import ThriftCatalog

                catalogs.append(ThriftCatalog.from_config(cfg))
        return BatchChecker(lister=catalogs[0], spark_provider=spark)

    return make


class PokeContext(dict[str, Any]):
    """A user sensor's poke context: ``context['spark']`` starts Spark only when a sensor asks for it."""

    def __init__(self, checker: CheckAnswerer) -> None:
        super().__init__(checker=checker)
        self._checker = checker

    def __missing__(self, key: str) -> Any:
        if key == "spark":
            return self._checker.spark
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key == "spark" or key in self else default


def poke_plans(plans: list[RoundPlan], answerer: Callable[[], CheckAnswerer], poke_timeout: float) -> Counters:
    """Answer the due checks of every plan; outcomes go into the plans' groups. Returns the call counters."""
    counters: Counters = {"catalog_calls": 0, "schema_calls": 0, "fs_calls": 0, "poke_calls": 0, "catalog_seconds": 0.0}
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
    context = PokeContext(checker)
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
            g.outcome = poker.poke(g.key, lambda sensor=sensor: sensor.poke(context))  # type: ignore[misc]  # bound per iteration
            if isinstance(g.outcome, TransientCheckError):
                log.warning("poke of %s: %s (treated as transient)", g.key.classpath, g.outcome)
    counters.update(
        catalog_calls=checker.catalog_calls,
        schema_calls=checker.schema_calls,
        fs_calls=checker.fs_calls,
        catalog_seconds=round(checker.catalog_seconds, 4),
    )
    return counters
