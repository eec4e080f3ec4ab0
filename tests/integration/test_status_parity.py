"""The status page's samples in memory (``adapters.memory_status.MemoryStateSamples``) against the SQL ones
(``adapters.sql.status_store.SqlStateSamples``) on SQLite and PostgreSQL: a stateful test moves tasks between
states, writes samples of buckets (again, out of order, with no task at all), deletes the old ones, and after each
step compares what each answered and every sample each holds. Also: the SQL adapters raise ``StoreUnavailable``,
never SQLAlchemy's errors, with the same message."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from sqlalchemy import Engine, insert, update
from sqlalchemy.exc import SQLAlchemyError

from smartsensor.adapters.memory_status import MemoryStateSamples
from smartsensor.adapters.sql.engine import init_db, make_engine
from smartsensor.adapters.sql.history import SS
from smartsensor.adapters.sql.status import TI
from smartsensor.adapters.sql.status_store import SqlExpiredRows, SqlOverviewReads, SqlStateSamples, SqlStatusReads
from smartsensor.cli.app import describe_error
from smartsensor.ports import StoreUnavailable
from smartsensor.service.history import TAKEN, WRITTEN, sample_once
from tests.support.common import T0
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
            lambda: SqlStatusReads(engine).read_outbox_summary(),
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
            SqlStatusReads(engine).read_outbox_summary()
        said, cause = describe_error(raised.value, None), raised.value.__cause__
        assert cause is not None and said == describe_error(cause, None)
        assert said.startswith("metadata database ? unreachable or unusable: no such table")
    finally:
        engine.dispose()
