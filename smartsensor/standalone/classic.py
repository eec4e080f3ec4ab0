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

from smartsensor.adapters.catalog.batch import BatchChecker
from smartsensor.adapters.lifecycle import Stopping
from smartsensor.adapters.periodic import PeriodicJobs
from smartsensor.adapters.spark import SparkNotInstalled, get_spark
from smartsensor.config import Config
from smartsensor.domain import clock
from smartsensor.domain.keys import TaskKey
from smartsensor.domain.rows import TaskRow
from smartsensor.domain.states import State
from smartsensor.domain.timing import BadExecSettings, ExecSettings, parse_exec, timeout_error, timeout_state
from smartsensor.ports import ClassicRunStore, StoreUnavailable
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
from smartsensor.service.round.bounded_poke import BoundedPoker
from smartsensor.service.round.poke import PokeContext
from smartsensor.standalone.dagfile import DagFileError, import_file

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
    """Marks a classic run alive (task_instance.updated_at) every ``interval`` seconds: a job of the run's
    ``PeriodicJobs`` (``schedule``).

    A side job, not the poke loop, so a long poke interval or a slow Spark start never looks like a
    dead process; when the process dies the beats stop and the scheduler ends the task (zombie).
    ``lost`` is set once the task left `running` (someone else changed it); the beats stop then.
    """

    JOB = "run-heartbeat"

    def __init__(self, store: ClassicRunStore, key: TaskKey, interval: float) -> None:
        self.store, self.key, self.interval = store, key, interval
        self.lost = threading.Event()
        self._jobs: PeriodicJobs | None = None

    def schedule(self, jobs: PeriodicJobs) -> None:
        """Beat every ``interval`` seconds on ``jobs``, the first after one interval."""
        self._jobs = jobs
        jobs.every(self.JOB, self.interval, self.beat)

    def beat(self) -> None:
        """One beat; a failure (a DB outage) is logged and the next beat tries again."""
        try:
            alive = self.store.beat(self.key, clock.now())
        except Exception as exc:  # noqa: BLE001 - a DB outage: the next beat tries again
            log.warning("heartbeat of %s.%s failed: %s", self.key.dag_id, self.key.task_id, first_line(exc))
            return
        if not alive:
            self.lost.set()
            if self._jobs is not None:
                self._jobs.remove(self.JOB)


def _retry_while_db_down(write: Callable[[], bool], what: str, patience: float, sleep: Callable[[float], None]) -> bool:
    """Run ``write`` until the metadata DB takes it, backing off up to ``patience`` seconds in all.

    Past that the error propagates and the process exits; the scheduler then ends the task as a
    dead run (zombie), so nothing stays `running` for ever.
    """
    waited, delay = 0.0, 0.5
    while True:
        try:
            return write()
        except StoreUnavailable as exc:
            if waited >= patience:
                raise
            log.warning("metadata DB unavailable writing %s, retrying in %.1f s: %s", what, delay, first_line(exc))
            sleep(delay)
            waited += delay
            delay = min(delay * 2, 10.0)


def load_sensor_class(row: TaskRow, cfg: Config) -> type[BaseSensor]:
    """Resolve a task's class: built-in/configured sensor modules, else the task's own DAG file."""
    classpath = row.classpath
    cls = resolve_any_class(classpath, cfg.sensor_modules)
    if cls is None and row.fileloc:
        try:
            import_file(Path(row.fileloc), timeout=cfg.settings.core.dag_file_import_timeout)
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
    store: ClassicRunStore,
    cfg: Config,
    dag_id: str,
    task_id: str,
    execution_date: datetime,
    claimed: bool = False,
    spark_provider: Callable[[], Any] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    stop: Stopping | None = None,
) -> RunResult:
    """Run one task instance the classic way; every state change is a guarded update from `running`.

    When ``stop`` is set (the CLI sets it on SIGTERM/SIGINT) the run ends at its next poke and hands
    the task back to `scheduled` with its try and start kept, so stopping a scheduler for a deploy
    neither spends a try nor leaves a task `running` until it counts as a zombie.
    """
    key = TaskKey(dag_id, task_id, execution_date)
    hostname = socket.gethostname()
    found, row = store.claim_run(key, clock.now(), hostname, claimed)
    if found is None:
        raise TaskRunError(f"no task instance {dag_id}.{task_id} on {execution_date:%Y-%m-%d}")
    if row is None and claimed:
        raise TaskRunError(f"{dag_id}.{task_id} is {found.state}, not running")
    if row is None:
        raise TaskRunError(
            f"{dag_id}.{task_id} is {found.state}, not scheduled; use `submit --clear` or `set-state` to run it again"
        )
    run = ClassicRun(store, cfg, row, spark_provider, sleep, stop)
    try:
        settings = parse_exec(row.exec_dict)
    except BadExecSettings as exc:  # a row written by hand or an older version: it fails alone, clearly
        return run.finish(State.FAILED, error=str(exc))
    interval = cfg.settings.scheduler.task_heartbeat_interval
    # The run's one scheduler of side jobs; a beat in flight at the end is waited for as long as one may take.
    with PeriodicJobs("run-task", stop_timeout=interval + 5) as jobs:
        RunHeartbeat(store, key, interval).schedule(jobs)
        return run.poke_until_done(settings)


