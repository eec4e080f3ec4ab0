"""A stateful model test of the round's index (issue 30): hypothesis drives the real ``RangeRounds`` over the
in-memory store and over SQL (SQLite here, PostgreSQL in a shorter run) through every interleaving of what
changes waiting tasks, and checks after each step that the index agrees with the database.

Both stores run the same steps side by side, each with its own worker, on one clock and one catalog. A round is
split into its steps, and up to two rounds are in flight at once, as a worker's timer and wake-up threads run them:
``start`` (refresh the index, hold the due checks, ask the catalog, decide), ``write`` (the one transaction), and
``apply`` (release the held checks in the index). Between any two of them: registrations, a set-state by hand to
any state, a retry, a clear, a landing, a permanent check error, time passing, a new lease epoch, a rebuild, a crash.

Invariants after every step:
- (a) coverage: while the index is current, every started (smart_running) row of the range is in it with its
  cohort, except rows made to wait outside the worker's feed since its last reconciliation;
- (b) liveness: no task still waits once a timer round that ran alone was planned at least the bound after its
  check landed (or failed for good) and after it began to wait, nor after its time limit plus the bound;
- (c) transitions: a worker's step changes rows only as ARCHITECTURE.md's table allows (a user's change wins);
- (d) parity: both stores hold the same rows, and both workers the same index.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from sqlalchemy import Engine, delete, insert, select, update

from smartsensor.adapters.memory import InMemoryStore
from smartsensor.adapters.sql import scheduler_store as scheduler_sql, tasks as task_sql
from smartsensor.adapters.sql.engine import init_db, make_engine
from smartsensor.adapters.sql.round_store import SqlRoundStore
from smartsensor.config import Config
from smartsensor.domain.keys import Cohort, Fence, TaskKey
from smartsensor.domain.rows import TaskRow
from smartsensor.domain.states import State
from smartsensor.domain.timing import parse_exec
from smartsensor.domain.transitions import RoundWrites
from smartsensor.hive_filter.names import TableName
from smartsensor.schema.models import shard_lease as SL, task_instance as TI, worker_round
from smartsensor.sensors import NamedHivePartitionSensor
from smartsensor.sensors.errors import PermanentCheckError
from smartsensor.service.round.plan import RoundPlan
from smartsensor.service.round.poke import poke_plans
from smartsensor.service.round.range_rounds import RangeRounds, run_round
from smartsensor.standalone.registration import build_row
from tests.support import tier
from tests.support.catalog_doubles import Clock, DictCatalog
from tests.support.common import DAY, T0, make_cfg
from tests.support.model import run_model
from tests.support.pg import needs_test_pg, pg_engine

DAGS = ["d0", "d1", "d2"]
PARTITIONS = ["db.t/ds=1", "db.u/ds=1"]
TABLES = [("db", "t"), ("db", "u")]
ALL_STATES = [
    State.SMART_PENDING,
    State.SMART_RUNNING,
    State.SUCCESS,
    State.FAILED,
    State.SKIPPED,
    State.UP_FOR_RETRY,
    State.SCHEDULED,
]
SETTINGS = st.fixed_dictionaries(
    {
        "poke_interval": st.sampled_from([1, 2]),
        "timeout": st.sampled_from([4, 30, 3600]),
        "retries": st.sampled_from([0, 1]),
        "soft_fail": st.booleans(),
    }
)
ROUND_INTERVAL, RECONCILE_INTERVAL, MAX_POKE_INTERVAL = 1.0, 2.0, 2.0
BOUND = timedelta(seconds=RECONCILE_INTERVAL + ROUND_INTERVAL + MAX_POKE_INTERVAL)
# What a worker's step may do to a row: (state before, state after). A round starts pending tasks, marks every
# waiting task of a check that landed or failed for good, and ends started tries that timed out.
WORKER_MOVES = {
    (State.SMART_PENDING, State.SMART_RUNNING),
    (State.SMART_PENDING, State.SUCCESS),
    (State.SMART_PENDING, State.FAILED),
    (State.SMART_RUNNING, State.SUCCESS),
    (State.SMART_RUNNING, State.FAILED),
    (State.SMART_RUNNING, State.SKIPPED),
    (State.SMART_RUNNING, State.UP_FOR_RETRY),
}
COMPARED = ("state", "try_number", "start_date", "error")


@dataclass
class Flight:
    """One round in flight in one system: its plan and its decided writes."""

    plan: RoundPlan
    writes: RoundWrites
    written: bool = False


class System:
    """One store and the worker over the whole range on it."""

    def __init__(self, store: Any, cfg: Config, clock: Clock) -> None:
        self.store, self.cfg, self.clock = store, cfg, clock
        self.epoch = 1
        self.worker = self.new_worker()

    def new_worker(self) -> RangeRounds:
        w = RangeRounds(self.store, self.cfg, 0, self.cfg.shard_code_upper_limit, clock=self.clock, record_rounds=False)
        w.fence = Fence(0, "me", self.epoch)
        return w

    def index(self) -> dict[Any, dict[Cohort, int]]:
        return {k: dict(c.cohorts) for k, c in self.worker.index.vigils.items()}


class MemoryRows:
    """What registration, a user and the scheduler do to the in-memory store's rows."""

    def __init__(self, store: InMemoryStore) -> None:
        self.store = store

    def insert(self, row: TaskRow) -> None:
        self.store.add_task(row)

    def reset(self, row: TaskRow) -> None:
        self.store.change_task(row.key, **row.columns())

    def set_state(self, key: Any, state: str, now: datetime) -> None:
        self.store.set_state(key, state, now=now)

    def requeue(self, key: Any, now: datetime) -> None:
        row = self.store.tasks[key]  # scheduler_store.requeue_retry
        if row.state == State.UP_FOR_RETRY:
            self.store.change_task(
                key,
                state=State.SMART_PENDING,
                try_number=row.try_number + 1,
                start_date=None,
                end_date=None,
                hostname=None,
                updated_at=now,
            )

    def set_lease(self, epoch: int, expires: datetime, limit: int) -> None:
        self.store.set_lease(0, limit, "me", epoch, expires)

    def rows(self) -> dict[Any, dict[str, Any]]:
        return {k: r.columns() for k, r in self.store.tasks.items()}


