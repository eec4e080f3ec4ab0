"""The external door's store in memory (``adapters.memory_external.MemoryExternalTryStore``) against the SQL one
(``adapters.sql.external.SqlExternalTryStore``) on SQLite and PostgreSQL: a script with the answers spelled out,
and a hypothesis state machine that drives both side by side through registrations (first tries, the same try
again, newer and older tries, the same try with another check, a task instance's key already taken, batches of new
tries), rounds ending tasks (``RoundStore.start_new`` / ``write_round`` on the same rows), a user's changes by hand
and states reads, and after every step compares what each answered and every row each holds. The registrations
also keep the guards: a registration changes another task instance only from a waiting state to skipped, and a
key's try never goes down."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule
from sqlalchemy import Engine, select

from smartsensor.adapters.memory import InMemoryStore
from smartsensor.adapters.memory_external import SUPERSEDABLE, MemoryExternalTryStore
from smartsensor.adapters.sql import tasks as task_sql
from smartsensor.adapters.sql.external import EX, SqlExternalTryStore
from smartsensor.adapters.sql.round_store import SqlRoundStore
from smartsensor.config import Config
from smartsensor.domain.keys import ExternalKey, TaskKey
from smartsensor.domain.rows import ExternalRow, NewTry, Superseded, TaskRow
from smartsensor.domain.states import State
from smartsensor.domain.transitions import RoundWrites
from smartsensor.external.registration import ti_task_id
from smartsensor.external.states import Asked, external_states
from smartsensor.ports import InsertConflict
from smartsensor.schema.models import task_instance as TI
from smartsensor.sensors import NamedHivePartitionSensor
from smartsensor.service.task_rows import task_row
from tests.support.catalog_doubles import Clock
from tests.support.common import DAY, T0
from tests.support.model import StoreModel, run_model

# Keys that differ only by run (the same task instance id here), by map index and by deployment.
KEYS = [
    ExternalKey("etl", "wait", "r1"),
    ExternalKey("etl", "wait", "r2"),
    ExternalKey("etl", "wait", "r1", 0),
    ExternalKey("etl", "wait", "r1", -1, "prod-b"),
]
PARTITIONS = ["db.t/ds=1", "db.t/ds=2"]
TIMEOUTS = [600, 60]
SUPERSEDED = Superseded(newer_try="superseded by a newer try", other_check="superseded by another check")
STATES = [State.SMART_PENDING, State.SMART_RUNNING, State.SUCCESS, State.FAILED, State.SKIPPED, State.UP_FOR_RETRY]


def make_row(cfg: Config, key: ExternalKey, partition: str, timeout: int, when: datetime) -> TaskRow:
    """The row the external door registers for ``key``: its task instance id, retries 0, smart_pending."""
    sensor = NamedHivePartitionSensor(task_id=ti_task_id(key), partition_names=[partition], timeout=timeout, retries=0)
    return task_row(sensor, key.dag_id, when, State.SMART_PENDING, cfg)


def sql_rows(engine: Engine) -> tuple[list[TaskRow], list[ExternalRow]]:
    """Every task instance and mapping the SQL store holds, in key order."""
    with engine.connect() as conn:
        tasks = task_sql.list_tasks(conn)
        mappings = sorted((ExternalRow._make(r) for r in conn.execute(select(EX))), key=_mapped_key)
    return tasks, mappings


def memory_rows(store: MemoryExternalTryStore) -> tuple[list[TaskRow], list[ExternalRow]]:
    return [store.store.tasks[k] for k in sorted(store.store.tasks)], sorted(store.mappings.values(), key=_mapped_key)


def _mapped_key(row: ExternalRow) -> tuple[Any, ...]:
    return row.instance, row.dag_id, row.task_id, row.run_id, row.map_index


CONFLICT = "InsertConflict"  # what ``Both.both`` returns for an operation that raised it (nothing written)


def outcome(operation: Any, *args: Any) -> Any:
    try:
        return operation(*args)
    except InsertConflict:
        return CONFLICT


class Both:
    """The SQL store and the memory one on the same operations: each answer compared, the SQL one returned."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.sql = SqlExternalTryStore(engine)
        self.memory = MemoryExternalTryStore()
        self.rounds: tuple[Any, InMemoryStore] = (SqlRoundStore(engine), self.memory.store)

    def both(self, operation: str, *args: Any) -> Any:
        """``operation`` on each store: the same answer, or both an InsertConflict (returned as ``CONFLICT``)."""
        ours, theirs = (outcome(getattr(store, operation), *args) for store in (self.sql, self.memory))
        assert ours == theirs, (operation, args, ours, theirs)
        return ours

    def states(self, asked: list[Asked]) -> list[dict[str, Any]]:
        """The door's answers (``external_states``) over each store: the same."""
        ours, theirs = (external_states(store, asked) for store in (self.sql, self.memory))
        assert ours == theirs, (asked, ours, theirs)
        return ours

    def round(self, operation: str, *args: Any) -> Any:
        """A round's step on the task rows of both (cohorts compared in any order)."""
        ours, theirs = (getattr(store, operation)(*args) for store in self.rounds)
        shown = sorted if isinstance(ours, list) else (lambda value: value)
        assert shown(ours) == shown(theirs), (operation, args, ours, theirs)
        return ours

    def by_hand(self, key: TaskKey, state: str, now: datetime) -> None:
        """A user's ``set-state`` (``tasks.set_state`` without a guard)."""
        with self.engine.begin() as conn:
            task_sql.set_state(conn, key, state, now=now)
        self.memory.store.set_state(key, state, now=now)

    def same_rows(self) -> None:
        assert sql_rows(self.engine) == memory_rows(self.memory)


