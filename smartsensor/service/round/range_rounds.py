"""A shard round, as named steps.

Per range (``RangeRounds.plan_round``): refresh the index (change feed, reconciliation or rebuild) → pick the due
vigils and hold them → build their checks. For all ranges of a process at once: poke (``round.poke``: one catalog
call per table). Per range again (``finish_round``): ``decide`` (``domain.transitions``) → ``write`` (one
transaction of guarded, fenced updates) → ``apply`` (release the held vigils in the index).
``run_round`` is the one entry point that runs these steps; ``served_ranges`` calls it on the worker loop's timer
and on wake-ups.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Callable

from smartsensor.config import Config
from smartsensor.domain.clock import now as clock_now
from smartsensor.domain.keys import Cohort, CohortRows, Fence, VigilKey
from smartsensor.domain.transitions import DueVigil, RoundWrites, decide
from smartsensor.hive_filter.names import TableName
from smartsensor.ports import CheckAnswerer, RoundStore
from smartsensor.sensors.base import BaseSensor, resolve_smart_class
from smartsensor.sensors.checks import Check, PartitionCheck, PathCheck
from smartsensor.sensors.errors import (
    PermanentCheckError,
    SensorDefinitionError,
    SensorModuleUnavailable,
    SensorRebuildError,
    TransientCheckError,
    UnknownSensorClass,
    first_line,
)
from smartsensor.service.round.index import BadCohort, Vigil, VigilIndex
from smartsensor.service.round.plan import RoundPlan
from smartsensor.service.round.poke import poke_plans
from smartsensor.service.round.report import RoundResult, combine_results

log = logging.getLogger(__name__)

MODULE_RETRY_SECONDS = 30.0  # a sensor module that failed to import is tried again after this long
_STARTERS = itertools.count(1)  # tells apart the RangeRounds of one process (a range lost and claimed again)


class RangeRounds:
    """The round steps of shard range [shard_min, shard_max), over an index of its vigils
    (``round.index.VigilIndex``). How the index is built and kept true is described once, in ARCHITECTURE.md
    ("The incremental round and the wake-up path").

    Poke times per vigil are kept in memory; the schedule itself derives from each task's start of try, so
    after a restart every vigil is simply poked once at once, and nothing is lost.
    ``fence`` is set by ``served_ranges.LeasedRanges`` (None for a pinned range): writes apply only under it.
    Two rounds may run at once on one worker (a timer round and a wake-up round): the index is changed only
    under a lock, and the writes are guarded, so the later of two writes for one vigil changes nothing.
    """

    def __init__(
        self,
        store: RoundStore,
        cfg: Config,
        shard_min: int,
        shard_max: int,
        clock: Callable[[], datetime] = clock_now,
        range_rounds_id: str | None = None,
        record_rounds: bool = True,
    ) -> None:
        if not 0 <= shard_min < shard_max:
            raise ValueError(f"shard range [{shard_min}, {shard_max}) is empty or negative")
        self.store = store
        self.cfg = cfg
        self.shard_min = shard_min
        self.shard_max = shard_max
        self.clock = clock
        self.hostname = socket.gethostname()
        # Who started a task, stamped in its row's hostname: this worker's own starts need no reconciliation.
        self.starter = f"{self.hostname}:{os.getpid()}.{next(_STARTERS)}"
        # This worker serving this range: "{worker}:{shard_min}-{shard_max}", the key of its worker_round row.
        self.range_rounds_id = range_rounds_id or f"{self.hostname}:{os.getpid()}:{shard_min}-{shard_max}"
        self.record_rounds = record_rounds
        self.rebuild_interval = timedelta(seconds=cfg.settings.smart_sensor.index_rebuild_interval)
        self.reconcile_interval = timedelta(seconds=cfg.settings.smart_sensor.reconcile_interval)
        self.reconcile_lookback = timedelta(seconds=cfg.settings.smart_sensor.reconcile_lookback)
        self.fence: Fence | None = None
        self.index = VigilIndex()
        self._built_at: datetime | None = None  # None: rebuild the index at the next round
        self._built_under: Fence | None = None
        self._reconciled_at = datetime.min  # when the last reconciliation (or build) read
        # Rows changed from (this - reconcile_lookback) on are read next time: the last read's time, or when the
        # oldest transaction then open began if earlier (see _read_from).
        self._reconcile_from = datetime.min
        self._late_bad: list[BadCohort] = []  # cohorts found unplannable after a round: failed by the next one
        self._classes: dict[str, type[BaseSensor] | UnknownSensorClass | tuple[SensorModuleUnavailable, float]] = {}
        self._lock = threading.RLock()
        self._write_lock = threading.Lock()  # one write of this range at a time: two can deadlock on PostgreSQL
        self._wake_lock = threading.Lock()
        self._wake_tables: set[TableName] = set()

    def wake(self, tables: set[TableName]) -> None:
        """A landing signal: vigils on these (db, table) are due at the next round, whatever their interval."""
        with self._wake_lock:
            self._wake_tables |= tables

    def invalidate(self) -> None:
        """Rebuild the index from the database at the next round (after a failed round, a lost lease)."""
        with self._lock:
            self._built_at = None

    def index_current(self) -> bool:
        """Whether the index is built under the worker's lease epoch (else the next round rebuilds it)."""
        with self._lock:
            return self._built_at is not None and self.fence == self._built_under

    def load_index(self) -> RoundResult:
        """Rebuild the index from the database now, without poking (a round does this when it must)."""
        result = RoundResult(self.shard_min, self.shard_max)
        with self._lock:
            self._built_at = None
            self._refresh(self.clock(), self.fence, result, self._late_bad)
        result.loaded, result.distinct_checks = self.index.tasks, len(self.index)
        return result

    # -- steps before the poke ---------------------------------------------------------------
    def plan_round(self, focus: set[TableName] | None = None) -> RoundPlan:
        """Refresh the index, pick the due vigils and build their checks. ``focus`` (a wake-up round): only the
        vigils on these tables and the vigils new to the index this round, whatever their schedule. A cohort that
        cannot be planned (exec settings out of bounds, dates that overflow) is set aside to fail alone."""
        now = self.clock()
        fence = self.fence  # read once: a heartbeat may change it meanwhile, and the whole step is under this one
        result = RoundResult(self.shard_min, self.shard_max, partial=focus is not None)
        changed = self._changes_to_reconcile(now) if focus is None else None  # read outside the lock: may be long
        with self._lock:
            bad, self._late_bad = self._late_bad, []
            new = self._refresh(now, fence, result, bad, changed)
            if focus is None:
                with self._wake_lock:
                    woken, self._wake_tables = self._wake_tables, set()
                due = self.index.due(now)
                picked = {v.key for v in due}
                due += [v for v in self.index.on_tables(woken) if v.key not in picked]
            else:  # a wake-up round also takes what is due anyway: a vigil made due at once waits for no timer
                woken = focus
                due = list({v.key: v for v in self.index.on_tables(focus) + new + self.index.due(now)}.values())
            plan = RoundPlan(
                result,
                set(self.index.collided),
                now,
                [DueVigil(v.key, self.index.hold(v)) for v in due],
                bad=bad,
                fence=fence,
                index=self.index,
                seq=self.index.seq,
            )
            result.woken, result.groups_due, result.bad_rows = len(woken), len(due), len(bad)
            result.loaded, result.distinct_checks = self.index.tasks, len(self.index)
            result.distinct_hashes = self.index.hashes
            result.collisions = len(self.index.collided)
            self._build_checks(plan)
        return plan

    def _refresh(
        self,
        now: datetime,
        fence: Fence | None,
        result: RoundResult,
        bad: list[BadCohort],
        changed: tuple[CohortRows, datetime] | None = None,
    ) -> list[Vigil]:
        """Bring the index up to date: rebuild it, or count in the tasks that arrived (and ``changed``, what a
        reconciliation read). Returns the vigils new to the index this round."""
        if not self._stale(now, fence):
            rows = self.store.start_new(self.shard_min, self.shard_max, now, self.starter, fence)
            new, unplannable = self.index.add(rows)
            result.started = sum(n for _, _, n in rows)
            bad.extend(unplannable)
            if changed is not None:
                self._reconcile(now, changed, result, bad)
            return new
        known = {k: v for k, v in self.index.vigils.items() if v.last_poke is not None or v.tables}
        read_from = self._read_from(now)  # before the build's read, as for a reconciliation
        rows, result.started = self.store.load_cohorts(self.shard_min, self.shard_max, now, self.starter, fence)
        self.index = VigilIndex(self.index.seq)
        new, unplannable = self.index.add(rows)
        bad.extend(unplannable)
        for vigil in new:  # a rebuilt index keeps the poke times and tables it knew: no poke storm every rebuild
            old = known.get(vigil.key)
            if old is not None:
                self.index.set_tables(vigil, old.tables)
                if old.last_poke is not None:
                    bad.extend(self.index.done(vigil, old.last_poke))
        self._built_at, self._built_under, self._reconciled_at = now, fence, now
        self._reconcile_from = read_from
        result.rebuilt = 1
        return []

    def reconcile(self) -> RoundResult:
        """Reconcile the index with the database now (a round does this every reconcile_interval), without poking.
        Tasks that cannot be planned are failed by the next round."""
        result = RoundResult(self.shard_min, self.shard_max)
        now = self.clock()
        changed = self._changes_to_reconcile(now, due_only=False)
        with self._lock:
            if changed is not None and not self._stale(now, self.fence):
                self._reconcile(now, changed, result, self._late_bad)
        return result

    def _read_from(self, now: datetime) -> datetime:
        """Where the next reconciliation reads from (less the lookback), asked before this read: ``now``, or when
        the oldest transaction still open began if earlier (it may commit rows it stamped then, after this read),
        but never before ``now - index_rebuild_interval`` (the rebuild after its commit reads those)."""
        oldest = self.store.oldest_open_write()
        if oldest is None or oldest >= now:
            return now
        return max(oldest, now - self.rebuild_interval)

    def _changes_to_reconcile(self, now: datetime, due_only: bool = True) -> tuple[CohortRows, datetime] | None:
        """The started tasks changed since the last reconciliation (less the lookback) by anyone but this worker's
        feed, when a reconciliation is due (every reconcile_interval, on a built index); else None. Read without
        the worker's lock: a round of the other thread is not held up by it, and what it reads is only counted in
        (a task that ended meanwhile costs at most a guarded write that changes nothing)."""
        if self._built_at is None:
            return None
        if due_only and now - self._reconciled_at < self.reconcile_interval:
            return None
        read_from = self._read_from(now)  # before the read: a transaction that commits after it began after this
        since = self._reconcile_from - self.reconcile_lookback
        return self.store.changed_since(self.shard_min, self.shard_max, since, self.starter), read_from

    def _reconcile(
        self, now: datetime, changed: tuple[CohortRows, datetime], result: RoundResult, bad: list[BadCohort]
    ) -> None:
        """Count in the reconciliation's tasks that the index lacks: those no feed of this worker brought (a
        set-state by hand, another process, `db reshard`)."""
        rows, self._reconcile_from = changed
        self._reconciled_at = now
        before = self.index.tasks
        _, unplannable = self.index.add(rows, ensure=True)
        bad.extend(unplannable)
        result.reconciled = self.index.tasks - before
        if result.reconciled:
            log.info(
                "range %d-%d: %d waiting task(s) were missing from the index (changed outside this worker's feed)",
                self.shard_min,
                self.shard_max,
                result.reconciled,
            )

    def _stale(self, now: datetime, fence: Fence | None) -> bool:
        return (
            self._built_at is None
            or fence != self._built_under
            or now - self._built_at >= self.rebuild_interval
            or now < self._built_at
        )

    def _build_checks(self, plan: RoundPlan) -> None:
        """Rebuild each due vigil's sensor from attr_dict (allow-listed classes only) and ask it for its checks.
        A sensor that cannot be built gets its outcome here: permanent or transient, by the reason."""
        for g in plan.due:
            try:
                sensor, checks, tables = _rebuilt_with_checks(self._sensor_class(g.key.classpath), g.key.attr_dict)  # type: ignore[arg-type]  # a class is hashable
            except SensorModuleUnavailable as exc:
                g.outcome = TransientCheckError(str(exc))
                plan.result.module_errors[exc.module] = str(exc)
                plan.result.module_waiting += g.size
                continue
            except (UnknownSensorClass, SensorDefinitionError) as exc:
                g.outcome = PermanentCheckError(str(exc))
                continue
            except SensorRebuildError as exc:  # maybe another version of the class here: its tasks wait
                g.outcome = exc
                continue
            except (Exception, SystemExit, KeyboardInterrupt) as exc:  # noqa: BLE001 - a user's checks() may raise
                g.outcome = TransientCheckError(
                    f"{g.key.classpath}.checks() raised {type(exc).__name__}: {first_line(exc)}"
                )
                continue
            vigil = self.index.vigils.get(g.key)
            if vigil is not None and vigil.tables is not tables:
                self.index.set_tables(vigil, tables)
            if checks is None:
                plan.sensors[g.key] = sensor  # type: ignore[assignment]  # a sensor is kept exactly when checks is None
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
        """Decide every due vigil's transitions, write them in one transaction, then update the index: ended
        vigils and cohorts leave it, the others are rescheduled from this poke."""
        writes = self.decide(plan)
        self.write(plan, writes)
        self.apply(plan, writes)
        return plan.result

    def decide(self, plan: RoundPlan) -> RoundWrites:
        """The state changes of a poked plan (``domain.transitions.decide``), counted into its result."""
        result = plan.result
        result.groups_poked = sum(1 for g in plan.due if g.outcome is not None)
        with self._lock:
            decision = decide(plan.due, plan.collided, plan.now, plan.bad)
        result.permanent_errors = decision.permanent_errors
        result.transient_errors = decision.transient_errors
        result.transient_example = decision.transient_example
        if decision.transient_example:
            log.warning(
                "transient errors on %d check(s), e.g. %s", decision.transient_errors, decision.transient_example
            )
        for key, cohort, why in plan.bad:
            log.warning(
                "tasks of %s (try %d, started %s) cannot be planned, failing them alone: %s",
                key.classpath,
                cohort.try_number,
                cohort.start_date,
                why,
            )
        return decision.writes

    def write(self, plan: RoundPlan, writes: RoundWrites) -> None:
        """One transaction of guarded updates, fenced by the lease the round was planned under. One write of this
        range at a time (a timer and a wake-up round): two transactions locking overlapping rows in different
        orders would deadlock on PostgreSQL."""
        if writes.empty():
            return
        result = plan.result
        with self._write_lock:
            now = self.clock()  # the fence is checked against the time of the write, not of the round's start
            started = time.perf_counter()
            result.marked = self.store.write_round(self.shard_min, self.shard_max, writes, now, plan.fence)
            result.write_seconds = round(time.perf_counter() - started, 4)
            if plan.fence is not None and not result.marked:
                result.fenced_out = not self.store.holds(plan.fence, now)

    def apply(self, plan: RoundPlan, writes: RoundWrites) -> None:
        """Release the round's vigils in the index after its write (``_applied``). Poke times are those of the plan,
        taken before the catalog was asked: a task that joined after it is poked on its own schedule."""
        with self._lock:
            if plan.result.fenced_out:
                self._built_at = None  # the range is no longer ours under this epoch: start over if it comes back
            elif plan.index is not None and plan.index is not self.index:
                self._late_bad.extend(_after_rebuild(self.index, plan, writes))  # read after this plan
            else:
                self._late_bad.extend(_applied(self.index, plan, writes, plan.now))
            if not plan.result.fenced_out:
                plan.result.due_again = _due_again(self.index, plan, writes)

    def record(self, result: RoundResult) -> None:
        """Store this round's result for `smartsensor status` (failures to do so are only logged)."""
        try:
            self.store.record_round(
                self.range_rounds_id,
                self.hostname,
                os.getpid(),
                self.shard_min,
                self.shard_max,
                self.clock(),
                result.seconds,
                result.to_json(),
            )
        except Exception as exc:  # noqa: BLE001 - status bookkeeping must not fail a round
            log.warning("could not record round: %s", exc)

    def forget(self) -> None:
        """Remove this range rounds' status row (clean stop)."""
        self.store.forget_range_rounds(self.range_rounds_id)