class SqlRows:
    """The same on a SQL metadata database, through the named queries."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def insert(self, row: TaskRow) -> None:
        with self.engine.begin() as conn:
            task_sql.insert_tasks_bulk(conn, [row])

    def reset(self, row: TaskRow) -> None:
        with self.engine.begin() as conn:
            task_sql.reset_task(conn, row)

    def set_state(self, key: Any, state: str, now: datetime) -> None:
        with self.engine.begin() as conn:
            task_sql.set_state(conn, key, state, now=now)

    def requeue(self, key: Any, now: datetime) -> None:
        with self.engine.begin() as conn:
            row = task_sql.get_task(conn, *key)
            assert row is not None
            scheduler_sql.requeue_retry(conn, key, row.try_number, State.SMART_PENDING, now)

    def set_lease(self, epoch: int, expires: datetime, limit: int) -> None:
        with self.engine.begin() as conn:
            if (
                conn.execute(
                    update(SL).where(SL.c.shard_min == 0).values(owner="me", epoch=epoch, expires_at=expires)
                ).rowcount
                == 0
            ):
                conn.execute(
                    insert(SL).values(shard_min=0, shard_max=limit, owner="me", epoch=epoch, expires_at=expires)
                )

    def rows(self) -> dict[Any, dict[str, Any]]:
        with self.engine.connect() as conn:
            return {
                (r["dag_id"], r["task_id"], r["execution_date"]): dict(r) for r in conn.execute(select(TI)).mappings()
            }


def empty(engine: Engine) -> None:
    with engine.begin() as conn:
        for table in (TI, SL, worker_round):
            conn.execute(delete(table))


class IndexModel(RuleBasedStateMachine):
    """Set by ``machine_for``: the SQL engine and config the systems run on."""

    engine: Engine
    cfg: Config
    steps = 0  # steps run, over every example of a run

    def __init__(self) -> None:
        super().__init__()
        empty(self.engine)
        self.clock = Clock(T0)
        self.catalog = DictCatalog()
        self.memory_rows, self.sql_rows = MemoryRows(InMemoryStore()), SqlRows(self.engine)
        self.systems = [
            System(self.memory_rows.store, self.cfg, self.clock),
            System(SqlRoundStore(self.engine, write_threads=1), self.cfg, self.clock),
        ]
        self.partition_of: dict[str, str] = {}
        self.settings_of: dict[str, dict[str, Any]] = {}
        self.ready_at: dict[str, datetime] = {}  # a partition: when it landed or failed for good
        self.waiting_since: dict[str, datetime] = {}  # a task: when it last began to wait
        self.unseen: set[str] = set()  # tasks made to wait outside the feed since the last reconciliation
        self.flights: dict[str, list[Flight]] = {}  # "timer"/"wake" → one Flight per system
        self.alone_since: datetime | None = None  # the plan time of the timer round in flight if it runs alone
        self.last_alone_round: datetime | None = None
        self._set_lease()

    # -- helpers -------------------------------------------------------------------------------------------------
    def _set_lease(self) -> None:
        limit = self.cfg.shard_code_upper_limit
        expires = self.clock() + timedelta(days=365)
        self.memory_rows.set_lease(self.systems[0].epoch, expires, limit)
        self.sql_rows.set_lease(self.systems[0].epoch, expires, limit)

    def _both(self, act: Callable[[Any], None]) -> None:
        act(self.memory_rows)
        act(self.sql_rows)

    def _worker_step(self, step: Callable[[System], Any]) -> list[Any]:
        """A step of the workers: it may move rows only as ARCHITECTURE.md allows (invariant c)."""
        before = self.memory_rows.rows()
        reconciled = [s.worker._reconciled_at for s in self.systems]
        rebuilt = [s.worker._built_at for s in self.systems]
        out = [step(s) for s in self.systems]
        after = self.memory_rows.rows()
        for key, row in after.items():
            old = before[key]
            if old["state"] != row["state"]:
                assert (old["state"], row["state"]) in WORKER_MOVES, (key, old["state"], row["state"])
            elif old["state"] not in State.SMART_WAITING:
                assert {c: old[c] for c in COMPARED} == {c: row[c] for c in COMPARED}, ("a user's change lost", key)
        w = self.systems[0].worker
        if w._reconciled_at != reconciled[0] or w._built_at != rebuilt[0]:
            self.unseen.clear()
        return out

    def _wait(self, dag: str) -> None:
        self.waiting_since[dag] = self.clock()

    def _no_round_in_flight(self) -> bool:
        return not self.flights

    # -- what changes tasks from outside the worker -----------------------------------------------------------
    @rule(dag=st.sampled_from(DAGS), partition=st.sampled_from(PARTITIONS), exec_settings=SETTINGS)
    def register(self, dag: str, partition: str, exec_settings: dict[str, Any]) -> None:
        """A new task (``submit``), or a fresh registration over an old one (``submit --clear``)."""
        sensor = NamedHivePartitionSensor(task_id="w", partition_names=[partition], **exec_settings)
        built, _ = build_row(sensor, dag, DAY, self.cfg)
        row = built._replace(updated_at=self.clock())
        self.partition_of[dag], self.settings_of[dag] = partition, exec_settings
        if (dag, "w", DAY) in self.memory_rows.store.tasks:
            self._both(lambda rows: rows.reset(row))
        else:
            self._both(lambda rows: rows.insert(row))
        self.unseen.discard(dag)
        self._wait(dag)

    @precondition(lambda self: bool(self.memory_rows.store.tasks))
    @rule(dag=st.sampled_from(DAGS), state=st.sampled_from(ALL_STATES))
    def set_state_by_hand(self, dag: str, state: str) -> None:
        key = TaskKey(dag, "w", DAY)
        if key not in self.memory_rows.store.tasks:
            return
        now = self.clock()
        self._both(lambda rows: rows.set_state(key, state, now))
        if state in State.SMART_WAITING:
            self._wait(dag)
        if state == State.SMART_RUNNING:
            self.unseen.add(dag)

    @precondition(lambda self: any(r.state == State.UP_FOR_RETRY for r in self.memory_rows.store.tasks.values()))
    @rule(dag=st.sampled_from(DAGS))
    def retry(self, dag: str) -> None:
        """The scheduler's retry of a try that timed out: up_for_retry → smart_pending, next try."""
        key = TaskKey(dag, "w", DAY)
        if getattr(self.memory_rows.store.tasks.get(key), "state", None) != State.UP_FOR_RETRY:
            return
        now = self.clock()
        self._both(lambda rows: rows.requeue(key, now))
        self._wait(dag)

    @rule(partition=st.sampled_from(PARTITIONS), lands=st.sampled_from([True, True, True, False]))
    def catalog_answers(self, partition: str, lands: bool) -> None:
        """The partition lands, or its check fails for good (its table dropped and recreated unpartitioned)."""
        if partition in self.ready_at:
            return
        if lands:
            self.catalog.land(partition)
        else:
            self.catalog.fail(partition, PermanentCheckError(f"{partition} cannot be checked"))
        self.ready_at[partition] = self.clock()

    @rule(seconds=st.sampled_from([0.5, 1.0, 2.0, 5.0]))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule(kind=st.sampled_from(["new lease epoch", "crash", "rebuild", "failed round"]))
    def disruption(self, kind: str) -> None:
        """A new lease epoch (the lease lapsed and this worker claimed it again: rounds planned under the old one are
        fenced out); a crash between any two steps (rounds in flight are lost, a new worker starts from nothing); a
        rebuild of the index; a failed round (a database outage: the next round rebuilds)."""
        if kind == "new lease epoch":
            for s in self.systems:
                s.epoch += 1
                s.worker.fence = Fence(0, "me", s.epoch)
            self._set_lease()
            self.alone_since = None  # a round in flight writes nothing now: it does not count for liveness
        elif kind == "crash":
            self.flights.clear()
            self.alone_since = None
            for s in self.systems:
                s.worker = s.new_worker()
        elif kind == "rebuild":
            self._worker_step(lambda s: s.worker.load_index())
        else:
            for s in self.systems:
                s.worker.invalidate()

    # -- rounds, whole or in steps ---------------------------------------------------------------------------
    @precondition(lambda self: "timer" not in self.flights)
    @rule()
    def timer_round(self) -> None:
        alone = not self.flights
        plan_time = self.clock()
        self._worker_step(lambda s: run_round([s.worker], lambda: self.catalog))
        if alone:
            self.last_alone_round = plan_time

    @precondition(lambda self: "timer" not in self.flights)
    @rule()
    def start_timer_round(self) -> None:
        self._start("timer", None)

    @precondition(lambda self: "wake" not in self.flights)
    @rule(focus=st.sampled_from(["new", "t", "u"]))
    def start_wake_up_round(self, focus: str) -> None:
        """A NOTIFY of new pending tasks ("new"), or a landing signal naming a table."""
        self._start("wake", set() if focus == "new" else {TableName("db", focus)})

    @precondition(lambda self: any(not f[0].written for f in self.flights.values()))
    @rule(data=st.data())
    def write_round(self, data: st.DataObject) -> None:
        kind = data.draw(st.sampled_from(sorted(k for k, f in self.flights.items() if not f[0].written)))
        flights = self.flights[kind]

        def write(s: System) -> None:
            f = flights[self.systems.index(s)]
            s.worker.write(f.plan, f.writes)
            f.written = True

        self._worker_step(write)
        assert flights[0].plan.result.marked == flights[1].plan.result.marked, "the stores wrote differently"

    @precondition(lambda self: any(f[0].written for f in self.flights.values()))
    @rule(data=st.data())
    def apply_round(self, data: st.DataObject) -> None:
        kind = data.draw(st.sampled_from(sorted(k for k, f in self.flights.items() if f[0].written)))
        flights = self.flights[kind]

        def apply(s: System) -> None:
            f = flights[self.systems.index(s)]
            s.worker.apply(f.plan, f.writes)

        self._worker_step(apply)
        del self.flights[kind]
        if kind == "timer" and self.alone_since is not None and not self.flights:
            self.last_alone_round = self.alone_since
        self.alone_since = None

    @precondition(lambda self: not self.flights)
    @rule(
        kind=st.sampled_from(["timer", "wake"]),
        after_write=st.booleans(),
        inside=st.sampled_from(["join", "by hand", "rebuild", "other round"]),
        dag=st.sampled_from(DAGS),
        partition=st.sampled_from(PARTITIONS),
        exec_settings=SETTINGS,
    )
    def round_with_a_step_inside(
        self, kind: str, after_write: bool, inside: str, dag: str, partition: str, exec_settings: dict[str, Any]
    ) -> None:
        """The interleavings that matter most, made likely: a round, and the other thread's step during its poke
        or between its write and its index update. The separate rules above reach the same and every other order."""

        class Pick:
            def draw(self, _: Any) -> str:
                return kind

        self._start(kind, None if kind == "timer" else {TableName("db", "t"), TableName("db", "u")})
        if after_write:
            self.write_round(Pick())
        if inside == "join":
            self.register(dag, partition, exec_settings)
            self.timer_round() if kind == "wake" else self._wake_round()
        elif inside == "by hand":
            self.set_state_by_hand(dag, State.SMART_RUNNING)
        elif inside == "rebuild":
            self.disruption("rebuild")
        elif kind == "wake":
            self.timer_round()
        else:
            self._wake_round()
        if not after_write:
            self.write_round(Pick())
        self.apply_round(Pick())

    def _wake_round(self) -> None:
        """A wake-up round run whole: its feed counts new tasks in (it pokes only new checks)."""
        self._worker_step(lambda s: run_round([s.worker], lambda: self.catalog, focus=set()))

    def _start(self, kind: str, tables: set[TableName] | None) -> None:
        self.alone_since = self.clock() if kind == "timer" and not self.flights else None

        def start(s: System) -> Flight:
            plan = s.worker.plan_round(tables)
            poke_plans([plan], lambda: self.catalog, 60)
            return Flight(plan, s.worker.decide(plan))

        self.flights[kind] = self._worker_step(start)

    # -- invariants --------------------------------------------------------------------------------------------
    @invariant()
    def stores_and_indexes_agree(self) -> None:
        """(d)"""
        type(self).steps += 1
        mem, sql = self.memory_rows.rows(), self.sql_rows.rows()
        assert mem.keys() == sql.keys()
        for key in mem:
            assert {c: mem[key][c] for c in COMPARED} == {c: sql[key][c] for c in COMPARED}, key
        assert self.systems[0].index() == self.systems[1].index()

    @invariant()
    def every_started_task_is_in_the_index(self) -> None:
        """(a)"""
        w = self.systems[0].worker
        if not w.index_current():
            return
        for (dag, _, _), row in self.memory_rows.store.tasks.items():
            if row.state != State.SMART_RUNNING or dag in self.unseen:
                continue
            vigil = w.index.vigils.get(row.vigil)
            cohort = Cohort(row.exec_dict or "", row.start_date, row.try_number)  # type: ignore[arg-type]  # running
            assert vigil is not None and cohort in vigil.cohorts, f"{dag} waits, missing from the index"

    @invariant()
    def no_task_waits_past_the_bound(self) -> None:
        """(b)"""
        last = self.last_alone_round
        if last is None:
            return
        for (dag, _, _), row in self.memory_rows.store.tasks.items():
            if row.state not in State.SMART_WAITING:
                continue
            since = self.waiting_since[dag]
            ready = self.ready_at.get(self.partition_of[dag])
            if ready is not None:
                assert last < max(ready, since) + BOUND, f"{dag} still waits for {self.partition_of[dag]}"
            if row.start_date is not None:
                limit = timedelta(seconds=parse_exec(row.exec_dict).time_limit)
                assert last < max(row.start_date + limit, since) + BOUND, f"{dag} waits past its time limit"


