"""The standalone door's stores in memory (``adapters.memory_standalone``) against the SQL ones
(``adapters.sql.registration_store``, ``scheduler_store``, ``classic_store``), on SQLite and PostgreSQL.

A script runs every operation of ``ports.RegistrationStore``, ``SchedulerStore`` and ``ClassicRunStore`` on both
(through the door's own functions where it has them: ``register``, ``requeue_retries``, ``end_zombies``) and
compares each answer and, at the end, every row. Then a hypothesis state machine drives both side by side through
any interleaving of the actors that share a classic task's state machine: registration (with ``--clear``), the
scheduler claiming tries, requeueing retries and ending dead runs or exited children, a classic run claiming, beating,
ending and handing back its try, a user's `set-state` to any state, and time passing; after every step both answer
alike and hold the same rows, and no process step moved a row outside ARCHITECTURE.md's table (a user's change wins,
an ended task is never resurrected)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError

from smartsensor.adapters.memory import InMemoryStore
from smartsensor.adapters.memory_standalone import (
    MemoryClassicRunStore,
    MemoryRegistrationStore,
    MemorySchedulerStore,
)
from smartsensor.adapters.sql import tasks as task_sql
from smartsensor.adapters.sql.classic_store import SqlClassicRunStore
from smartsensor.adapters.sql.engine import make_engine
from smartsensor.adapters.sql.registration_store import SqlRegistrationStore
from smartsensor.adapters.sql.scheduler_store import SqlSchedulerStore
from smartsensor.config import Config
from smartsensor.domain import clock as domain_clock
from smartsensor.domain.keys import TaskKey
from smartsensor.domain.rows import TaskRow
from smartsensor.domain.states import State
from smartsensor.ports import InsertConflict, StoreUnavailable
from smartsensor.schema.models import task_instance as TI
from smartsensor.standalone.registration import build_row, register
from smartsensor.standalone.scheduler import end_zombies, requeue_retries
from tests.support.catalog_doubles import Clock
from tests.support.common import DAY, T0, named
from tests.support.model import StoreModel, run_model


class Stores:
    """One system's three stores over one table, and a user's `set-state` on it."""

    def __init__(
        self,
        registration: Any,
        scheduler: Any,
        classic: Any,
        set_state: Callable[[TaskKey, str, Any], None],
        rows: Callable[[], dict[TaskKey, TaskRow]],
    ) -> None:
        self.registration, self.scheduler, self.classic = registration, scheduler, classic
        self.set_state, self.rows = set_state, rows


def memory_stores() -> Stores:
    table = InMemoryStore()
    return Stores(
        MemoryRegistrationStore(table),
        MemorySchedulerStore(table),
        MemoryClassicRunStore(table),
        lambda key, state, now: table.set_state(key, state, now=now),
        lambda: dict(table.tasks),
    )


def sql_stores(engine: Engine) -> Stores:
    def set_state(key: TaskKey, state: str, now: Any) -> None:
        with engine.begin() as conn:
            task_sql.set_state(conn, key, state, now=now)

    def rows() -> dict[TaskKey, TaskRow]:
        with engine.connect() as conn:
            return {r.key: r for r in task_sql.list_tasks(conn)}

    return Stores(SqlRegistrationStore(engine), SqlSchedulerStore(engine), SqlClassicRunStore(engine), set_state, rows)


def classic_row(cfg: Config, dag: str, task: str, **exec_fields: Any) -> TaskRow:
    """A task routed to a classic run (`scheduled`), with its exec fields."""
    row, _ = build_row(named(task, "db.t/ds={{ ds }}", **exec_fields), dag, DAY, cfg)
    return row._replace(state=State.SCHEDULED)


def dead_run_state(row: TaskRow) -> str:
    """The exited child's end, as the scheduler's ``_dead_run_state`` gives it (here: by try)."""
    return State.UP_FOR_RETRY if row.try_number < 2 else State.FAILED


def script(stores: Stores, cfg: Config, clock: Clock) -> list[Any]:
    """Every operation of the three ports, with the guards each must keep; what each answered. ``clock`` is the
    service's clock meanwhile (the rows ``register`` builds are stamped by it)."""
    seen: list[Any] = []
    reg, sched, runs = stores.registration, stores.scheduler, stores.classic
    sensors = [
        ("d", named("smart", "db.t/ds={{ ds }}")),
        ("d", named("other", "db.u/ds={{ ds }}", retries=1, retry_delay=0)),
    ]
    seen.append([(r.task_id, r.state, r.created, r.reason) for r in register(reg, sensors, DAY, cfg)])
    seen.append([(r.task_id, r.state, r.created, r.reason) for r in register(reg, sensors, DAY, cfg)])
    seen.append([(r.task_id, r.created) for r in register(reg, sensors, DAY, cfg, clear=True)])
    rows = [classic_row(cfg, "c", f"t{i}", retries=1, retry_delay=0) for i in range(4)]  # stamped by ``clock``
    rows.append(classic_row(cfg, "c", "bad")._replace(exec_dict=json.dumps({"retry_delay": 1e12})))
    seen.append(reg.register_rows(rows, DAY, False))
    seen.append(sorted(reg.read_states(DAY, ["c", "d", "nobody"]).items()))
    t0, t1, t2, t3, bad = (r.key for r in rows)
    seen.append(sched.scheduled_keys(3))
    seen.append([sched.claim_scheduled_try(k, clock(), "sched:1") for k in (t0, t1, t2)])
    seen.append(sched.claim_scheduled_try(t0, clock(), "sched:2"))  # claimed already
    seen.append(runs.claim_run(t0, clock(), "host-a", True))  # the child of the claim
    seen.append(runs.claim_run(t3, clock(), "host-b", False))  # run-task by hand
    seen.append(runs.claim_run(t3, clock(), "host-b", False))  # not scheduled any more
    seen.append(runs.claim_run(TaskKey("c", "none", DAY), clock(), "host-b", False))
    clock.advance(5)
    seen.append([runs.beat(k, clock()) for k in (t0, bad)])
    seen.append(runs.end_try(t0, State.SUCCESS, clock(), try_number=1))
    seen.append(runs.end_try(t0, State.FAILED, clock(), error="late"))  # ended already: never twice
    seen.append(runs.beat(t0, clock()))  # an ended task is never resurrected by a beat
    stores.set_state(t1, State.SUCCESS, clock())  # a user's change while its run is on
    seen.append(runs.hand_back(t1, clock()))
    seen.append(runs.end_try(t1, State.FAILED, clock(), try_number=1))
    seen.append(runs.hand_back(t3, clock()))  # a stop request: scheduled again, its try and start kept
    seen.append(runs.claim_run(t3, clock(), "host-c", False))  # the same try goes on
    seen.append(sched.end_exited_try(t2, 1, "sched:2", clock(), "exited 1", dead_run_state))  # not its claim
    seen.append(sched.end_exited_try(t2, 2, "sched:1", clock(), "exited 1", dead_run_state))  # not its try
    seen.append(sched.end_exited_try(t2, 1, "sched:1", clock(), "run-task exited with code 1", dead_run_state))
    seen.append(sched.end_try(bad, State.FAILED, clock(), error="could not start run-task"))  # not running
    clock.advance(cfg.settings.scheduler.zombie_threshold + 1)  # t3's run stopped beating
    seen.append(end_zombies(sched, cfg, clock()))
    seen.append(end_zombies(sched, cfg, clock()))
    stores.set_state(bad, State.UP_FOR_RETRY, clock())
    seen.append(requeue_retries(sched, cfg, clock()))  # t2 and t3 queued again, the bad row fails alone
    seen.append(requeue_retries(sched, cfg, clock()))
    stores.set_state(t1, State.SCHEDULED, clock())  # a user gives it a fresh try
    seen.append(sorted(sched.scheduled_keys(10)))
    seen.append(registered_rows(stores))
    return seen