@lru_cache(maxsize=200_000)
def _rebuilt_with_checks(
    cls: type[BaseSensor], attr_dict: str
) -> tuple[BaseSensor | None, tuple[Check, ...] | None, frozenset[TableName]]:
    """A sensor rebuilt from attr_dict, its checks() validated, and the tables they read, cached per (class,
    attr_dict): a vigil waiting for hours is parsed and validated once per process, not every round (on W3,
    100,000 vigils a round). checks() depends only on the persisted fields (BaseSensor.checks); one
    that raises is not cached, so it is tried again next round. The sensor itself is kept only when it pokes
    on its own (checks() is None): a batched vigil needs only its checks, which is most of the cache's memory.
    """
    sensor = cls.from_stored(attr_dict)
    checks = sensor.checks()
    if checks is None:
        return sensor, None, frozenset()
    if not isinstance(checks, list) or not all(isinstance(c, (PartitionCheck, PathCheck)) for c in checks):
        raise SensorDefinitionError(
            f"{cls.__module__}.{cls.__qualname__}.checks() must return a list of PartitionCheck/PathCheck or None, "
            f"got {type(checks).__name__}"
        )
    tables = frozenset(c.table_key for c in checks if isinstance(c, PartitionCheck))
    if len(_TABLE_SETS) > 200_000:  # bounded like the cache above: a long-lived worker sees vigils come and go
        _TABLE_SETS.clear()
    return None, tuple(checks), _TABLE_SETS.setdefault(tables, tables)


