"""One shard worker: load its range, deduplicate by hash, batch-poke due checks, mark in guarded updates."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from functools import lru_cache
from typing import Any, Callable

from sqlalchemy import Engine

from smartsensor.domain.states import State
from smartsensor.sensors.base import BaseSensor, resolve_smart_class
from smartsensor.sensors.batch import BatchChecker
from smartsensor.sensors.checks import Check, PartitionCheck, PathCheck
from smartsensor.sensors.errors import (CheckError, PermanentCheckError, SensorDefinitionError, SensorModuleUnavailable,
                            SensorRebuildError, TransientCheckError, UnknownSensorClass, first_line)
from smartsensor.adapters.sql import leases as lease_sql, status as status_sql, tasks as task_sql
from smartsensor.domain.keys import Fence, TryKey, WaitingTask
from smartsensor.service.bounded_poke import poker_for
from smartsensor.config import Config
from smartsensor.adapters.sql.engine import statement_count
from smartsensor.service.leases import lease_held
from smartsensor.domain.timing import BadExecSettings, is_due, parse_exec, timed_out, timeout_error, timeout_state

log = logging.getLogger(__name__)

CheckKey = tuple[int, str, str]  # (hashcode, classpath, attr_dict): one distinct check
MODULE_RETRY_SECONDS = 30.0  # a sensor module that failed to import is tried again after this long


def utcnow() -> datetime:
    return datetime.utcnow()


@dataclass
class RoundResult:
    """Counters of one round (printed by ``worker --json``)."""

    shard_min: int
    shard_max: int
    loaded: int = 0
    started: int = 0
    distinct_hashes: int = 0
    distinct_checks: int = 0
    collisions: int = 0
    groups_due: int = 0
    groups_poked: int = 0
    catalog_calls: int = 0
    schema_calls: int = 0
    fs_calls: int = 0
    poke_calls: int = 0
    db_statements: int = 0
    marked: dict[str, int] = field(default_factory=dict)
    transient_errors: int = 0
    permanent_errors: int = 0
    woken: int = 0
    bad_rows: int = 0
    module_errors: dict[str, str] = field(default_factory=dict)
    module_waiting: int = 0
    transient_example: str | None = None  # the first transient error of the round, for `status`
    ranges: list[list[int]] = field(default_factory=list)
    fenced_out: bool = False
    seconds: float = 0.0
    catalog_seconds: float = 0.0
    error: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


@dataclass
class _Group:
    """The tasks waiting on one distinct check."""

    key: CheckKey
    tasks: list[WaitingTask]
    outcome: bool | CheckError | None = None  # None: not poked this round


class ShardWorker:
    """Runs rounds over shard range [shard_min, shard_max).

    Poke times per check are kept in memory; the schedule itself derives from each task's start of
    try, so after a restart every waiting check is simply poked once at once, and nothing is lost.
    """

    def __init__(self, engine: Engine, cfg: Config, shard_min: int, shard_max: int,
                 spark_provider: Callable[[], Any] | None = None, clock: Callable[[], datetime] = utcnow,
                 worker_id: str | None = None, record_rounds: bool = True) -> None:
        if not 0 <= shard_min < shard_max:
            raise ValueError(f"shard range [{shard_min}, {shard_max}) is empty or negative")
        self.engine = engine
        self.cfg = cfg
        self.shard_min = shard_min
        self.shard_max = shard_max
        self.clock = clock
        self.hostname = socket.gethostname()
        self.worker_id = worker_id or f"{self.hostname}:{os.getpid()}:{shard_min}-{shard_max}"
        self.record_rounds = record_rounds
        self._spark_provider = spark_provider
        self._last_poke: dict[CheckKey, datetime] = {}
        self._classes: dict[str, type[BaseSensor] | UnknownSensorClass | tuple[SensorModuleUnavailable, float]] = {}
        self._tables: dict[CheckKey, frozenset[tuple[str, str]]] = {}
        self._wake_lock = threading.Lock()
        self._wake_tables: set[tuple[str, str]] = set()
        self.fence: Fence | None = None  # set by the lease loop; None for a pinned range

    def wake(self, tables: set[tuple[str, str]]) -> None:
        """A landing signal: checks on these (db, table) are due at the next round, whatever their interval."""
        with self._wake_lock:
            self._wake_tables |= tables

    # -- helpers -----------------------------------------------------------------------------
    def spark(self) -> Any:
        """This process's SparkSession (or the provider's)."""
        if self._spark_provider is None:
            from smartsensor.adapters.spark import get_spark
            return get_spark(self.cfg)
        return self._spark_provider()

    def _sensor_class(self, classpath: str) -> type[BaseSensor]:
        cached = self._classes.get(classpath)
        if cached is None or (isinstance(cached, tuple) and time.monotonic() >= cached[1]):
            try:
                cached = resolve_smart_class(classpath, self.cfg.sensors_enabled, self.cfg.sensor_modules)
            except UnknownSensorClass as exc:
                cached = exc
            except SensorModuleUnavailable as exc:  # tried again after a while: the module may be deployed
                cached = (exc, time.monotonic() + MODULE_RETRY_SECONDS)
            self._classes[classpath] = cached
        if isinstance(cached, tuple):
            raise cached[0]
        if isinstance(cached, UnknownSensorClass):
            raise cached
        return cached

    def _build(self, key: CheckKey) -> BaseSensor:
        """The sensor for one check, built from attr_dict alone (allow-listed classes only)."""
        return _rebuild_cached(self._sensor_class(key[1]), key[2])

    # -- the round ---------------------------------------------------------------------------
    def run_round(self) -> RoundResult:
        """Load, start, poke due checks, mark outcomes. DB errors propagate (the loop retries)."""
        return run_rounds([self], self.spark)

    def plan_round(self) -> "RoundPlan":
        """Phase 1: load the range, start new tries, group by check, pick the due groups, build their checks.

        A row that cannot be planned (an exec_dict out of bounds, a sensor that cannot be rebuilt)
        is set aside to fail alone with the reason in ``error``; every other task goes on.
        """
        result = RoundResult(self.shard_min, self.shard_max)
        now = self.clock()
        with self.engine.begin() as conn:
            tasks = task_sql.load_waiting(conn, self.shard_min, self.shard_max)
            if any(t.state == State.SMART_PENDING for t in tasks):
                result.started = task_sql.start_pending(conn, self.shard_min, self.shard_max, now, self.hostname,
                                                       fence=self.fence)
        tasks = [t if t.start_date is not None else _with_start(t, now) for t in tasks]
        result.loaded = len(tasks)

        bad: list[tuple[WaitingTask, str]] = []
        groups: dict[CheckKey, _Group] = {}
        by_hash: dict[int, set[CheckKey]] = defaultdict(set)
        for task in tasks:
            try:
                parse_exec(task.exec_dict)
            except BadExecSettings as exc:
                bad.append((task, str(exc)))
                continue
            key = (task.hashcode, task.classpath, task.attr_dict)
            groups.setdefault(key, _Group(key, [])).tasks.append(task)
            by_hash[task.hashcode].add(key)
        result.distinct_hashes = len(by_hash)
        result.distinct_checks = len(groups)
        collided = {h for h, keys in by_hash.items() if len(keys) > 1}
        result.collisions = len(collided)
        self._forget_finished(groups)

        with self._wake_lock:
            woken, self._wake_tables = self._wake_tables, set()
        due = []
        for g in list(groups.values()):
            try:
                if (woken and self._tables.get(g.key, frozenset()) & woken) or any(
                        is_due(t.start_date, self._last_poke.get(g.key), parse_exec(t.exec_dict), now) for t in g.tasks):
                    due.append(g)
            except (ArithmeticError, ValueError) as exc:  # dates out of range: these rows cannot be planned
                bad.extend((t, f"cannot schedule the next poke: {type(exc).__name__}: {exc}") for t in g.tasks)
                del groups[g.key]
        result.woken = len(woken)
        result.groups_due = len(due)
        plan = RoundPlan(self, result, groups, collided, now, due, bad=bad)
        for g in due:
            try:
                sensor = self._build(g.key)
                checks = sensor.checks()
            except SensorModuleUnavailable as exc:
                g.outcome = TransientCheckError(str(exc))
                result.module_errors[exc.module] = str(exc)
                result.module_waiting += len(g.tasks)
                continue
            except (UnknownSensorClass, SensorDefinitionError) as exc:
                g.outcome = PermanentCheckError(str(exc))
                continue
            except SensorRebuildError as exc:  # maybe another version of the class here: its tasks wait
                g.outcome = exc
                continue
            except (Exception, SystemExit, KeyboardInterrupt) as exc:  # noqa: BLE001 - a user's checks() may raise
                g.outcome = TransientCheckError(f"{g.key[1]}.checks() raised {type(exc).__name__}: {first_line(exc)}")
                continue
            if checks is not None and (not isinstance(checks, list) or
                                       not all(isinstance(c, (PartitionCheck, PathCheck)) for c in checks)):
                g.outcome = PermanentCheckError(f"{g.key[1]}.checks() must return a list of PartitionCheck/PathCheck "
                                                f"or None, got {type(checks).__name__}")
                continue
            self._tables[g.key] = frozenset(c.table_key for c in checks or () if isinstance(c, PartitionCheck))
            if checks is None:
                plan.sensors[g.key] = sensor
            else:
                plan.batched[g.key] = checks
        result.bad_rows = len(bad)
        return plan

    def finish_round(self, plan: "RoundPlan") -> RoundResult:
        """Phase 3: remember poke times and write every outcome in one transaction of guarded updates."""
        poke_time = self.clock()
        for g in plan.due:
            if g.outcome is not None:
                self._last_poke[g.key] = poke_time
        plan.result.groups_poked = sum(1 for g in plan.due if g.outcome is not None)
        self._write(plan.groups, plan.collided, plan.now, plan.result, plan.bad)
        return plan.result

    def _write(self, groups: dict[CheckKey, _Group], collided: set[int], now: datetime, result: RoundResult,
               bad: list[tuple[WaitingTask, str]]) -> None:
        """All state changes of the round in one transaction, each a guarded update."""
        landed_hashes: list[int] = []
        landed_collided: list[CheckKey] = []
        failed: list[_Group] = []
        timeouts: dict[tuple[str, str | None], list[TryKey]] = defaultdict(list)
        for g in groups.values():
            if g.outcome is True:
                if g.key[0] in collided:
                    landed_collided.append(g.key)
                else:
                    landed_hashes.append(g.key[0])
                continue
            if isinstance(g.outcome, PermanentCheckError):
                result.permanent_errors += 1
                failed.append(g)
                continue
            if isinstance(g.outcome, TransientCheckError):
                result.transient_errors += 1
                result.transient_example = result.transient_example or str(g.outcome)[:500]
                log.warning("transient error on check %s: %s", g.key[0], g.outcome)
            error = timeout_error(g.outcome if isinstance(g.outcome, CheckError) else None)
            for t in g.tasks:
                settings = parse_exec(t.exec_dict)
                if timed_out(t.start_date, settings, now):
                    state = timeout_state(t.try_number, settings)
                    timeouts[(state, None if state == State.UP_FOR_RETRY else error)].append(t.try_key)

        for task, why in bad:
            log.warning("task %s.%s %s cannot be planned, failing it alone: %s", task.dag_id, task.task_id,
                        task.execution_date, why)

        marked: dict[str, int] = defaultdict(int)
        fence = self.fence
        if not (landed_hashes or landed_collided or failed or timeouts or bad):
            result.marked = {}
            return
        now = self.clock()  # the fence is checked against the time of the write, not of the round's start
        with self.engine.begin() as conn:
            if landed_hashes:
                marked[State.SUCCESS] += task_sql.mark_hashes(
                    conn, landed_hashes, self.shard_min, self.shard_max, State.SUCCESS, now, fence=fence)
            for key in landed_collided:
                marked[State.SUCCESS] += task_sql.mark_check(conn, key[0], key[1], key[2], State.SUCCESS, now,
                                                            fence=fence)
            for g in failed:
                message = str(g.outcome)
                if g.key[0] in collided:
                    n = task_sql.mark_check(conn, g.key[0], g.key[1], g.key[2], State.FAILED, now, error=message,
                                           fence=fence)
                else:
                    n = task_sql.mark_hashes(conn, [g.key[0]], self.shard_min, self.shard_max, State.FAILED, now,
                                            error=message, fence=fence)
                marked[State.FAILED] += n
            for (state, error), tries in timeouts.items():
                marked[state] += task_sql.end_tries(conn, tries, state, now, error=error, fence=fence)
            for task, why in bad:
                marked[State.FAILED] += task_sql.end_tries(conn, [task.try_key], State.FAILED, now, error=why,
                                                          fence=fence)
        result.marked = {k: v for k, v in marked.items() if v}
        if fence is not None and not result.marked:
            result.fenced_out = not self._still_owner(fence, now)

    def _still_owner(self, fence: Fence, now: datetime) -> bool:
        with self.engine.connect() as conn:
            return any(r["shard_min"] == fence.shard_min and r["owner"] == fence.owner and r["epoch"] == fence.epoch
                       and lease_held(r, now) for r in lease_sql.load_leases(conn))

    def _forget_finished(self, groups: dict[CheckKey, _Group]) -> None:
        for key in [k for k in self._last_poke if k not in groups]:
            del self._last_poke[key]
        for key in [k for k in self._tables if k not in groups]:
            del self._tables[key]

    def record(self, result: RoundResult) -> None:
        """Store this round's result for `smartsensor status` (failures to do so are only logged)."""
        try:
            with self.engine.begin() as conn:
                status_sql.record_round(conn, self.worker_id, self.hostname, os.getpid(), self.shard_min,
                                     self.shard_max, self.clock(), result.seconds, result.to_json())
        except Exception as exc:  # noqa: BLE001 - status bookkeeping must not fail a round
            log.warning("could not record round: %s", exc)

    def forget(self) -> None:
        """Remove this worker's status row (clean stop)."""
        with self.engine.begin() as conn:
            status_sql.forget_worker(conn, self.worker_id)