def registered_rows(stores: Stores) -> list[tuple[Any, ...]]:
    return sorted(
        (r.dag_id, r.task_id, r.state, r.try_number, r.start_date, r.end_date, r.updated_at, r.hostname, r.error)
        for r in stores.rows().values()
    )


def test_the_memory_stores_answer_as_the_sql_ones(cfg: Config, engine: Engine, monkeypatch: Any) -> None:
    traces = []
    for stores in (memory_stores(), sql_stores(engine)):
        clock = Clock(T0)
        monkeypatch.setattr(domain_clock, "now", clock)
        traces.append(script(stores, cfg, clock))
    memory, sql = traces
    assert len(memory) == len(sql)
    for step, (ours, theirs) in enumerate(zip(memory, sql, strict=True)):
        assert ours == theirs, (step, ours, theirs)
    states = {row[1]: (row[2], row[3], row[8]) for row in memory[-1]}
    assert states["t0"] == (State.SUCCESS, 1, None)  # its run's end, not the late one
    assert states["t1"] == (State.SCHEDULED, 1, None)  # the user's change won over the run
    # exited without ending its try, or a dead run: retried, the last try's error kept
    assert states["t2"] == (State.SMART_PENDING, 2, "run-task exited with code 1")
    assert states["t3"][:2] == (State.SMART_PENDING, 2) and "stopped heartbeating" in states["t3"][2]
    assert states["bad"][0] == State.FAILED and "cannot retry" in states["bad"][2]
    assert memory[-1] == sql[-1]