_TABLE_SETS: dict[frozenset[TableName], frozenset[TableName]] = {}  # one object per distinct set


def _applied(index: VigilIndex, plan: RoundPlan, writes: RoundWrites, poke_time: datetime) -> list[BadCohort]:
    """Release a round's vigils after its writes: the cohorts it planned of the vigils that landed or failed leave
    the index, as do the cohorts that timed out or failed alone; cohorts that joined after the plan stay (a landed
    vigil with some left is due at once). Every other due vigil is rescheduled (from this poke if it was poked).
    Returns cohorts whose next poke can no longer be computed (failed by the next round)."""
    # Cohorts that cannot be planned (writes.bad) never enter the index, or left it when found: nothing to release.
    ending: dict[VigilKey, list[Cohort]] = defaultdict(list)
    for cohorts in writes.ended.values():
        for key, cohort in cohorts:
            ending[key].append(cohort)
    ends_whole = _ends_whole_vigil(writes)
    late_bad: list[BadCohort] = []
    for g in plan.due:
        vigil = index.vigils.get(g.key)
        if vigil is None:
            continue
        ended = ends_whole(g.key)
        late_bad.extend(
            index.release(
                vigil,
                plan.seq,
                g.cohorts if ended else ending.get(g.key, ()),
                poke_time if g.outcome is not None else None,
                urgent=ended,
                now=plan.now,
            )
        )
    return late_bad


