"""Classic poke mode: one process runs one task instance, poking on its own until done or timed out.

The fallback for ineligible sensors, and the baseline every benchmark compares against.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from sqlalchemy import Engine
from sqlalchemy.exc import InterfaceError, OperationalError

from smartsensor.adapters.catalog.batch import BatchChecker
from smartsensor.adapters.sql import tasks as task_sql
from smartsensor.config import Config
from smartsensor.domain.keys import TaskKey
from smartsensor.domain.states import State
from smartsensor.domain.timing import BadExecSettings, ExecSettings, parse_exec, timeout_error, timeout_state
from smartsensor.sensors.base import BaseSensor, resolve_any_class
from smartsensor.sensors.errors import (
    CheckError,
    PermanentCheckError,
    SensorDefinitionError,
    SensorModuleUnavailable,
    SensorRebuildError,
    UnknownSensorClass,
    first_line,
)
from smartsensor.service.dagfile import DagFileError, import_file
from smartsensor.service.round.bounded_poke import BoundedPoker

log = logging.getLogger(__name__)


class TaskRunError(Exception):
    """The task instance cannot be run (missing, wrong state, unknown class)."""


@dataclass
class RunResult:
    """What one classic run did."""

    state: str
    pokes: int
    catalog_calls: int
    fs_calls: int
    seconds: float
    error: str | None = None


class RunHeartbeat:
    """Marks a classic run alive (task_instance.updated_at) every ``interval`` seconds from a thread.

    A thread, not the poke loop, so a long poke interval or a slow Spark start never looks like a
    dead process; when the process dies the beats stop and the scheduler ends the task (zombie).
    ``lost`` is set once the task left `running` (someone else changed it).
    """

    def __init__(self, engine: Engine, key: TaskKey, interval: float) -> None:
        self.engine, self.key, self.interval = engine, key, interval
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="run-heartbeat", daemon=True)

    def __enter__(self) -> "RunHeartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval + 5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                with self.engine.begin() as conn:
                    alive = task_sql.heartbeat_running(conn, self.key, datetime.utcnow())
            except Exception as exc:  # noqa: BLE001 - a DB outage: the next beat tries again
                log.warning("heartbeat of %s.%s failed: %s", self.key[0], self.key[1], first_line(exc))
                continue
            if not alive:
                self.lost.set()
                return


DB_DOWN = (OperationalError, InterfaceError)


def _retry_while_db_down(write: Callable[[], bool], what: str, patience: float, sleep: Callable[[float], None]) -> bool:
    """Run ``write`` until the metadata DB takes it, backing off up to ``patience`` seconds in all.

    Past that the error propagates and the process exits; the scheduler then ends the task as a
    dead run (zombie), so nothing stays `running` for ever.
    """
    waited, delay = 0.0, 0.5
    while True:
        try:
            return write()
        except DB_DOWN as exc:
            if waited >= patience:
                raise
            log.warning("metadata DB unavailable writing %s, retrying in %.1f s: %s", what, delay, first_line(exc))
            sleep(delay)
            waited += delay
            delay = min(delay * 2, 10.0)


def load_sensor_class(row: dict[str, Any], cfg: Config) -> type[BaseSensor]:
    """Resolve a task's class: built-in/configured sensor modules, else the task's own DAG file."""
    classpath = row["classpath"]
    cls = resolve_any_class(classpath, cfg.sensor_modules)
    if cls is None and row.get("fileloc"):
        try:
            import_file(Path(row["fileloc"]), timeout=cfg.get("core", "dag_file_import_timeout"))
        except DagFileError as exc:
            raise TaskRunError(f"cannot load {classpath}: {exc}") from None
        cls = resolve_any_class(classpath, cfg.sensor_modules)
    if cls is None:
        raise TaskRunError(
            f"sensor class {classpath!r} is not known (not built in, not in sensor_modules, "
            f"not defined in the task's DAG file)"
        )
    return cls


def run_task(
    engine: Engine,
    cfg: Config,
    dag_id: str,
    task_id: str,
    execution_date: datetime,
    claimed: bool = False,
    spark_provider: Callable[[], Any] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    stop: threading.Event | None = None,
) -> RunResult:
    """Run one task instance the classic way; every state change is a guarded update from `running`.

    When ``stop`` is set (the CLI sets it on SIGTERM/SIGINT) the run ends at its next poke and hands
    the task back to `scheduled` with its try and start kept, so stopping a scheduler for a deploy
    neither spends a try nor leaves a task `running` until it counts as a zombie.
    """
    key = (dag_id, task_id, execution_date)
    hostname = socket.gethostname()
    with engine.begin() as conn:
        row = task_sql.get_task(conn, dag_id, task_id, execution_date)
        if row is None:
            raise TaskRunError(f"no task instance {dag_id}.{task_id} on {execution_date:%Y-%m-%d}")
        if not claimed:
            if row["state"] != State.SCHEDULED or not task_sql.claim_scheduled(conn, key, datetime.utcnow(), hostname):
                raise TaskRunError(
                    f"{dag_id}.{task_id} is {row['state']}, not scheduled; "
                    f"use `submit --clear` or `set-state` to run it again"
                )
        elif row["state"] != State.RUNNING:
            raise TaskRunError(f"{dag_id}.{task_id} is {row['state']}, not running")
        row = task_sql.get_task(conn, dag_id, task_id, execution_date)
    assert row is not None
    start = row["start_date"] or datetime.utcnow()
    began = time.perf_counter()

    patience = cfg.get("scheduler", "zombie_threshold")

    def finish(state: str, error: str | None = None, checker: BatchChecker | None = None, pokes: int = 0) -> RunResult:
        def write() -> bool:
            with engine.begin() as conn:
                return task_sql.set_state(
                    conn, key, state, from_states=[State.RUNNING], error=error, try_number=row["try_number"]
                )

        changed = _retry_while_db_down(write, f"{dag_id}.{task_id} -> {state}", patience, sleep)
        if not changed:
            log.warning("%s.%s was changed by someone else; leaving it as it is", dag_id, task_id)
            with engine.connect() as conn:
                current = task_sql.get_task(conn, dag_id, task_id, execution_date)
            state = current["state"] if current else state
        return RunResult(
            state,
            pokes,
            checker.catalog_calls if checker else 0,
            checker.fs_calls if checker else 0,
            round(time.perf_counter() - began, 3),
            error,
        )

    try:
        settings = parse_exec(row["exec_dict"])
    except BadExecSettings as exc:  # a row written by hand or an older version: it fails alone, clearly
        return finish(State.FAILED, error=str(exc))

    def build() -> BaseSensor:
        """The task's sensor from its row (SensorModuleUnavailable, SensorRebuildError: try again later)."""
        return load_sensor_class(row, cfg).from_stored(
            row["attr_dict"], row["exec_dict"], task_id=task_id, dag_id=dag_id
        )

    if spark_provider is None:
        from smartsensor.adapters.spark import get_spark

        spark_provider = lambda: get_spark(cfg)  # noqa: E731
    with RunHeartbeat(engine, key, cfg.get("scheduler", "task_heartbeat_interval")):
        return _poke_until_done(
            engine,
            build,
            row,
            settings,
            start,
            began,
            spark_provider,
            finish,
            sleep,
            stop,
            BoundedPoker(cfg.get("smart_sensor", "poke_timeout")),
        )


