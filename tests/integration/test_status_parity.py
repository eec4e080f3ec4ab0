"""The status page's stores in memory (``adapters.memory_status``) against the SQL ones
(``adapters.sql.status_store``) on SQLite and PostgreSQL: for the samples, a stateful test moves tasks between
states, writes samples of buckets (again, out of order, with no task at all), deletes the old ones, and after each
step compares what each answered and every sample each holds; for the overview, the same tasks read the same.
Also: the SQL adapters raise ``StoreUnavailable``, never SQLAlchemy's errors, with the same message."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from sqlalchemy import Engine, insert, update
from sqlalchemy.exc import SQLAlchemyError

from smartsensor.adapters.memory import InMemoryStore
from smartsensor.adapters.memory_status import MemoryOverviewReads, MemoryStateSamples
from smartsensor.adapters.sql.engine import init_db, make_engine
from smartsensor.adapters.sql.history import SS
from smartsensor.adapters.sql.status import TI
from smartsensor.adapters.sql.status_store import SqlExpiredRows, SqlOverviewReads, SqlStateSamples, SqlStatusReads
from smartsensor.cli.app import describe_error
from smartsensor.domain.rows import TaskRow
from smartsensor.ports import StoreUnavailable
from smartsensor.service.history import TAKEN, WRITTEN, sample_once
from tests.support.common import SHARD_LIMIT, T0
from tests.support.model import run_parity, sqlite_engine
from tests.support.pg import needs_test_pg, pg_engine

TASKS = [f"t{i}" for i in range(4)]
STATES = ["smart_pending", "smart_running", "success", "failed"]
BUCKETS = [T0 + timedelta(minutes=m) for m in range(6)]
EVER = T0 - timedelta(days=1)


class ParityModel(RuleBasedStateMachine):
    """The same operations on both stores (``machine_for`` binds the SQL engine); the tasks' states are set in the
    SQL store's table and in a dict the memory store counts."""

    engine: Engine
    steps = 0

    def __init__(self) -> None:
        super().__init__()
        with self.engine.begin() as conn:  # no sample, no task: each run starts as the memory store does
            conn.execute(SS.delete())
            conn.execute(TI.delete())
        self.states: dict[str, str] = {}
        self.sql = SqlStateSamples(self.engine)
        self.memory = MemoryStateSamples(lambda: Counter(self.states.values()))

    def both(self, operation: str, *args: Any) -> Any:
        """``operation`` on both stores: the same answer, which it returns."""
        ours = getattr(self.sql, operation)(*args)
        theirs = getattr(self.memory, operation)(*args)
        assert ours == theirs, (operation, args, ours, theirs)
        return ours

    @rule(task=st.sampled_from(TASKS), state=st.sampled_from(STATES))
    def set_state(self, task: str, state: str) -> None:
        """A task registered (waiting) or moved to another state."""
        ParityModel.steps += 1
        with self.engine.begin() as conn:
            if task in self.states:
                conn.execute(update(TI).where(TI.c.task_id == task).values(state=state))
            else:
                conn.execute(insert(TI).values(dag_id="d", task_id=task, execution_date=T0, state=state))
        self.states[task] = state

    @rule(bucket=st.sampled_from(BUCKETS))
    def write_sample(self, bucket: datetime) -> None:
        ParityModel.steps += 1
        self.both("write_sample", bucket)

    @rule(before=st.sampled_from(BUCKETS))
    def delete_before(self, before: datetime) -> None:
        ParityModel.steps += 1
        self.both("delete_before", before)

    @rule(since=st.sampled_from(BUCKETS))
    def samples_since(self, since: datetime) -> None:
        ParityModel.steps += 1
        self.both("samples_since", since)

    @invariant()
    def same_samples(self) -> None:
        self.both("samples_since", EVER)


def test_the_memory_samples_answer_as_sqlite(tmp_path: Path) -> None:
    with sqlite_engine(tmp_path / "samples.db") as engine:
        run_parity(ParityModel, engine, examples=40, steps=30)


@needs_test_pg
def test_the_memory_samples_answer_as_postgresql() -> None:
    with pg_engine() as (engine, _):
        init_db(engine)
        run_parity(ParityModel, engine, examples=15, steps=30)


def test_the_sampler_runs_on_memory_samples() -> None:
    """``sample_once`` over the memory store: a bucket's first sample is written, a second taken, old ones go."""
    states = {"a": "smart_pending", "b": "success"}
    samples = MemoryStateSamples(lambda: Counter(states.values()))
    assert sample_once(samples, 60, 120, T0) == WRITTEN
    assert sample_once(samples, 60, 120, T0 + timedelta(seconds=1)) == TAKEN
    states["a"] = "success"
    assert sample_once(samples, 60, 120, T0 + timedelta(minutes=3)) == WRITTEN  # T0's bucket is older than 120 s
    bucket = T0 + timedelta(minutes=3)
    assert samples.samples_since(EVER) == [(bucket, "success", 2)]


