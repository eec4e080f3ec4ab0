"""A standalone Hive metastore service (thrift) run from the jars pyspark ships, on embedded Derby, PostgreSQL or
MySQL.

Embedded Derby admits one JVM only; with this service running, any number of Spark processes share
one catalog through ``[spark] metastore_uris = thrift://host:port``. Everything lives under
``<home>/metastore_service``: the Derby database, ``metastore.log`` (all of the JVM's output, SchemaTool's
too) and ``metastore.pid``. The JVM runs in its own session, so it outlives the process that started it.

With ``[metastore] database_url = postgresql://user:password@host:port/db`` the service keeps the metastore's
tables in that PostgreSQL database instead (as production metastores do), so its thrift API and its tables can
be read side by side (``mysql://user:password@host:port/db``: MySQL or MariaDB, likewise).
``smartsensor.adapters.metastore_db_setup`` creates the schema on the first start and documents
its table and column names (upper case, double-quoted: ``"DBS"``, ``"TBLS"``, ``"PARTITIONS"``,
``"PARTITION_KEYS"``, ``"PARTITION_KEY_VALS"``) for code that reads them directly.
"""

from __future__ import annotations

import fcntl
import importlib.util
import logging
import shlex
import shutil
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from smartsensor.adapters import metastore_db_setup
from smartsensor.adapters.metastore_service_process import (
    MAIN_CLASS,
    MetastoreServiceError,
    is_our_jvm,
    log_path,
    port_answers,
    port_bindable,
    read_pid,
    remove_pid_file,
    service_dir,
    spawn,
    terminate,
)
from smartsensor.adapters.spark import SPARK_EXTRA_HINT
from smartsensor.config import Config, MetastoreDb

__all__ = ["MetastoreServiceError", "MetastoreServiceStatus", "start", "status", "stop", "thrift_uri"]

LOG_TAIL_LINES = 5
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MetastoreServiceStatus:
    """What we know about the service of one home folder."""

    running: bool
    pid: int | None
    host: str
    port: int
    uri: str
    log: Path
    database: str  # where the service keeps its tables: "derby:<folder>" or the PostgreSQL URL without password


# -- addresses and status --------------------------------------------------------------------------


def thrift_uri(cfg: Config) -> str:
    """``thrift://host:port`` of the service, the value for ``[spark] metastore_uris``."""
    return f"thrift://{cfg.settings.metastore.host}:{cfg.settings.metastore.port}"


def _database(cfg: Config) -> str:
    db = cfg.metastore_service_db
    return db.shown if db is not None else f"derby:{service_dir(cfg) / 'metastore_db'}"


def _address(cfg: Config) -> tuple[str, int]:
    return cfg.settings.metastore.host, cfg.settings.metastore.port


def _log_tail(cfg: Config, offset: int = 0, lines: int = LOG_TAIL_LINES) -> str:
    """The last non-blank lines the JVM logged after byte ``offset`` (where this start began)."""
    try:
        with open(log_path(cfg), "rb") as fh:
            fh.seek(offset)
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return "(no log)"
    tail = deque((line.rstrip() for line in text.splitlines() if line.strip()), maxlen=lines)
    return "\n".join(tail) or "(nothing logged)"


def status(cfg: Config) -> MetastoreServiceStatus:
    """The service's state: running means our recorded JVM is alive AND its port answers."""
    host, port = _address(cfg)
    pid = read_pid(cfg)
    alive = pid is not None and is_our_jvm(pid)
    return MetastoreServiceStatus(
        running=alive and port_answers(host, port),
        pid=pid if alive else None,
        host=host,
        port=port,
        uri=thrift_uri(cfg),
        log=log_path(cfg),
        database=_database(cfg),
    )


# -- start -----------------------------------------------------------------------------------------


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise MetastoreServiceError(
            "Java not found on PATH: the Hive metastore service needs Java 17+ "
            "(e.g. apt-get install -y openjdk-17-jre-headless)"
        )
    return java


def _pyspark_jars() -> Path:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise MetastoreServiceError(f"the metastore service runs from PySpark's jars. {SPARK_EXTRA_HINT}")
    jars = Path(spec.origin).parent / "jars"
    if not jars.is_dir():
        raise MetastoreServiceError(f"pyspark has no jars folder at {jars}")
    return jars