def test_a_conflicting_insert_is_an_insert_conflict_in_both(cfg: Config, engine: Engine) -> None:
    """A row given twice (as another registration's insert would meet it): nothing written, InsertConflict."""
    row = classic_row(cfg, "c", "t")
    for stores in (memory_stores(), sql_stores(engine)):
        with pytest.raises(InsertConflict):
            stores.registration.register_rows([row, row], DAY, False)
        assert stores.rows() == {}


def test_an_unreachable_database_is_store_unavailable_from_every_store(tmp_path: Path) -> None:
    """The adapters' outage, as the door catches it: StoreUnavailable, the driver's words in ``reason``, the
    SQLAlchemy error its cause."""
    engine = make_engine(f"sqlite:///{tmp_path}")  # a folder: SQLite cannot open it
    calls: list[Callable[[], Any]] = [
        lambda: SqlRegistrationStore(engine).read_states(DAY, ["d"]),
        lambda: SqlSchedulerStore(engine).scheduled_keys(1),
        lambda: SqlClassicRunStore(engine).read_task(TaskKey("d", "t", DAY)),
    ]
    try:
        for call in calls:
            with pytest.raises(StoreUnavailable) as raised:
                call()
            assert isinstance(raised.value.__cause__, OperationalError)
            assert raised.value.reason == "unable to open database file"
            assert str(raised.value).startswith("(sqlite3.OperationalError) unable to open database file")
    finally:
        engine.dispose()


# -- the state machine ---------------------------------------------------------------------------------------------

TASKS = [TaskKey("c", f"t{i}", DAY) for i in range(3)]
CLAIMANTS = ["sched:1", "sched:2"]
ENDS = [State.SUCCESS, State.FAILED, State.SKIPPED, State.UP_FOR_RETRY]
# What a process's step may do to a row (state before, state after); a user's set-state and a registration with
# --clear may do anything.
PROCESS_MOVES = {
    (State.SCHEDULED, State.RUNNING),  # a claim
    (State.RUNNING, State.SCHEDULED),  # a hand-back
    *((State.RUNNING, end) for end in ENDS),  # a run's end, an exited child's, a dead run's
    (State.UP_FOR_RETRY, State.SMART_PENDING),  # the next try
    (State.UP_FOR_RETRY, State.SCHEDULED),
    (State.UP_FOR_RETRY, State.FAILED),  # a retry that cannot be planned
}