def test_the_memory_store_answers_a_script_as_the_sql_one(cfg: Config, engine: Engine) -> None:
    """Each kind of registration, with what it must answer on both stores."""
    both, clock = Both(engine), Clock(T0)
    key = KEYS[0]

    def row(partition: str = PARTITIONS[0], timeout: int = 600) -> TaskRow:
        clock.advance(1)
        return make_row(cfg, key, partition, timeout, clock())

    first = row()
    assert both.both("register_try", key, 1, first, DAY, SUPERSEDED) == (None, None)  # a new key
    same = both.both("register_try", key, 1, row(), DAY, SUPERSEDED)
    assert same.registered_try == 1 and same.task.key == first.key  # the same try and wait: its task instance
    assert both.both("register_try", key, 1, first, DAY, SUPERSEDED).task.key == first.key
    second = row()
    assert both.both("register_try", key, 2, second, DAY, SUPERSEDED) == (1, None)  # a newer try
    assert both.both("register_try", key, 1, row(), DAY, SUPERSEDED) == (2, None)  # an older one: nothing written
    taken = second._replace(attr_dict=second.attr_dict.replace("ds=1", "ds=2"))
    assert both.both("register_try", key, 2, taken, DAY, SUPERSEDED) == CONFLICT  # its key is taken: nothing written
    other = row(PARTITIONS[1])
    assert both.both("register_try", key, 2, other, DAY, SUPERSEDED) == (2, None)  # the same try, another check
    both.same_rows()
    tasks, mappings = sql_rows(engine)
    assert [(t.state, t.error) for t in tasks] == [
        (State.SKIPPED, SUPERSEDED.newer_try),
        (State.SKIPPED, SUPERSEDED.other_check),
        (State.SMART_PENDING, None),
    ]
    assert [(m.try_number, m.ti_execution_date, m.logical_date) for m in mappings] == [(2, other.execution_date, DAY)]

    by_hand = row(timeout=60)
    assert both.both("register_try", key, 3, by_hand, None, SUPERSEDED) == (2, None)
    both.by_hand(by_hand.key, State.SUCCESS, clock())  # a user ends it: a newer try leaves it as it is
    assert both.both("register_try", key, 4, row(), None, SUPERSEDED) == (3, None)
    assert [t.state for t in sql_rows(engine)[0]][-2:] == [State.SUCCESS, State.SMART_PENDING]

    clock.advance(1)  # KEYS 0, 1 and 3 have one task instance id ("wait"): at one time, one task instance key
    new = [NewTry(k, 1, make_row(cfg, k, PARTITIONS[0], 600, clock()), None) for k in KEYS]
    assert both.both("register_new_tries", [new[1], new[1]]) == CONFLICT  # a key named twice: nothing written
    assert both.both("register_new_tries", new[:3]) == set(KEYS[1:3])  # key 0 is mapped: left out
    assert both.both("register_new_tries", new[3:]) == CONFLICT  # its task instance's key is KEYS[1]'s: nothing written
    assert both.both("register_new_tries", new[:3]) == set()
    limit = cfg.shard_code_upper_limit
    assert both.round("start_new", 0, limit, clock(), "w", None)  # pending → running
    landed = RoundWrites(landed_hashes=[new[2].row.hashcode])
    assert both.round("write_round", 0, limit, landed, clock(), None) == {State.SUCCESS: 3}
    answers = both.states([Asked(k, n) for k in KEYS for n in (1, 4)])
    assert [a["state"] for a in answers] == [
        "superseded",  # key 0 is at try 4, whose check landed
        State.SUCCESS,
        State.SUCCESS,
        "unknown",
        State.SUCCESS,
        "unknown",
        "unknown",
        "unknown",
    ]
    both.same_rows()


