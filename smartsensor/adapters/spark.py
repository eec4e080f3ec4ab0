"""One lazily created SparkSession per process, configured from ``[spark]``, stopped at exit."""

from __future__ import annotations

import atexit
import logging
import os
import threading
from pathlib import Path
from typing import Any

from smartsensor.config import Config

log = logging.getLogger(__name__)

LOG4J2_CONFIG = Path(__file__).resolve().parent / "log4j2.properties"
_lock = threading.Lock()
_session: Any = None


def spark_builder_conf(cfg: Config) -> dict[str, str]:
    """The Spark settings we apply: warehouse, metastore, quiet UI, then the user's ``[spark] conf``."""
    home = cfg.home
    conf = {
        "spark.sql.warehouse.dir": str(Path(cfg.settings.spark.warehouse_dir).expanduser()),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "1",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        # Fail fast when the metastore is down: the worker retries next round (transient error).
        "spark.hadoop.hive.metastore.failure.retries": "1",
        "spark.hadoop.hive.metastore.client.connect.retry.delay": "1s",
        "spark.hadoop.hive.metastore.client.socket.timeout": "20s",
    }
    java_opts = [f"-Dlog4j2.configurationFile={LOG4J2_CONFIG.as_uri()}"]
    uris = cfg.settings.spark.metastore_uris
    if uris:
        conf["spark.hadoop.hive.metastore.uris"] = uris
    else:
        derby = home / "metastore_db"
        conf["spark.hadoop.javax.jdo.option.ConnectionURL"] = f"jdbc:derby:;databaseName={derby};create=true"
        java_opts.append(f"-Dderby.system.home={home}")
    conf["spark.driver.extraJavaOptions"] = " ".join(java_opts)
    conf.update(cfg.spark_conf())
    return conf


# pyspark logs every failed query, from Python, as a multi-kilobyte ERROR record with the Java stack trace
# (its "query context" loggers). A table that does not exist yet is the normal answer of a waiting check;
# our callers classify and report every failure themselves, in one line.
QUERY_CONTEXT_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


SPARK_EXTRA_HINT = (
    "PySpark is not installed: pip install 'smartsensor[spark]' (the Spark catalog backend, "
    "classic runs of sensors that need Spark and `smartsensor metastore start` need it, and Java 17+)"
)


class SparkNotInstalled(ImportError):
    """PySpark cannot be imported in this environment (the ``spark`` extra is missing): unlike a JVM that fails to
    start, nothing a later try on this host changes. The message is SPARK_EXTRA_HINT and the import's error."""


def quiet_query_context_loggers() -> None:
    """Switch off pyspark's per-failure query-context loggers (see QUERY_CONTEXT_LOGGERS).

    They are created as PySparkLogger: pyspark passes them keyword arguments a plain Logger rejects.
    """
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:  # PySpark < 4: no such loggers
        return
    for name in QUERY_CONTEXT_LOGGERS:
        logger = PySparkLogger.getLogger(name)
        logger.setLevel(logging.CRITICAL)
        logger.disabled = True


def get_spark(cfg: Config) -> Any:
    """The process's SparkSession with Hive support, created on first use (SparkNotInstalled without PySpark)."""
    global _session
    with _lock:
        if _session is not None:
            return _session
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        quiet_query_context_loggers()
        cfg.home.mkdir(parents=True, exist_ok=True)
        try:
            from pyspark.sql import SparkSession
        except ImportError as exc:
            raise SparkNotInstalled(f"{SPARK_EXTRA_HINT} ({exc})") from None

        builder = SparkSession.builder.master(cfg.settings.spark.master).appName(cfg.settings.spark.app_name)
        for key, value in spark_builder_conf(cfg).items():
            builder = builder.config(key, value)
        session = builder.enableHiveSupport().getOrCreate()
        session.sparkContext.setLogLevel("FATAL")
        _session = session
        atexit.register(stop_spark)
        return session


def jvm_exit_code() -> int | None:
    """The exit code of this process's Spark driver JVM if it has died (e.g. killed for memory), else None.

    py4j keeps answering with errors once the JVM is gone and pyspark cannot start a second gateway in
    the same process, so a caller that sees a code should stop and let a supervisor start it afresh.
    """
    if _session is None:
        return None
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)  # None when attached to an external gateway
    return proc.poll() if proc is not None else None


def stop_spark() -> None:
    """Stop the process's SparkSession if one was started."""
    global _session
    with _lock:
        if _session is not None:
            try:
                _session.stop()
            except Exception:  # stopping at exit must not raise
                log.debug("error stopping Spark", exc_info=True)
            _session = None