def test_the_sql_adapters_raise_store_unavailable(tmp_path: Path) -> None:
    """On a database without the schema, every adapter raises ``StoreUnavailable`` (not SQLAlchemy's error), its
    message the database's, the original its cause."""
    engine = make_engine(f"sqlite:///{tmp_path / 'empty.db'}")
    try:
        calls = [
            lambda: SqlStatusReads(engine).read_outbox_summary(SHARD_LIMIT),
            lambda: SqlStatusReads(engine).read_stuck(T0, lambda starts: ([], None)),
            lambda: SqlStateSamples(engine).write_sample(T0),
            lambda: SqlStateSamples(engine).delete_before(T0),
            lambda: SqlOverviewReads(engine).read_overview(T0, 5),
            lambda: SqlExpiredRows(engine).prune_rounds(T0, 10, False),
        ]
        for call in calls:
            with pytest.raises(StoreUnavailable, match="no such table") as raised:
                call()
            assert not isinstance(raised.value, SQLAlchemyError)
            assert isinstance(raised.value.__cause__, SQLAlchemyError)
            assert str(raised.value) == str(raised.value.__cause__)
        assert SqlStatusReads(engine).schema_revision() is None  # never initialised: not an error
    finally:
        engine.dispose()


def test_the_cli_describes_store_unavailable_as_the_database_error(tmp_path: Path) -> None:
    """`smartsensor status` on a database without the schema says what it said before the ports: the database's
    error, described by its own type."""
    engine = make_engine(f"sqlite:///{tmp_path / 'empty.db'}")
    try:
        with pytest.raises(StoreUnavailable) as raised:
            SqlStatusReads(engine).read_outbox_summary(SHARD_LIMIT)
        said, cause = describe_error(raised.value, None), raised.value.__cause__
        assert cause is not None and said == describe_error(cause, None)
        assert said.startswith("metadata database ? unreachable or unusable: no such table")
    finally:
        engine.dispose()


def task(i: int, state: str, check: int, ended: int | None) -> TaskRow:
    """A task instance of check ``check`` (its class, table and hashcode), ended ``ended`` minutes after T0."""
    return TaskRow(
        dag_id=f"d{i % 2}",
        task_id=f"t{i}",
        execution_date=T0,
        state=state,
        try_number=1,
        max_tries=0,
        start_date=T0,
        end_date=None if ended is None else T0 + timedelta(minutes=ended),
        updated_at=T0,
        operator=f"Op{check}",
        classpath=f"sensors.Op{check}",
        fileloc=None,
        hostname=None,
        error=None,
        attr_dict=f'{{"table": "db.t{check}"}}',
        exec_dict="{}",
        hashcode=check,
        shardcode=0,
    )


TASK_ROWS = st.lists(
    st.tuples(st.sampled_from(STATES), st.integers(0, 3), st.one_of(st.none(), st.integers(0, 3))), max_size=12
)


def overview_parity(engine: Engine, specs: list[tuple[str, int, int | None]]) -> None:
    """The same tasks and samples in both stores: the same overview."""
    rows = [task(i, state, check, ended) for i, (state, check, ended) in enumerate(specs)]
    with engine.begin() as conn:
        conn.execute(SS.delete())
        conn.execute(TI.delete())
        if rows:
            conn.execute(insert(TI), [r.columns() for r in rows])
    store = InMemoryStore(rows)
    samples = MemoryStateSamples(lambda: Counter(r.state for r in store.tasks.values()))
    for bucket in BUCKETS[:2]:
        assert SqlStateSamples(engine).write_sample(bucket) == samples.write_sample(bucket)
    ours = SqlOverviewReads(engine).read_overview(BUCKETS[1], 3)
    theirs = MemoryOverviewReads(store, samples).read_overview(BUCKETS[1], 3)
    assert ours.samples == theirs.samples
    assert sorted(ours.checks) == sorted(theirs.checks)
    assert ours.landings == theirs.landings


def run_overview_parity(engine: Engine, examples: int) -> None:
    """``overview_parity`` for ``examples`` lists of tasks (the same ones every time)."""
    check = settings(max_examples=examples, deadline=None, derandomize=True)(
        lambda specs: overview_parity(engine, specs)
    )
    given(TASK_ROWS)(check)()


def test_the_memory_overview_reads_as_sqlite(tmp_path: Path) -> None:
    with sqlite_engine(tmp_path / "overview.db") as engine:
        given(TASK_ROWS)(
            settings(max_examples=60, deadline=None, derandomize=True)(lambda specs: overview_parity(engine, specs))
        )()


@needs_test_pg
def test_the_memory_overview_reads_as_postgresql() -> None:
    with pg_engine() as (engine, _):
        init_db(engine)
        given(TASK_ROWS)(
            settings(max_examples=30, deadline=None, derandomize=True)(lambda specs: overview_parity(engine, specs))
        )()
