"""Import a sensor file and collect its module-level sensor objects (the `submit` command)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Iterator, NoReturn

from smartsensor.sensors.base import BaseSensor
from smartsensor.sensors.errors import SensorDefinitionError, first_line
from smartsensor.sensors.validation import validate_id


class DagFileError(Exception):
    """The sensor file cannot be imported or defines no usable smartsensor.sensors."""


def _module_name(path: Path) -> str:
    stem = re.sub(r"\W", "_", path.stem)
    return f"smartsensor_dags.{stem}"


def import_file(path: Path, timeout: float | None = None) -> ModuleType:
    """Import ``path`` as a module (its folder is put on sys.path for its own helper imports).

    ``timeout``: seconds the import may take (a file that loops or blocks at import is reported, not
    waited on for ever); enforced with SIGALRM, so only from the main thread of the process.
    """
    if not path.is_file():
        raise DagFileError(f"sensor file {path} does not exist")
    name = _module_name(path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise DagFileError(f"{path} is not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    real_exit = os._exit
    os._exit = _refuse_os_exit  # a DAG file must not end the process that imports it
    try:
        with _time_limit(timeout):
            spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - whatever a DAG file does at import is its error, named, one line
        sys.modules.pop(name, None)
        raise DagFileError(f"importing {path} failed: {_what_the_import_did(exc, timeout)}") from (
            exc if isinstance(exc, Exception) else None
        )
    finally:
        os._exit = real_exit
        try:
            sys.path.remove(folder)
        except ValueError:
            pass
    return module


def _what_the_import_did(exc: BaseException, timeout: float | None) -> str:
    if isinstance(exc, _ImportTookTooLong):
        return f"it took longer than {timeout:g} s ([core] dag_file_import_timeout)"
    if isinstance(exc, _OsExitCalled):
        return f"the file called os._exit({exc.code}) at import"
    if isinstance(exc, SystemExit):
        return f"the file called sys.exit({exc.code!r}) (or raised SystemExit) at import"
    if isinstance(exc, KeyboardInterrupt):
        return "the file raised KeyboardInterrupt at import (or the import was interrupted)"
    message = first_line(exc)
    return type(exc).__name__ if message == type(exc).__name__ else f"{type(exc).__name__}: {message}"


class _ImportTookTooLong(BaseException):
    """Raised by SIGALRM inside a DAG file's import that ran past its time limit."""


@contextlib.contextmanager
def _time_limit(seconds: float | None) -> Iterator[None]:
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum: int, frame: object) -> None:
        raise _ImportTookTooLong()

    previous = signal.signal(signal.SIGALRM, expired)
    outer, outer_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    began = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:  # someone else's alarm (e.g. a test timeout) was pending: give it back what is left of it
            signal.setitimer(signal.ITIMER_REAL, max(0.001, outer - (time.monotonic() - began)), outer_interval)


class _OsExitCalled(BaseException):
    """Raised instead of ending the process when a DAG file calls os._exit() while it is imported."""

    def __init__(self, code: object) -> None:
        super().__init__(code)
        self.code = code


def _refuse_os_exit(status: int = 0) -> NoReturn:
    raise _OsExitCalled(status)


def collect_sensors(module: ModuleType, default_dag_id: str) -> list[tuple[str, BaseSensor]]:
    """(dag_id, sensor) for every module-level sensor, also inside module-level lists, tuples and dicts.

    dag_id: the sensor's own, else the module's ``DAG_ID``, else ``default_dag_id`` (the file's stem).
    """
    module_dag_id = getattr(module, "DAG_ID", None) or default_dag_id
    try:
        validate_id("DAG_ID", module_dag_id)
    except SensorDefinitionError as exc:
        raise DagFileError(f"{getattr(module, '__file__', default_dag_id)}: {exc}") from None
    found: list[BaseSensor] = []
    seen: set[int] = set()
    for value in list(vars(module).values()):
        candidates = (
            value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
        )
        for item in candidates:
            if isinstance(item, BaseSensor) and id(item) not in seen:
                seen.add(id(item))
                found.append(item)
    out: list[tuple[str, BaseSensor]] = []
    keys: set[tuple[str, str]] = set()
    for sensor in found:
        dag_id = sensor.dag_id or module_dag_id
        if (dag_id, sensor.task_id) in keys:
            raise DagFileError(f"task_id {sensor.task_id!r} is defined twice in DAG {dag_id!r}")
        keys.add((dag_id, sensor.task_id))
        out.append((dag_id, sensor))
    return out


def load_sensor_file(path: str | Path, timeout: float | None = None) -> list[tuple[str, BaseSensor]]:
    """Import a sensor file (within ``timeout`` seconds) and return its (dag_id, sensor) pairs."""
    p = Path(path)
    module = import_file(p, timeout)
    sensors = collect_sensors(module, p.stem)
    if not sensors:
        raise DagFileError(f"{p} defines no module-level sensor objects")
    return sensors