class ParityModel(StoreModel):
    """Both stores on one clock, run ``on`` the SQL engine and config."""

    emptied = (EX, TI)

    def __init__(self) -> None:
        super().__init__()
        self.stores = Both(self.engine)
        self.clock = Clock(T0)
        self.tries: dict[ExternalKey, int] = {}  # the try each key is at (the memory store's, compared with SQL's)

    def row(self, key: ExternalKey, check: int, timeout: int, later: bool) -> TaskRow:
        if later:
            self.clock.advance(1)
        return make_row(self.cfg, key, PARTITIONS[check], timeout, self.clock())

    def guarded(self, before: dict[TaskKey, TaskRow]) -> None:
        """What a registration may have done to the rows that were there: nothing, or a waiting one skipped; and to
        the keys: moved on to a newer try or the same one."""
        after = self.stores.memory.store.tasks
        for key, old in before.items():
            new = after[key]
            assert new == old or (old.state in SUPERSEDABLE and new.state == State.SKIPPED), (old, new)
        for external, mapped in self.stores.memory.mappings.items():
            assert mapped.try_number >= self.tries.get(external, 0)
            self.tries[external] = mapped.try_number

    @rule(
        key=st.sampled_from(KEYS),
        try_number=st.integers(1, 3),
        check=st.integers(0, 1),
        timeout=st.sampled_from(TIMEOUTS),
        later=st.booleans(),
        logical=st.booleans(),
    )
    def register(self, key: ExternalKey, try_number: int, check: int, timeout: int, later: bool, logical: bool) -> None:
        """A try registered (``later`` False: at the time of the previous one, whose key may be taken)."""
        before = dict(self.stores.memory.store.tasks)
        row = self.row(key, check, timeout, later)
        self.stores.both("register_try", key, try_number, row, DAY if logical else None, SUPERSEDED)
        self.guarded(before)

    @rule(
        keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=4),
        try_number=st.integers(1, 2),
        check=st.integers(0, 1),
        later=st.booleans(),
    )
    def register_batch(self, keys: list[ExternalKey], try_number: int, check: int, later: bool) -> None:
        """New tries together (a key named twice, or two runs of one task at one time: nothing written)."""
        before = dict(self.stores.memory.store.tasks)
        if later:
            self.clock.advance(1)
        new = [NewTry(k, try_number, make_row(self.cfg, k, PARTITIONS[check], 600, self.clock()), DAY) for k in keys]
        self.stores.both("register_new_tries", new)
        self.guarded(before)

    @rule()
    def round_starts(self) -> None:
        self.stores.round("start_new", 0, self.cfg.shard_code_upper_limit, self.clock(), "w", None)

    @rule(check=st.integers(0, 1), landed=st.booleans())
    def round_ends(self, check: int, landed: bool) -> None:
        """A round marks every waiting task of a check: landed (success) or failed for good."""
        hashcode = make_row(self.cfg, KEYS[0], PARTITIONS[check], 600, T0).hashcode
        tasks = [r for r in self.stores.memory.store.tasks.values() if r.hashcode == hashcode]
        if landed:
            writes = RoundWrites(landed_hashes=[hashcode])
        elif tasks:
            writes = RoundWrites(failed=[(tasks[0].vigil, False, "db.t is not partitioned")])
        else:
            return
        self.stores.round("write_round", 0, self.cfg.shard_code_upper_limit, writes, self.clock(), None)

    @rule(data=st.data(), state=st.sampled_from(STATES))
    def user_sets(self, data: st.DataObject, state: str) -> None:
        tasks = sorted(self.stores.memory.store.tasks)
        if tasks:
            self.stores.by_hand(data.draw(st.sampled_from(tasks)), state, self.clock())

    @rule(
        asked=st.lists(st.tuples(st.sampled_from(KEYS), st.integers(1, 3), st.booleans()), min_size=1, max_size=5),
        check=st.integers(0, 1),
    )
    def read_states(self, asked: list[tuple[ExternalKey, int, bool]], check: int) -> None:
        """The stores' states, and the door's answers over them (asked with a check's hashcode, or without)."""
        self.stores.both("read_states", [k for k, _, _ in asked])
        hashcode = make_row(self.cfg, KEYS[0], PARTITIONS[check], 600, T0).hashcode
        self.stores.states([Asked(k, n, hashcode if named else None) for k, n, named in asked])

    @rule(seconds=st.sampled_from([1, 30]))
    def time_passes(self, seconds: int) -> None:
        self.clock.advance(seconds)

    @invariant()
    def both_hold_the_same_rows(self) -> None:
        type(self).steps += 1
        self.stores.same_rows()
        self.stores.both("read_states", KEYS)


def test_the_memory_store_keeps_step_with_the_sql_one(cfg: Config, engine: Engine) -> None:
    examples = 30 if engine.dialect.name == "sqlite" else 12
    run_model(ParityModel.on(engine, cfg), examples=examples, steps=30)
