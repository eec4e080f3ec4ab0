"""A shard round, as named steps.

Per range (``ShardWorker``): load → group by check → pick the due checks → build their checks.
For all ranges of a process at once: poke (``service.poke``: one catalog call per table).
Per range again: decide (``domain.transitions``) → write (one transaction of guarded, fenced updates).
``run_round`` is the one entry point that runs these steps; the runner calls it on its timer.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import defaultdict
from datetime import datetime
from functools import lru_cache
from typing import Callable

from smartsensor.config import Config
from smartsensor.domain.keys import CheckKey, Fence, WaitingTask
from smartsensor.domain.states import State
from smartsensor.domain.timing import BadExecSettings, is_due, parse_exec
from smartsensor.domain.transitions import CheckGroup, decide
from smartsensor.ports import CheckAnswerer, RoundStore
from smartsensor.sensors.base import BaseSensor, resolve_smart_class
from smartsensor.sensors.checks import Check, PartitionCheck, PathCheck
from smartsensor.sensors.errors import (PermanentCheckError, SensorDefinitionError, SensorModuleUnavailable,
                                        SensorRebuildError, TransientCheckError, UnknownSensorClass, first_line)
from smartsensor.service.round.poke import poke_plans
from smartsensor.service.round.plan import RoundPlan
from smartsensor.service.round.report import RoundResult, combine_results

log = logging.getLogger(__name__)

MODULE_RETRY_SECONDS = 30.0  # a sensor module that failed to import is tried again after this long


def utcnow() -> datetime:
    return datetime.utcnow()


class ShardWorker:
    """The round steps of shard range [shard_min, shard_max).

    Poke times per check are kept in memory; the schedule itself derives from each task's start of
    try, so after a restart every waiting check is simply poked once at once, and nothing is lost.
    ``fence`` is set by the lease runner (None for a pinned range): writes apply only under it.
    """

    def __init__(self, store: RoundStore, cfg: Config, shard_min: int, shard_max: int,
                 clock: Callable[[], datetime] = utcnow, worker_id: str | None = None,
                 record_rounds: bool = True) -> None:
        if not 0 <= shard_min < shard_max:
            raise ValueError(f"shard range [{shard_min}, {shard_max}) is empty or negative")
        self.store = store
        self.cfg = cfg
        self.shard_min = shard_min
        self.shard_max = shard_max
        self.clock = clock
        self.hostname = socket.gethostname()
        self.worker_id = worker_id or f"{self.hostname}:{os.getpid()}:{shard_min}-{shard_max}"
        self.record_rounds = record_rounds
        self.fence: Fence | None = None
        self._last_poke: dict[CheckKey, datetime] = {}
        self._classes: dict[str, type[BaseSensor] | UnknownSensorClass | tuple[SensorModuleUnavailable, float]] = {}
        self._tables: dict[CheckKey, frozenset[tuple[str, str]]] = {}
        self._wake_lock = threading.Lock()
        self._wake_tables: set[tuple[str, str]] = set()

    def wake(self, tables: set[tuple[str, str]]) -> None:
        """A landing signal: checks on these (db, table) are due at the next round, whatever their interval."""
        with self._wake_lock:
            self._wake_tables |= tables

    # -- steps before the poke ---------------------------------------------------------------
    def plan_round(self) -> RoundPlan:
        """Load, group, pick the due checks and build them. A row that cannot be planned (an exec_dict out
        of bounds, dates that overflow) is set aside to fail alone with the reason; every other task goes on."""
        now = self.clock()
        result = RoundResult(self.shard_min, self.shard_max)
        tasks = self._load(now, result)
        bad: list[tuple[WaitingTask, str]] = []
        groups, collided = self._group(tasks, bad, result)
        due = self._pick_due(groups, now, bad, result)
        plan = RoundPlan(result, groups, collided, now, due, bad=bad)
        self._build_checks(plan)
        result.bad_rows = len(bad)
        return plan

    def _load(self, now: datetime, result: RoundResult) -> list[WaitingTask]:
        """The range's waiting tasks; pending ones are started (their try's clock begins now)."""
        tasks, result.started = self.store.load_range(self.shard_min, self.shard_max, now, self.hostname, self.fence)
        result.loaded = len(tasks)
        return [t if t.start_date is not None else t._replace(state=State.SMART_RUNNING, start_date=now)
                for t in tasks]

    def _group(self, tasks: list[WaitingTask], bad: list[tuple[WaitingTask, str]],
               result: RoundResult) -> tuple[dict[CheckKey, CheckGroup], set[int]]:
        """Deduplicate: one group per distinct check. Hashes shared by different checks are collisions."""
        groups: dict[CheckKey, CheckGroup] = {}
        by_hash: dict[int, set[CheckKey]] = defaultdict(set)
        for task in tasks:
            try:
                parse_exec(task.exec_dict)
            except BadExecSettings as exc:
                bad.append((task, str(exc)))
                continue
            key = (task.hashcode, task.classpath, task.attr_dict)
            groups.setdefault(key, CheckGroup(key, [])).tasks.append(task)
            by_hash[task.hashcode].add(key)
        collided = {h for h, keys in by_hash.items() if len(keys) > 1}
        result.distinct_hashes, result.distinct_checks, result.collisions = len(by_hash), len(groups), len(collided)
        for cache in (self._last_poke, self._tables):  # forget checks that finished
            for key in [k for k in cache if k not in groups]:
                del cache[key]
        return groups, collided

    def _pick_due(self, groups: dict[CheckKey, CheckGroup], now: datetime, bad: list[tuple[WaitingTask, str]],
                  result: RoundResult) -> list[CheckGroup]:
        """Checks due by some task's own poke schedule, or on a table a landing signal named."""
        with self._wake_lock:
            woken, self._wake_tables = self._wake_tables, set()
        due = []
        for g in list(groups.values()):
            try:
                if (woken and self._tables.get(g.key, frozenset()) & woken) or any(
                        is_due(t.start_date, self._last_poke.get(g.key), parse_exec(t.exec_dict), now)  # type: ignore[arg-type]
                        for t in g.tasks):
                    due.append(g)
            except (ArithmeticError, ValueError) as exc:  # dates out of range: these rows cannot be planned
                bad.extend((t, f"cannot schedule the next poke: {type(exc).__name__}: {exc}") for t in g.tasks)
                del groups[g.key]
        result.woken, result.groups_due = len(woken), len(due)
        return due

    def _build_checks(self, plan: RoundPlan) -> None:
        """Rebuild each due check's sensor from attr_dict (allow-listed classes only) and ask it for its checks.
        A sensor that cannot be built gets its outcome here: permanent or transient, by the reason."""
        for g in plan.due:
            try:
                sensor, checks = _rebuilt_with_checks(self._sensor_class(g.key[1]), g.key[2])
            except SensorModuleUnavailable as exc:
                g.outcome = TransientCheckError(str(exc))
                plan.result.module_errors[exc.module] = str(exc)
                plan.result.module_waiting += len(g.tasks)
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

    # -- steps after the poke ----------------------------------------------------------------
    def finish_round(self, plan: RoundPlan) -> RoundResult:
        """Remember poke times, decide every task's transition, write them in one transaction."""
        result = plan.result
        poke_time = self.clock()
        for g in plan.due:
            if g.outcome is not None:
                self._last_poke[g.key] = poke_time
        result.groups_poked = sum(1 for g in plan.due if g.outcome is not None)
        decision = decide(list(plan.groups.values()), plan.collided, plan.now, plan.bad)
        result.permanent_errors = decision.permanent_errors
        result.transient_errors = decision.transient_errors
        result.transient_example = decision.transient_example
        if decision.transient_example:
            log.warning("transient errors on %d check(s), e.g. %s", decision.transient_errors,
                        decision.transient_example)
        for task, why in plan.bad:
            log.warning("task %s.%s %s cannot be planned, failing it alone: %s", task.dag_id, task.task_id,
                        task.execution_date, why)
        if decision.writes.empty():
            return result
        now = self.clock()  # the fence is checked against the time of the write, not of the round's start
        result.marked = self.store.write_round(self.shard_min, self.shard_max, decision.writes, now, self.fence)
        if self.fence is not None and not result.marked:
            result.fenced_out = not self.store.holds(self.fence, now)
        return result

    def record(self, result: RoundResult) -> None:
        """Store this round's result for `smartsensor status` (failures to do so are only logged)."""
        try:
            self.store.record_round(self.worker_id, self.hostname, os.getpid(), self.shard_min, self.shard_max,
                                    self.clock(), result.seconds, result.to_json())
        except Exception as exc:  # noqa: BLE001 - status bookkeeping must not fail a round
            log.warning("could not record round: %s", exc)

    def forget(self) -> None:
        """Remove this worker's status row (clean stop)."""
        self.store.forget_worker(self.worker_id)