def machine_for(engine: Engine, cfg: Config) -> type[IndexModel]:
    return type("IndexModelOn" + engine.dialect.name.title(), (IndexModel,), {"engine": engine, "cfg": cfg})


def model_cfg(home: Any, url: str) -> Config:
    return make_cfg(
        home,
        url,
        smart_sensor__poke_interval=str(ROUND_INTERVAL),
        smart_sensor__reconcile_interval=str(RECONCILE_INTERVAL),
        smart_sensor__reconcile_lookback="3",
        smart_sensor__index_rebuild_interval="604800",
    )


# 6,000 steps in CI's run, 12,000 in the whole (--all); SMARTSENSOR_MODEL_STEPS sets them for a longer run.
STEPS = int(os.environ.get("SMARTSENSOR_MODEL_STEPS", "0")) or tier.examples(6_000, 12_000)


def run_machine(engine: Engine, cfg: Config, examples: int, steps: int) -> None:
    init_db(engine)
    run_model(machine_for(engine, cfg), examples, steps)


@pytest.mark.slow
def test_the_index_agrees_with_sqlite_and_memory_in_every_interleaving(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'model.db'}"
    engine = make_engine(url)
    try:
        run_machine(engine, model_cfg(tmp_path, url), examples=STEPS // 50, steps=50)
    finally:
        engine.dispose()


@pytest.mark.slow
@needs_test_pg
def test_the_index_agrees_with_postgresql_and_memory_in_every_interleaving(tmp_path: Any) -> None:
    with pg_engine() as (engine, url):
        run_machine(engine, model_cfg(tmp_path, url), examples=max(STEPS // 400, 10), steps=40)