def _hand_back(store: ClassicRunStore, row: TaskRow, patience: float, sleep: Callable[[float], None]) -> str:
    """running → scheduled after a stop request; the state the task is in afterwards."""
    key = row.key

    def write() -> bool:
        return store.hand_back(key, clock.now())

    if _retry_while_db_down(write, f"{key.dag_id}.{key.task_id} -> scheduled", patience, sleep):
        log.warning(
            "%s.%s: stopped, handed back to the scheduler (try %s goes on)", key.dag_id, key.task_id, row.try_number
        )
        return State.SCHEDULED
    current = store.read_task(key)
    return current.state if current else "deleted"


class ClassicRun:
    """One classic run of a claimed task instance, as named steps: poke, check the task is still ours, pause;
    until success, failure, timeout or a stop. ``result`` is the one place a RunResult is made.

    The sensor is built at the first poke that can build it: while its sensor module cannot be imported on this
    host (a deploy skew) the task waits, within its own timeout, like a transient error. Spark starts only when
    the sensor's poke needs it, as in a round (the same lazy BatchChecker and PokeContext): a partition, a path
    that is not file://, a user sensor reading ``context['spark']``. Where it is needed and PySpark is not
    installed the try fails at that poke, with the install hint; a Spark that fails to start (no Java, the JVM)
    is an outage, a transient error of that poke, tried again at the next.
    """

    def __init__(
        self,
        store: ClassicRunStore,
        cfg: Config,
        row: TaskRow,
        spark_provider: Callable[[], Any] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        stop: Stopping | None = None,
    ) -> None:
        self.store, self.cfg, self.row, self.sleep, self.stop = store, cfg, row, sleep, stop
        self.key = row.key
        self.start = row.start_date or clock.now()
        self.began = time.perf_counter()
        self.spark_provider = spark_provider or self._own_spark
        self.poker = BoundedPoker(cfg.settings.smart_sensor.poke_timeout)
        self.checker: BatchChecker | None = None
        self.sensor: BaseSensor | None = None
        self.pokes = 0
        self.last_error: str | None = None  # the last transient error, named in the timeout's error
        self.spark_missing: str | None = None  # set when the sensor needed Spark and PySpark is not installed

    def poke_until_done(self, settings: ExecSettings) -> RunResult:
        """The loop. At least one poke per run, however late it starts (a slow start must not cost the try its
        poke); a stop request hands the task back after the poke under way."""
        attempted = False
        while True:
            if self.stop is not None and self.stop.is_set():
                return self.stopped()
            if attempted and (clock.now() - self.start).total_seconds() >= settings.time_limit:
                return self.timed_out(settings)
            attempted = True
            ended = self.poke_once()
            if ended is not None:
                return ended
            lost = self.lost()
            if lost is not None:
                return lost
            self.pause(settings)

    def poke_once(self) -> RunResult | None:
        """Build what is missing (sensor, checker) and poke once; a result when that ends the run."""
        try:
            if self.sensor is None:
                self.sensor = self._build()
        except (SensorModuleUnavailable, SensorRebuildError) as exc:  # a deploy skew on this host: wait
            self.last_error = str(exc)
            log.warning("%s (poking again later)", exc)
            return None
        except (TaskRunError, UnknownSensorClass, SensorDefinitionError) as exc:
            return self.finish(State.FAILED, error=str(exc))
        if self.checker is None:
            self.checker = BatchChecker(spark_provider=self._start_spark)  # Spark starts when a check needs it
        else:
            self.checker.retry_spark()  # a failed start is tried again, once per poke
        self.pokes += 1
        sensor, context = self.sensor, PokeContext(self.checker)
        context["execution_date"] = self.key.execution_date
        outcome = self.poker.poke(self.key, lambda: sensor.poke(context))
        if outcome is True:
            return self.finish(State.SUCCESS)
        if self.spark_missing is not None:  # however the poke took it: this host cannot answer this sensor
            return self.finish(State.FAILED, error=f"this sensor needs Spark: {self.spark_missing}")
        if isinstance(outcome, PermanentCheckError):
            return self.finish(State.FAILED, error=str(outcome))
        if isinstance(outcome, CheckError):
            self.last_error = str(outcome)
            log.warning("transient error, poking again later: %s", outcome)
        else:
            self.last_error = None
        return None

    def lost(self) -> RunResult | None:
        """A result when the task is no longer this run's (someone changed it, or a later try runs elsewhere)."""
        try:
            current = self.store.read_task(self.key)
        except StoreUnavailable as exc:  # cannot tell: assume still ours and keep poking; the heartbeat says the same
            log.warning("metadata DB unavailable, poking on: %s", first_line(exc))
            return None
        if current is not None and current.state == State.RUNNING and current.try_number == self.row.try_number:
            return None
        log.warning(
            "%s.%s is now %s, try %s (changed by someone else): stopping",
            self.key.dag_id,
            self.key.task_id,
            current.state if current else "deleted",
            current.try_number if current else "-",
        )
        return self.result(current.state if current else "deleted")

    def pause(self, settings: ExecSettings) -> None:
        """Wait for the next poke (its interval, never past the time limit); a stop request cuts it short."""
        remaining = settings.time_limit - (clock.now() - self.start).total_seconds()
        pause = max(0.0, min(settings.interval(self.pokes - 1), remaining))
        if self.stop is not None:
            self.stop.wait(pause)
        else:
            self.sleep(pause)

    def timed_out(self, settings: ExecSettings) -> RunResult:
        state = timeout_state(self.row.try_number, settings)
        return self.finish(state, error=None if state == State.UP_FOR_RETRY else timeout_error(self.last_error))

    def stopped(self) -> RunResult:
        """Hand the task back (same try); the DB patience is short: the stopping process should exit soon, and a
        failed hand-back is a zombie later."""
        return self.result(_hand_back(self.store, self.row, 10.0, self.sleep))

    def finish(self, state: str, error: str | None = None) -> RunResult:
        """End the try: a guarded write from `running` in this try, retried while the DB is down (up to
        zombie_threshold). Someone else's change wins, and is what the result says."""

        def write() -> bool:
            return self.store.end_try(self.key, state, clock.now(), error=error, try_number=self.row.try_number)

        patience = self.cfg.settings.scheduler.zombie_threshold
        if not _retry_while_db_down(write, f"{self.key.dag_id}.{self.key.task_id} -> {state}", patience, self.sleep):
            log.warning("%s.%s was changed by someone else; leaving it as it is", self.key.dag_id, self.key.task_id)
            current = self.store.read_task(self.key)
            state = current.state if current else state
        return self.result(state, error)

    def result(self, state: str, error: str | None = None) -> RunResult:
        checker = self.checker
        return RunResult(
            state,
            self.pokes,
            checker.catalog_calls if checker else 0,
            checker.fs_calls if checker else 0,
            round(time.perf_counter() - self.began, 3),
            error,
        )

    def _build(self) -> BaseSensor:
        """The task's sensor from its row (SensorModuleUnavailable, SensorRebuildError: try again later)."""
        return load_sensor_class(self.row, self.cfg).from_stored(
            self.row.attr_dict, self.row.exec_dict, task_id=self.key.task_id, dag_id=self.key.dag_id
        )

    def _start_spark(self) -> Any:
        """The checker's Spark provider: PySpark missing is noted, to end the try after this poke."""
        try:
            return self.spark_provider()
        except SparkNotInstalled as exc:
            self.spark_missing = first_line(exc)
            raise

    def _own_spark(self) -> Any:
        return get_spark(self.cfg)