class StandaloneModel(StoreModel):
    """Run ``on`` the SQL engine and config."""

    emptied = (TI,)

    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock(T0)
        self.systems = [memory_stores(), sql_stores(self.engine)]

    def both(self, act: Callable[[Stores], Any], process: bool = True) -> Any:
        """``act`` on both systems: the same answer, which it returns. A process's step (``process``) moves rows only
        as PROCESS_MOVES allows, and never changes an ended row."""
        before = self.systems[0].rows()
        ours, theirs = (act(s) for s in self.systems)
        assert ours == theirs, (ours, theirs)
        if process:
            for key, row in self.systems[0].rows().items():
                old = before.get(key)
                if old is not None and old.state != row.state:
                    assert (old.state, row.state) in PROCESS_MOVES, (key, old.state, row.state)
                elif old is not None and old.state in State.FINISHED:
                    assert old == row, ("an ended task changed", key)
        return ours

    @rule(
        task=st.sampled_from(TASKS),
        retries=st.sampled_from([0, 1, 2]),
        delay=st.sampled_from([0, 30]),
        clear=st.booleans(),
    )
    def register(self, task: TaskKey, retries: int, delay: int, clear: bool) -> None:
        row = classic_row(self.cfg, task.dag_id, task.task_id, retries=retries, retry_delay=delay)
        row = row._replace(updated_at=self.clock())
        self.both(lambda s: s.registration.register_rows([row], DAY, clear), process=False)

    @rule()
    def read_states(self) -> None:
        self.both(lambda s: s.registration.read_states(DAY, ["c"]))

    @rule(task=st.sampled_from(TASKS), state=st.sampled_from(list(State.ALL)))
    def set_state_by_hand(self, task: TaskKey, state: str) -> None:
        if task in self.systems[0].rows():
            now = self.clock()
            self.both(lambda s: s.set_state(task, state, now), process=False)

    @rule(claimant=st.sampled_from(CLAIMANTS), limit=st.sampled_from([1, 3]))
    def scheduler_launches(self, claimant: str, limit: int) -> None:
        now = self.clock()
        self.both(
            lambda s: [s.scheduler.claim_scheduled_try(k, now, claimant) for k in s.scheduler.scheduled_keys(limit)]
        )

    @rule(task=st.sampled_from(TASKS), claimed=st.booleans(), host=st.sampled_from(CLAIMANTS))
    def run_task_claims(self, task: TaskKey, claimed: bool, host: str) -> None:
        now = self.clock()
        self.both(lambda s: s.classic.claim_run(task, now, host, claimed))

    @rule(task=st.sampled_from(TASKS))
    def run_beats(self, task: TaskKey) -> None:
        now = self.clock()
        self.both(lambda s: s.classic.beat(task, now))

    @rule(task=st.sampled_from(TASKS))
    def run_is_stopped(self, task: TaskKey) -> None:
        now = self.clock()
        self.both(lambda s: s.classic.hand_back(task, now))

    @rule(
        task=st.sampled_from(TASKS),
        state=st.sampled_from(ENDS),
        try_number=st.sampled_from([None, 1, 2]),
        by_scheduler=st.booleans(),
    )
    def try_ends(self, task: TaskKey, state: str, try_number: int | None, by_scheduler: bool) -> None:
        """A run's end of its try (``run-task``), or the scheduler's for a child it could not start."""
        now = self.clock()
        self.both(lambda s: (s.scheduler if by_scheduler else s.classic).end_try(task, state, now, "e", try_number))

    @rule(task=st.sampled_from(TASKS), try_number=st.sampled_from([1, 2]), claimant=st.sampled_from(CLAIMANTS))
    def child_exits(self, task: TaskKey, try_number: int, claimant: str) -> None:
        now = self.clock()
        self.both(lambda s: s.scheduler.end_exited_try(task, try_number, claimant, now, "exited", dead_run_state))

    @rule()
    def scheduler_ends_dead_runs(self) -> None:
        now = self.clock()
        self.both(lambda s: end_zombies(s.scheduler, self.cfg, now))

    @rule()
    def scheduler_requeues_retries(self) -> None:
        now = self.clock()
        self.both(lambda s: requeue_retries(s.scheduler, self.cfg, now))

    @rule(seconds=st.sampled_from([1, 20, 400]))
    def time_passes(self, seconds: int) -> None:
        self.clock.advance(seconds)

    @invariant()
    def both_hold_the_same_rows(self) -> None:
        type(self).steps += 1
        assert self.systems[0].rows() == self.systems[1].rows()


def test_the_memory_stores_keep_the_sql_guards_in_every_interleaving(cfg: Config, engine: Engine) -> None:
    run_model(StandaloneModel.on(engine, cfg), examples=30 if engine.dialect.name == "sqlite" else 10, steps=40)