def _command(cfg: Config, java: str, jars: Path, db: MetastoreDb | None) -> list[str]:
    """The service's command line. On PostgreSQL the connection settings (password included) are not on it:
    they are in the hive-site.xml of the folder put first on the classpath (``metastore_db_setup.write_hive_site``)."""
    home = service_dir(cfg)
    warehouse = Path(cfg.settings.spark.warehouse_dir).expanduser()
    hiveconf = {
        # Without this, Hive's async logging needs LMAX disruptor, which pyspark does not ship.
        "hive.async.log.enabled": "false",
        "hive.metastore.schema.verification": "false",
        "hive.metastore.warehouse.dir": str(warehouse),
    }
    jvm = [
        *shlex.split(cfg.settings.metastore.java_opts),
        # Hive's log4j2 file otherwise writes ${java.io.tmpdir}/${user.name}/hive.log.
        "-Dhive.root.logger=console",
        f"-Dhive.log.dir={home}",
    ]
    classpath = [str(jars / "*")]
    if db is None:
        derby = home / "metastore_db"
        if ";" in str(derby):
            raise MetastoreServiceError(f"the metastore path {derby} contains ';', which Derby's JDBC URL cannot hold")
        hiveconf["javax.jdo.option.ConnectionURL"] = f"jdbc:derby:;databaseName={derby};create=true"
        hiveconf["datanucleus.schema.autoCreateAll"] = "true"
        jvm += [
            f"-Dderby.system.home={home}",
            "-Dderby.stream.error.field=java.lang.System.err",  # into our log, not a derby.log in the cwd
        ]
    else:
        # The schema exists (metastore_db_setup.ensure_schema): creating it here deadlocks on an empty database.
        hiveconf["datanucleus.schema.autoCreateAll"] = "false"
        classpath = [
            str(metastore_db_setup.write_hive_site(cfg, db)),
            *classpath,
            str(metastore_db_setup.jdbc_jar(db.kind)),
        ]
    args = ["-p", str(cfg.settings.metastore.port)]
    for key, value in hiveconf.items():
        args += ["--hiveconf", f"{key}={value}"]
    return [java, *jvm, "-cp", ":".join(classpath), MAIN_CLASS, *args]


def _prepare_database(cfg: Config, java: str, jars: Path) -> MetastoreDb | None:
    """PostgreSQL or MySQL: check the JDBC driver, then create the schema if the database lacks it. Derby: nothing
    to do but forget a previous start's hive-site.xml."""
    db = cfg.metastore_service_db
    if db is None:
        metastore_db_setup.remove_hive_site(cfg)
        return None
    metastore_db_setup.jdbc_jar(db.kind)
    took = metastore_db_setup.ensure_schema(cfg, db, java, jars, cfg.settings.metastore.start_timeout)
    if took is not None:
        log.info("created the metastore schema in %s in %.1f s", db.shown, took)
    return db


@contextmanager
def _start_lock(cfg: Config) -> Iterator[None]:
    """Serialise concurrent ``start`` calls on one home folder."""
    with open(service_dir(cfg) / "metastore.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _wait_for_port(cfg: Config, pid: int, timeout: float, log_offset: int = 0) -> None:
    """Wait until the port answers; raise with the log's tail if the JVM exits or time runs out."""
    host, port = _address(cfg)
    deadline = time.monotonic() + timeout
    while True:
        if not is_our_jvm(pid):
            raise MetastoreServiceError(
                f"the metastore service (pid {pid}) exited during startup; "
                f"last lines of {log_path(cfg)}:\n{_log_tail(cfg, log_offset)}"
            )
        if port_answers(host, port):
            return
        if time.monotonic() >= deadline:
            raise MetastoreServiceError(
                f"the metastore service (pid {pid}) did not open {host}:{port} within "
                f"{timeout:g} s; last lines of {log_path(cfg)}:\n{_log_tail(cfg, log_offset)}"
            )
        time.sleep(0.2)


def start(cfg: Config, die_with_parent: bool = False) -> MetastoreServiceStatus:
    """Start the service unless our recorded JVM already runs; return once its port answers.

    ``die_with_parent`` (tests, Linux): the JVM gets SIGTERM when the calling process dies, however it
    dies, instead of outliving it as `smartsensor metastore start` wants.

    On PostgreSQL (``[metastore] database_url``) the first start against an empty database creates the schema
    first (``metastore_db_setup.ensure_schema``); later starts find it and skip that.

    Raises MetastoreServiceError when Java is missing, the port is taken by another process, the PostgreSQL JDBC
    driver is missing, the PostgreSQL database cannot be reached or its schema not created, or the JVM
    exits or stays silent for ``[metastore] start_timeout`` seconds (the message carries the log tail).
    """
    service_dir(cfg).mkdir(parents=True, exist_ok=True)
    host, port = _address(cfg)
    timeout = cfg.settings.metastore.start_timeout
    with _start_lock(cfg):
        pid = read_pid(cfg)
        if pid is not None and is_our_jvm(pid):
            _wait_for_port(cfg, pid, timeout)  # may still be starting (another caller's start)
            return status(cfg)
        remove_pid_file(cfg)
        if port_answers(host, port) or not port_bindable(port):
            raise MetastoreServiceError(
                f"port {host}:{port} is already in use by another process; stop it or set "
                f"[metastore] port (and [spark] metastore_uris) to a free port"
            )
        java, jars = _java(), _pyspark_jars()
        db = _prepare_database(cfg, java, jars)
        pid, log_offset = spawn(cfg, _command(cfg, java, jars, db), die_with_parent)
        try:
            _wait_for_port(cfg, pid, timeout, log_offset)
        except BaseException:  # also Ctrl-C or a test timeout mid-start: never leave a half-started JVM behind
            terminate(pid, timeout=10)
            remove_pid_file(cfg)
            raise
        return status(cfg)


# -- stop ------------------------------------------------------------------------------------------


def stop(cfg: Config, timeout: float = 20) -> bool:
    """Stop the recorded JVM (SIGTERM, then SIGKILL after ``timeout`` s); True if one was running."""
    pid = read_pid(cfg)
    running = pid is not None and is_our_jvm(pid)
    if pid is not None and running:
        terminate(pid, timeout)
    remove_pid_file(cfg)
    return running
