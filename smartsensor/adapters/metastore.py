"""A standalone Hive metastore service (thrift) run from the jars pyspark ships, Derby behind it.

Embedded Derby admits one JVM only; with this service running, any number of Spark processes share
one catalog through ``[spark] metastore_uris = thrift://host:port``. Everything lives under
``<home>/metastore_service``: the Derby database, ``metastore.log`` (all of the JVM's output) and
``metastore.pid``. The JVM runs in its own session, so it outlives the process that started it.
"""

from __future__ import annotations

import errno
import fcntl
import importlib.util
import os
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from smartsensor.config import Config
from smartsensor.adapters.process import pdeathsig_preexec

MAIN_CLASS = "org.apache.hadoop.hive.metastore.HiveMetaStore"
LOG_TAIL_LINES = 5

# JVMs started by this process. stop()/status() find any JVM through the pid file; this is only
# so that their Popen objects are not garbage-collected while the JVM runs.
_children: dict[int, subprocess.Popen[bytes]] = {}


class MetastoreError(Exception):
    """The metastore service cannot be started or reached; the message says why."""


@dataclass(frozen=True)
class MetastoreStatus:
    """What we know about the service of one home folder."""

    running: bool
    pid: int | None
    host: str
    port: int
    uri: str
    log: Path


# -- paths and addresses ---------------------------------------------------------------------------

def service_dir(cfg: Config) -> Path:
    """``<home>/metastore_service``: Derby database, log and pid file of the service."""
    return cfg.home / "metastore_service"


def log_path(cfg: Config) -> Path:
    """The file that receives all of the service JVM's output."""
    return service_dir(cfg) / "metastore.log"


def _pid_path(cfg: Config) -> Path:
    return service_dir(cfg) / "metastore.pid"


def thrift_uri(cfg: Config) -> str:
    """``thrift://host:port`` of the service, the value for ``[spark] metastore_uris``."""
    return f"thrift://{cfg.get('metastore', 'host')}:{cfg.get('metastore', 'port')}"


def _address(cfg: Config) -> tuple[str, int]:
    return cfg.get("metastore", "host"), cfg.get("metastore", "port")


# -- process and port probes -----------------------------------------------------------------------

def _read_pid(cfg: Config) -> int | None:
    try:
        return int(_pid_path(cfg).read_text().strip())
    except (OSError, ValueError):
        return None


def _remove_pid_file(cfg: Config) -> None:
    _pid_path(cfg).unlink(missing_ok=True)


def _is_our_jvm(pid: int) -> bool:
    """Whether ``pid`` is a live metastore JVM, not an exited child or a recycled pid."""
    child = _children.get(pid)
    if child is not None:
        # poll() also reaps it (a zombie still passes kill(0)). Its cmdline is no evidence here:
        # Popen returns as exec closes our pipe, a moment BEFORE the new image's argv is readable.
        return child.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.parent.exists():
        return True  # no procfs: trust the pid file
    try:
        return MAIN_CLASS.encode() in cmdline.read_bytes()
    except OSError:
        return False


