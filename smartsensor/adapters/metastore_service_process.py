"""The metastore service's JVM as a process: its folder, pid file, port probes, spawning and terminating.

``smartsensor.adapters.metastore_service`` builds the command and decides when to start or stop; this module
only knows processes, files and sockets.
"""

from __future__ import annotations

import errno
import os
import shlex
import signal
import socket
import subprocess
import time
from pathlib import Path

from smartsensor.adapters.process import pdeathsig_preexec
from smartsensor.config import Config

MAIN_CLASS = "org.apache.hadoop.hive.metastore.HiveMetaStore"


class MetastoreServiceError(Exception):
    """The metastore service cannot be started or reached; the message says why."""


# JVMs started by this process. stop()/status() find any JVM through the pid file; this is only
# so that their Popen objects are not garbage-collected while the JVM runs.
_children: dict[int, subprocess.Popen[bytes]] = {}


# -- paths -----------------------------------------------------------------------------------------


def service_dir(cfg: Config) -> Path:
    """``<home>/metastore_service``: Derby database, log and pid file of the service."""
    return cfg.home / "metastore_service"


def log_path(cfg: Config) -> Path:
    """The file that receives all of the service JVM's output."""
    return service_dir(cfg) / "metastore.log"


def pid_path(cfg: Config) -> Path:
    """The file holding the pid of the service's JVM while it runs."""
    return service_dir(cfg) / "metastore.pid"


def read_pid(cfg: Config) -> int | None:
    """The recorded pid, or None when there is no (readable) pid file."""
    try:
        return int(pid_path(cfg).read_text().strip())
    except (OSError, ValueError):
        return None


def remove_pid_file(cfg: Config) -> None:
    """Forget the recorded pid (no error if there is none)."""
    pid_path(cfg).unlink(missing_ok=True)


# -- process and port probes -----------------------------------------------------------------------


def is_our_jvm(pid: int) -> bool:
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


def port_answers(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
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


def port_bindable(port: int) -> bool:
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


# -- spawn and terminate ---------------------------------------------------------------------------


def _start_logged(cfg: Config, verb: str, cmd: list[str], die_with_parent: bool) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``cmd`` in its own session in the service's folder, its output appended to the service's log after a
    header line (``verb``: starting, running); return the process and the log offset where its output begins."""
    with open(log_path(cfg), "ab") as log:
        log.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} {verb}: {shlex.join(cmd)}\n".encode())
        log.flush()
        offset = log.tell()
        proc = subprocess.Popen(
            cmd,
            cwd=service_dir(cfg),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=pdeathsig_preexec() if die_with_parent else None,
        )
    return proc, offset


def spawn(cfg: Config, cmd: list[str], die_with_parent: bool = False) -> tuple[int, int]:
    """Start the JVM detached, record its pid; return (pid, log offset where its output begins)."""
    proc, offset = _start_logged(cfg, "starting", cmd, die_with_parent)
    _children[proc.pid] = proc  # keep it referenced: a collected running Popen warns (ResourceWarning)
    tmp = pid_path(cfg).with_suffix(".tmp")
    tmp.write_text(f"{proc.pid}\n")
    tmp.replace(pid_path(cfg))
    return proc.pid, offset


def run_to_log(cfg: Config, name: str, cmd: list[str], timeout: float) -> tuple[int, int]:
    """Run a short-lived tool called ``name`` (a JVM: the schema tool) to its end, its output appended to the
    service's log.

    Returns (exit status, log offset where its output begins). The tool dies with this process (Linux) and is
    killed with its process group after ``timeout`` s; then MetastoreServiceError says so.
    """
    proc, offset = _start_logged(cfg, "running", cmd, die_with_parent=True)
    try:
        return proc.wait(timeout), offset
    except subprocess.TimeoutExpired:
        raise MetastoreServiceError(f"{name} did not finish within {timeout:g} s; see {log_path(cfg)}") from None
    finally:
        if proc.poll() is None:  # timed out, or Ctrl-C while waiting
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while is_our_jvm(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # the JVM leads its own session/group (start_new_session)
    except ProcessLookupError:
        pass


def terminate(pid: int, timeout: float) -> None:
    """SIGTERM the JVM's process group, SIGKILL it after ``timeout`` s; wait until it is gone."""
    _signal_group(pid, signal.SIGTERM)
    if not _wait_gone(pid, timeout):
        _signal_group(pid, signal.SIGKILL)
        _wait_gone(pid, 10)
    _children.pop(pid, None)


def terminate_started_here(timeout: float = 10) -> list[int]:
    """Stop every metastore JVM this process started and that still runs (a test run's safety net: a test
    cut short by a timeout must not leave a JVM behind). Returns their pids."""
    stopped = []
    for pid in list(_children):
        if is_our_jvm(pid):
            terminate(pid, timeout)
            stopped.append(pid)
        _children.pop(pid, None)
    return stopped