@lru_cache(maxsize=200_000)
def _rebuilt_with_checks(cls: type[BaseSensor], attr_dict: str) -> tuple[BaseSensor, list[Check] | None]:
    """A sensor rebuilt from attr_dict and its checks(), cached per (class, attr_dict): a check waiting for
    hours is parsed and validated once per process, not every round (on W3, 100,000 distinct checks a
    round). checks() depends only on the persisted fields (BaseSensor.checks); one that raises is not
    cached, so it is tried again next round."""
    sensor = cls.from_stored(attr_dict)
    return sensor, sensor.checks()


def run_round(workers: list[ShardWorker], answerer: Callable[[], CheckAnswerer]) -> RoundResult:
    """One round over the ranges one process owns, reported as one result (``ranges`` lists them).

    Loads and writes stay per range (each write fenced by its own lease); the checks of all ranges
    are answered together, so a table is listed once per round per process, not once per range.
    A failure (a database outage) is reported in ``error`` instead of raised: the next round retries.
    """
    if not workers:
        return RoundResult(0, 0)
    ranges = [[w.shard_min, w.shard_max] for w in workers]
    store = workers[0].store
    started_at = time.perf_counter()
    statements_before = store.statements()
    try:
        plans = [w.plan_round() for w in workers]
        counters = poke_plans(plans, answerer, workers[0].cfg.get("smart_sensor", "poke_timeout"))
        total = combine_results([w.finish_round(p) for w, p in zip(workers, plans)], ranges)
        for name in ("catalog_calls", "schema_calls", "fs_calls", "poke_calls"):
            setattr(total, name, int(counters[name]))
        total.catalog_seconds = counters["catalog_seconds"]
        total.db_statements = store.statements() - statements_before
    except Exception as exc:  # noqa: BLE001 - the worker must keep going through outages
        log.warning("round failed (will retry next round): %s", first_line(exc))
        log.debug("round failure", exc_info=True)
        total = RoundResult(ranges[0][0], ranges[-1][1], ranges=ranges, error=f"{type(exc).__name__}: {first_line(exc)}")
    total.seconds = round(time.perf_counter() - started_at, 4)
    for w in workers:  # `status` shows the round, a failed one too (recording fails quietly while the DB is down)
        if w.record_rounds:
            w.record(total)
    return total