def _port_answers(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def free_port() -> int:
    """A TCP port free on this machine right now (for a metastore service, tests and the demo)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _port_bindable(port: int) -> bool:
    """Whether the JVM could bind ``port``: Hive 2.3 always binds the wildcard address."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # The JVM sets SO_REUSEADDR too, so TIME_WAIT leftovers must not count as "taken".
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


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


def status(cfg: Config) -> MetastoreStatus:
    """The service's state: running means our recorded JVM is alive AND its port answers."""
    host, port = _address(cfg)
    pid = _read_pid(cfg)
    alive = pid is not None and _is_our_jvm(pid)
    return MetastoreStatus(running=alive and _port_answers(host, port), pid=pid if alive else None,
                           host=host, port=port, uri=thrift_uri(cfg), log=log_path(cfg))


# -- start -----------------------------------------------------------------------------------------

def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise MetastoreError("Java not found on PATH: the Hive metastore service needs Java 17+ "
                             "(e.g. apt-get install -y openjdk-17-jre-headless)")
    return java


def _pyspark_jars() -> Path:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise MetastoreError("pyspark is not installed: the metastore service runs from its jars")
    jars = Path(spec.origin).parent / "jars"
    if not jars.is_dir():
        raise MetastoreError(f"pyspark has no jars folder at {jars}")
    return jars


def _command(cfg: Config, java: str) -> list[str]:
    home = service_dir(cfg)
    derby = home / "metastore_db"
    if ";" in str(derby):
        raise MetastoreError(f"the metastore path {derby} contains ';', which Derby's JDBC URL cannot hold")
    warehouse = Path(cfg.get("spark", "warehouse_dir")).expanduser()
    hiveconf = {
        # Without this, Hive's async logging needs LMAX disruptor, which pyspark does not ship.
        "hive.async.log.enabled": "false",
        "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={derby};create=true",
        "datanucleus.schema.autoCreateAll": "true",
        "hive.metastore.schema.verification": "false",
        "hive.metastore.warehouse.dir": str(warehouse),
    }
    jvm = [
        *shlex.split(cfg.get("metastore", "java_opts")),
        f"-Dderby.system.home={home}",
        "-Dderby.stream.error.field=java.lang.System.err",  # into our log, not a derby.log in the cwd
        # Hive's log4j2 file otherwise writes ${java.io.tmpdir}/${user.name}/hive.log.
        "-Dhive.root.logger=console",
        f"-Dhive.log.dir={home}",
    ]
    args = ["-p", str(cfg.get("metastore", "port"))]
    for key, value in hiveconf.items():
        args += ["--hiveconf", f"{key}={value}"]
    return [java, *jvm, "-cp", str(_pyspark_jars() / "*"), MAIN_CLASS, *args]


@contextmanager
def _start_lock(cfg: Config) -> Iterator[None]:
    """Serialise concurrent ``start`` calls on one home folder."""
    with open(service_dir(cfg) / "metastore.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _spawn(cfg: Config, cmd: list[str], die_with_parent: bool = False) -> tuple[int, int]:
    """Start the JVM detached, record its pid; return (pid, log offset where its output begins)."""
    home = service_dir(cfg)
    with open(log_path(cfg), "ab") as log:
        log.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {shlex.join(cmd)}\n".encode())
        log.flush()
        offset = log.tell()
        proc = subprocess.Popen(cmd, cwd=home, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=pdeathsig_preexec() if die_with_parent else None)
    _children[proc.pid] = proc  # keep it referenced: a collected running Popen warns (ResourceWarning)
    tmp = _pid_path(cfg).with_suffix(".tmp")
    tmp.write_text(f"{proc.pid}\n")
    tmp.replace(_pid_path(cfg))
    return proc.pid, offset


def _wait_for_port(cfg: Config, pid: int, timeout: float, log_offset: int = 0) -> None:
    """Wait until the port answers; raise with the log's tail if the JVM exits or time runs out."""
    host, port = _address(cfg)
    deadline = time.monotonic() + timeout
    while True:
        if not _is_our_jvm(pid):
            raise MetastoreError(f"the metastore service (pid {pid}) exited during startup; "
                                 f"last lines of {log_path(cfg)}:\n{_log_tail(cfg, log_offset)}")
        if _port_answers(host, port):
            return
        if time.monotonic() >= deadline:
            raise MetastoreError(f"the metastore service (pid {pid}) did not open {host}:{port} within "
                                 f"{timeout:g} s; last lines of {log_path(cfg)}:\n{_log_tail(cfg, log_offset)}")
        time.sleep(0.2)


def start(cfg: Config, die_with_parent: bool = False) -> MetastoreStatus:
    """Start the service unless our recorded JVM already runs; return once its port answers.

    ``die_with_parent`` (tests, Linux): the JVM gets SIGTERM when the calling process dies, however it
    dies, instead of outliving it as `smartsensor metastore start` wants.

    Raises MetastoreError when Java is missing, the port is taken by another process, or the JVM
    exits or stays silent for ``[metastore] start_timeout`` seconds (the message carries the log tail).
    """
    service_dir(cfg).mkdir(parents=True, exist_ok=True)
    host, port = _address(cfg)
    timeout = cfg.get("metastore", "start_timeout")
    with _start_lock(cfg):
        pid = _read_pid(cfg)
        if pid is not None and _is_our_jvm(pid):
            _wait_for_port(cfg, pid, timeout)  # may still be starting (another caller's start)
            return status(cfg)
        _remove_pid_file(cfg)
        if _port_answers(host, port) or not _port_bindable(port):
            raise MetastoreError(f"port {host}:{port} is already in use by another process; stop it or set "
                                 f"[metastore] port (and [spark] metastore_uris) to a free port")
        pid, log_offset = _spawn(cfg, _command(cfg, _java()), die_with_parent)
        try:
            _wait_for_port(cfg, pid, timeout, log_offset)
        except BaseException:  # also Ctrl-C or a test timeout mid-start: never leave a half-started JVM behind
            _terminate(pid, timeout=10)
            _remove_pid_file(cfg)
            raise
        return status(cfg)


# -- stop ------------------------------------------------------------------------------------------

def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _is_our_jvm(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # the JVM leads its own session/group (start_new_session)
    except ProcessLookupError:
        pass


def _terminate(pid: int, timeout: float) -> None:
    _signal_group(pid, signal.SIGTERM)
    if not _wait_gone(pid, timeout):
        _signal_group(pid, signal.SIGKILL)
        _wait_gone(pid, 10)
    _children.pop(pid, None)


def stop(cfg: Config, timeout: float = 20) -> bool:
    """Stop the recorded JVM (SIGTERM, then SIGKILL after ``timeout`` s); True if one was running."""
    pid = _read_pid(cfg)
    running = pid is not None and _is_our_jvm(pid)
    if running:
        _terminate(pid, timeout)
    _remove_pid_file(cfg)
    return running


def terminate_started_here(timeout: float = 10) -> list[int]:
    """Stop every metastore JVM this process started and that still runs (a test run's safety net: a test
    cut short by a timeout must not leave a JVM behind). Returns their pids."""
    stopped = []
    for pid in list(_children):
        if _is_our_jvm(pid):
            _terminate(pid, timeout)
            stopped.append(pid)
        _children.pop(pid, None)
    return stopped