def _due_again(index: VigilIndex, plan: RoundPlan, writes: RoundWrites) -> int:
    """How many of the vigils a round ended are due again at once: tasks joined them while it checked (registered
    or started meanwhile), and no other round holds them."""
    ends_whole = _ends_whole_vigil(writes)
    return sum(
        1
        for g in plan.due
        if ends_whole(g.key)
        and (vigil := index.vigils.get(g.key)) is not None
        and not vigil.holders
        and vigil.attention is not None
        and vigil.attention <= plan.now
    )


def _ends_whole_vigil(writes: RoundWrites) -> Callable[[VigilKey], bool]:
    """Whether these writes end every waiting task of a vigil: it landed (by hash or by exact vigil) or failed."""
    landed = set(writes.landed_hashes)
    whole = {*writes.landed_vigils, *(key for key, _, _ in writes.failed)}
    return lambda key: key in whole or key.hashcode in landed


def _after_rebuild(index: VigilIndex, plan: RoundPlan, writes: RoundWrites) -> list[BadCohort]:
    """A round whose index was rebuilt during its write: the new index was read from the database after the plan,
    so it is left as read, except that the vigils the round saw end are due at once: their tasks in it either were
    marked by this write (a no-op poke) or started after it. Returns cohorts whose next poke cannot be computed."""
    ends_whole, late_bad = _ends_whole_vigil(writes), []
    for g in plan.due:
        vigil = index.vigils.get(g.key)
        if vigil is not None and ends_whole(g.key) and not vigil.holders:
            vigil.urgent = True
            late_bad.extend(index.done(vigil, None, plan.now))
    return late_bad