@lru_cache(maxsize=200_000)
def _rebuild_cached(cls: type[BaseSensor], attr_dict: str) -> BaseSensor:
    """Sensors rebuilt from attr_dict, cached per (class, attr_dict): a check waiting for hours is
    parsed and validated once, not every round (the profile's second-largest cost on W2)."""
    return cls.from_stored(attr_dict)


def _with_start(task: WaitingTask, now: datetime) -> WaitingTask:
    return replace(task, state=State.SMART_RUNNING, start_date=now)


def _combine(outcomes: list[bool | CheckError]) -> bool | CheckError:
    """All checks of a sensor must hold; a permanent error wins over a transient one."""
    for o in outcomes:
        if isinstance(o, PermanentCheckError):
            return o
    for o in outcomes:
        if isinstance(o, CheckError):
            return o
    return all(outcomes)


@dataclass
class RoundPlan:
    """One range's round between loading and writing: what is due and which checks answer it."""

    worker: ShardWorker
    result: RoundResult
    groups: dict[CheckKey, _Group]
    collided: set[int]
    now: datetime
    due: list[_Group]
    batched: dict[CheckKey, list[Check]] = field(default_factory=dict)
    sensors: dict[CheckKey, BaseSensor] = field(default_factory=dict)
    bad: list[tuple[WaitingTask, str]] = field(default_factory=list)  # rows that fail alone, with the reason