def _hand_back(engine: Engine, row: dict[str, Any], patience: float, sleep: Callable[[float], None]) -> str:
    """running → scheduled after a stop request; the state the task is in afterwards."""
    key = (row["dag_id"], row["task_id"], row["execution_date"])

    def write() -> bool:
        with engine.begin() as conn:
            return task_sql.hand_back_running(conn, key, datetime.utcnow())

    if _retry_while_db_down(write, f"{key[0]}.{key[1]} -> scheduled", patience, sleep):
        log.warning("%s.%s: stopped, handed back to the scheduler (try %s goes on)", key[0], key[1], row["try_number"])
        return State.SCHEDULED
    with engine.connect() as conn:
        current = task_sql.get_task(conn, *key)
    return current["state"] if current else "deleted"


def _poke_until_done(  # noqa: C901 - 18 branches; becomes an object with named steps in issue 26, item 3
    engine: Engine,
    build: Callable[[], BaseSensor],
    row: dict[str, Any],
    settings: ExecSettings,
    start: datetime,
    began: float,
    spark_provider: Callable[[], Any],
    finish: Callable[..., RunResult],
    sleep: Callable[[float], None],
    stop: threading.Event | None,
    poker: BoundedPoker,
) -> RunResult:
    """The classic poke loop: poke, check the task is still ours, sleep; until success, failure, timeout or stop.

    The sensor is built at the first poke that can build it: while its sensor module cannot be
    imported on this host (a deploy skew) the task waits, within its own timeout, like a transient error.
    """
    dag_id, task_id, execution_date = row["dag_id"], row["task_id"], row["execution_date"]
    key = (dag_id, task_id, execution_date)
    last_error: str | None = None  # the last transient error, named in the timeout's error
    attempted = False
    checker: BatchChecker | None = None
    sensor: BaseSensor | None = None
    pokes = 0

    def stopped() -> RunResult:
        # the DB patience is short: the stopping process should exit soon; a failed hand-back is a zombie later
        return RunResult(
            _hand_back(engine, row, 10.0, sleep),
            pokes,
            checker.catalog_calls if checker else 0,
            checker.fs_calls if checker else 0,
            round(time.perf_counter() - began, 3),
        )

    while True:
        if stop is not None and stop.is_set():
            return stopped()
        now = datetime.utcnow()
        # at least one attempt per run, however late it starts (a slow start must not cost the try its poke)
        if attempted and (now - start).total_seconds() >= settings.time_limit:
            state = timeout_state(row["try_number"], settings)
            return finish(
                state,
                error=None if state == State.UP_FOR_RETRY else timeout_error(last_error),
                checker=checker,
                pokes=pokes,
            )
        attempted = True
        try:
            if sensor is None:
                sensor = build()
        except (SensorModuleUnavailable, SensorRebuildError) as exc:  # a deploy skew on this host: wait
            last_error = str(exc)
            log.warning("%s (poking again later)", exc)
        except (TaskRunError, UnknownSensorClass, SensorDefinitionError) as exc:
            return finish(State.FAILED, error=str(exc), checker=checker, pokes=pokes)
        if sensor is not None:
            try:
                if checker is None:
                    checker = BatchChecker(spark_provider())
            except Exception as exc:  # noqa: BLE001 - Spark failing to start is an outage: keep waiting
                log.warning("cannot start Spark, poking again later: %s", exc)
            else:
                pokes += 1
                context = {"checker": checker, "spark": checker.spark, "execution_date": execution_date}
                outcome = poker.poke(key, lambda: sensor.poke(context))  # noqa: B023 - called within this iteration, bounded by [smart_sensor] poke_timeout
                if outcome is True:
                    return finish(State.SUCCESS, checker=checker, pokes=pokes)
                if isinstance(outcome, PermanentCheckError):
                    return finish(State.FAILED, error=str(outcome), checker=checker, pokes=pokes)
                if isinstance(outcome, CheckError):
                    last_error = str(outcome)
                    log.warning("transient error, poking again later: %s", outcome)
                else:
                    last_error = None
        try:
            with engine.connect() as conn:
                current = task_sql.get_task(conn, dag_id, task_id, execution_date)
        except DB_DOWN as exc:  # cannot tell: assume still ours and keep poking; the heartbeat says the same
            log.warning("metadata DB unavailable, poking on: %s", first_line(exc))
            current = row
        if current is None or current["state"] != State.RUNNING or current["try_number"] != row["try_number"]:
            # a later try running elsewhere is not ours either (this run was given up for dead meanwhile)
            log.warning(
                "%s.%s is now %s, try %s (changed by someone else): stopping",
                dag_id,
                task_id,
                current["state"] if current else "deleted",
                current["try_number"] if current else "-",
            )
            return RunResult(
                current["state"] if current else "deleted",
                pokes,
                checker.catalog_calls if checker else 0,
                checker.fs_calls if checker else 0,
                round(time.perf_counter() - began, 3),
            )
        remaining = settings.time_limit - (datetime.utcnow() - start).total_seconds()
        pause = max(0.0, min(settings.interval(pokes - 1), remaining))
        if stop is not None:
            stop.wait(pause)
        else:
            sleep(pause)