def _finish_all(
    served: list[RangeRounds], plans: list[RoundPlan], concurrency: int
) -> list[tuple[RoundResult, Exception | None]]:
    """Each range's finish (decide, write, update the index), up to ``concurrency`` ranges at once: each is its own
    transaction under its own lease, so a landing round that marks many ranges uses several database cores. Each
    range gives its result and, if its finish failed, the exception: the others may have committed, and so may the
    failed range itself (its write committed, then updating its index raised); its result's ``marked`` is set only
    once its write committed, so what every range committed is reported."""

    def finish(rp: tuple[RangeRounds, RoundPlan]) -> tuple[RoundResult, Exception | None]:
        try:
            return rp[0].finish_round(rp[1]), None
        except Exception as exc:  # noqa: BLE001 - reported with the round, beside what the ranges committed
            return rp[1].result, exc

    pairs = list(zip(served, plans, strict=True))
    if concurrency <= 1 or len(served) <= 1:
        return [finish(rp) for rp in pairs]
    with ThreadPoolExecutor(min(concurrency, len(served)), thread_name_prefix="round-write") as pool:
        return list(pool.map(finish, pairs))


def combine_finished(
    served: list[RangeRounds], outcomes: list[tuple[RoundResult, Exception | None]], ranges: list[list[int]]
) -> RoundResult:
    """One result of the ranges' finishes: what every range marked (committed, each in its own transaction, a failed
    range's too if its write committed before the failure), and, when some failed, the first failure as ``error``; a
    failed range's index is invalidated (rebuilt next round), as it may be half-applied."""
    total = combine_results([result for result, _ in outcomes], ranges)
    failed = [(r, exc) for r, (_, exc) in zip(served, outcomes, strict=True) if exc is not None]
    for r, _ in failed:
        r.invalidate()
    if failed:
        first = failed[0][1]
        log.warning(
            "round failed in %d of %d ranges (will retry next round; what was committed stands and is reported): %s",
            len(failed),
            len(served),
            first_line(first),
        )
        total.error = f"{type(first).__name__}: {first_line(first)}"
    return total