def poke_plans(plans: list[RoundPlan], spark_provider: Callable[[], Any]) -> dict[str, float]:
    """Phase 2, for all ranges of a process at once: one BatchChecker, one catalog call per table,
    and each user sensor's poke() once per distinct check, each within [smart_sensor] poke_timeout.
    Outcomes go into the plans' groups."""
    counters: dict[str, float] = {"catalog_calls": 0, "schema_calls": 0, "fs_calls": 0, "poke_calls": 0,
                                  "catalog_seconds": 0.0}
    if not any(p.batched or p.sensors for p in plans):
        return counters
    try:
        checker = BatchChecker(spark_provider())
    except Exception as exc:  # noqa: BLE001 - Spark failing to start is an outage, not a bad check
        log.warning("cannot start Spark: %s", exc)
        for p in plans:
            for g in p.due:
                if g.outcome is None:
                    g.outcome = TransientCheckError(f"Spark unavailable: {exc}")
        return counters
    answers = checker.check_all(c for p in plans for checks in p.batched.values() for c in checks)
    context = {"checker": checker, "spark": checker.spark}
    poker = poker_for(plans[0].worker.cfg.get("smart_sensor", "poke_timeout"))
    for p in plans:
        for g in p.due:
            if g.key in p.batched:
                g.outcome = _combine([answers[c] for c in p.batched[g.key]])
                continue
            sensor = p.sensors.get(g.key)
            if sensor is None:
                continue
            counters["poke_calls"] += 1
            g.outcome = poker.poke(g.key, lambda sensor=sensor: sensor.poke(context))  # type: ignore[misc]
            if isinstance(g.outcome, TransientCheckError):
                log.warning("poke of %s: %s (treated as transient)", g.key[1], g.outcome)
    counters.update(catalog_calls=checker.catalog_calls, schema_calls=checker.schema_calls, fs_calls=checker.fs_calls,
                    catalog_seconds=round(checker.catalog_seconds, 4))
    return counters


