"""A parked try's log (issue 66): what it waited for, when it was registered, when and why it ended or was handed
back, written by the parking attendant where Airflow's UI and REST API read a try's local logs.

Airflow reads a try's local log files as every file whose name starts with the try's log file's
(``[logging] base_log_folder`` / ``[logging] log_filename_template``, e.g. ``…/attempt=1.log``), on 2.10 and 3.x
alike: that is how a trigger's log (``attempt=1.log.trigger.<job>.log``) joins the worker's. The attendant's goes
beside them as ``attempt=<n>.log.attendant.log``, in Airflow's format for that version (3.x: JSON lines; 2.10: text
lines). The reader sees it where it sees the local logs: the host it runs on, or a shared log folder; remote logging
(a bucket) does not carry it."""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import jinja2.sandbox

from smartsensor_airflow._compat import airflow_conf, airflow_version

log = logging.getLogger("smartsensor_airflow.attendant")

SUFFIX = ".attendant.log"
Key = tuple[str, str, str, int]  # a task instance's: dag_id, run_id, task_id, map_index


def log_file(key: Key, try_number: int) -> Path | None:
    """Where the attendant writes ``key``'s try ``try_number``'s log, or None when Airflow's log file name for it
    cannot be made here (a ``log_filename_template`` that needs more than the try's key)."""
    base = airflow_conf.get("logging", "base_log_folder", fallback=None)
    template = airflow_conf.get("logging", "log_filename_template", fallback=None)
    if not base or not template:
        return None
    dag_id, run_id, task_id, map_index = key
    ti = SimpleNamespace(dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index, try_number=try_number)
    try:
        name = _compiled(template).render(ti=ti, try_number=try_number)
    except Exception as exc:  # noqa: BLE001 - a template about more than the key: no log, said once per process
        _warn_once(f"no parked try logs: [logging] log_filename_template needs more than the try's key: {exc}")
        return None
    return Path(base, name + SUFFIX)


@functools.lru_cache(maxsize=4)
def _compiled(template: str) -> jinja2.Template:
    """Airflow's log file name template, compiled once per process (a flush names many tries' files)."""
    return jinja2.sandbox.SandboxedEnvironment(undefined=jinja2.StrictUndefined).from_string(template)


def line(when: datetime, text: str) -> str:
    """One log line in the running Airflow's own format."""
    if airflow_version()[0] >= 3:
        return json.dumps({"timestamp": when.isoformat(), "level": "info", "event": text, "logger": "smartsensor"})
    return f"[{when.isoformat()}] {{smartsensor attendant}} INFO - {text}"


class TryJournal:
    """The lines of parked tries' logs, kept until ``flush`` appends them to their files (on the attendant's
    database threads: file writes do not hold its event loop)."""

    def __init__(self) -> None:
        self.pending: dict[tuple[Key, int], list[str]] = defaultdict(list)
        self.lock = threading.Lock()  # noted on the event loop and the database threads

    def note(self, key: Key, try_number: int, text: str) -> None:
        """Add ``text`` to the try's log, stamped now."""
        stamped = line(datetime.now(timezone.utc), f"smartsensor: {text}")
        with self.lock:
            self.pending[(key, try_number)].append(stamped)

    def flush(self) -> int:
        """Append every pending line to its try's file; how many files were written. A file that cannot be written
        (permissions, a full disk) loses its lines, logged: a log never stops the attendant."""
        with self.lock:
            pending, self.pending = self.pending, defaultdict(list)
        written = 0
        for (key, try_number), lines in pending.items():
            path = log_file(key, try_number)
            if path is None:
                continue
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with path.open("a", encoding="utf-8") as out:
                    out.write("".join(f"{one}\n" for one in lines))
                written += 1
            except OSError as exc:
                _warn_once(f"a parked try's log could not be written ({path}): {exc}")
        return written


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        log.warning("smartsensor attendant: %s", message)
