"""The catalog backends (``[smart_sensor] catalog_backend``), built here and nowhere else: what a process's rounds
answer checks with, and what its landing publisher lists the watched tables with.

- ``spark``: the external catalog of the process's SparkSession (or the caller's);
- ``thrift``: the metastore service's thrift API (``ThriftCatalog``), no JVM;
- ``metastore_db``: the metastore's own database (``MetastoreDbCatalog``), following its feed unless
  ``[catalog] metastore_db_feed`` is off.

On each, Spark starts only when a check needs it (a partition on the spark backend, a path that is not file://, a
user sensor reading ``context['spark']``), so file:// and ``poke()`` checks work on a host without Java.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from smartsensor.adapters.catalog.batch import BatchChecker
from smartsensor.adapters.catalog.table_listings import table_listings
from smartsensor.config import Config
from smartsensor.ports import CheckAnswerer, PartitionLister, TableListings

SparkProvider = Callable[[], Any]


def _spark(cfg: Config, spark_provider: SparkProvider | None) -> SparkProvider:
    def spark() -> Any:
        if spark_provider is not None:
            return spark_provider()
        from smartsensor.adapters.spark import get_spark

        return get_spark(cfg)

    return spark


def _metastore_db(cfg: Config, keep_ids: bool) -> PartitionLister:
    from smartsensor.adapters.catalog.metastore_db import MetastoreDbCatalog
    from smartsensor.adapters.catalog.partition_feed import PartitionFeed

    catalog = cfg.settings.catalog
    feed = None
    if catalog.metastore_db_feed:
        feed = PartitionFeed(
            verify_seconds=catalog.metastore_db_verify_seconds,
            max_gaps=catalog.metastore_db_max_gaps,
            keep_ids=keep_ids,
        )
    return MetastoreDbCatalog.from_url(catalog.metastore_db_url, cfg.settings.smart_sensor.metastore_timeout, feed)


def _thrift(cfg: Config, keep_ids: bool) -> PartitionLister:
    from smartsensor.adapters.catalog.thrift_catalog import ThriftCatalog

    return ThriftCatalog.from_config(cfg)


# The backends with a client of their own (spark uses the process's session); ``keep_ids``: the partitions' ids
# too, where the backend reads them (the landing publisher's, for partitions dropped and added again).
LISTERS: dict[str, Callable[[Config, bool], PartitionLister]] = {"metastore_db": _metastore_db, "thrift": _thrift}


def answerer_factory(cfg: Config, spark_provider: SparkProvider | None = None) -> Callable[[], CheckAnswerer]:
    """The production answerer factory: a BatchChecker per round over ``[smart_sensor] catalog_backend``, every one
    over the same client, made at the first call (thrift: the process's ThriftCatalog; metastore_db: its
    MetastoreDbCatalog and feed; spark: the SparkSession, started when a check needs it)."""
    backend = cfg.resolved_catalog_backend
    spark = _spark(cfg, spark_provider)
    listers: list[PartitionLister] = []
    lock = threading.Lock()

    def make() -> CheckAnswerer:
        if backend not in LISTERS:
            return BatchChecker(spark_provider=spark)
        with lock:
            if not listers:
                listers.append(LISTERS[backend](cfg, False))
        return BatchChecker(lister=listers[0], spark_provider=spark)

    return make


def landing_listings(cfg: Config, spark_provider: SparkProvider | None = None) -> TableListings:
    """The landing publisher's listings of the watched tables through ``[smart_sensor] catalog_backend``, with a
    client of its own: the change record on metastore_db with its feed, else a listing per table."""
    backend = cfg.resolved_catalog_backend
    if backend in LISTERS:
        return table_listings(LISTERS[backend](cfg, True))
    return table_listings(BatchChecker(spark_provider=_spark(cfg, spark_provider)).lister)