_SUMMED = ("loaded", "started", "distinct_hashes", "distinct_checks", "collisions", "groups_due", "groups_poked",
           "transient_errors", "permanent_errors", "woken", "bad_rows", "module_waiting")


def run_rounds(workers: list[ShardWorker], spark_provider: Callable[[], Any]) -> RoundResult:
    """One round over the ranges one process owns, reported as one result (``ranges`` lists them).

    Loads and writes stay per range (each write fenced by its own lease); the checks of all ranges
    are answered together, so a table is listed once per round per process, not once per range.
    """
    if not workers:
        return RoundResult(0, 0)
    engine = workers[0].engine
    started_at = time.perf_counter()
    stmt0 = statement_count(engine)
    plans = [w.plan_round() for w in workers]
    counters = poke_plans(plans, spark_provider)
    results = [p.worker.finish_round(p) for p in plans]
    total = RoundResult(min(w.shard_min for w in workers), max(w.shard_max for w in workers),
                        ranges=[[w.shard_min, w.shard_max] for w in workers])
    for name in _SUMMED:
        setattr(total, name, sum(getattr(r, name) for r in results))
    marked: dict[str, int] = defaultdict(int)
    for r in results:
        for k, v in r.marked.items():
            marked[k] += v
    total.marked = dict(marked)
    total.fenced_out = any(r.fenced_out for r in results)
    for r in results:
        total.module_errors.update(r.module_errors)
        total.transient_example = total.transient_example or r.transient_example
    total.catalog_calls = int(counters["catalog_calls"])
    total.schema_calls = int(counters["schema_calls"])
    total.fs_calls = int(counters["fs_calls"])
    total.poke_calls = int(counters["poke_calls"])
    total.catalog_seconds = counters["catalog_seconds"]
    total.db_statements = statement_count(engine) - stmt0
    total.seconds = round(time.perf_counter() - started_at, 4)
    for w in workers:
        if w.record_rounds:
            w.record(total)
    return total