def run_round(
    served: list[RangeRounds], answerer: Callable[[], CheckAnswerer], focus: set[TableName] | None = None
) -> RoundResult:
    """One round over the ranges one process owns, reported as one result (``ranges`` lists them).

    Loads and writes stay per range (each write fenced by its own lease); the checks of all ranges' due vigils
    are answered together, so a table is listed once per round per process, not once per range.
    A failure (a database outage) is reported in ``error`` instead of raised: the next round retries.
    """
    if not served:
        return RoundResult(0, 0)
    ranges = [[r.shard_min, r.shard_max] for r in served]
    store = served[0].store
    started_at = time.perf_counter()
    statements_before = store.statements()
    try:
        plans = [r.plan_round(focus) for r in served]
        counters = poke_plans(plans, answerer, served[0].cfg.settings.smart_sensor.poke_timeout)
        finish_started = time.perf_counter()
        total = combine_finished(served, _finish_all(served, plans, store.write_concurrency()), ranges)
        total.finish_seconds = round(time.perf_counter() - finish_started, 4)
        for name in ("catalog_calls", "schema_calls", "fs_calls", "poke_calls"):
            setattr(total, name, int(counters[name]))
        total.catalog_seconds = counters["catalog_seconds"]
        total.db_statements = store.statements() - statements_before
    except Exception as exc:  # the worker must keep going through outages
        for r in served:  # what the index knew may be half-applied: the next round rebuilds it
            r.invalidate()
        log.warning("round failed (will retry next round): %s", first_line(exc))
        log.debug("round failure", exc_info=True)
        total = RoundResult(
            ranges[0][0], ranges[-1][1], ranges=ranges, error=f"{type(exc).__name__}: {first_line(exc)}"
        )
    total.seconds = round(time.perf_counter() - started_at, 4)
    for r in served:  # `status` shows the round, a failed one too (recording fails quietly while the DB is down)
        if r.record_rounds and focus is None:
            r.record(total)
    return total
