"""The lease store's contract, written once and run against each store (issue 70): a hypothesis state machine sends
the same lease and worker operations, each in a transaction of its own, to the SQL ``LeaseStore`` (SQLite and
PostgreSQL) and to its in-memory twin (``adapters.memory.InMemoryStore``), and checks after every step that both
answered alike and hold the same rows. Operations that raise roll back on both (a transaction that fails leaves
nothing)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from smartsensor.adapters.memory import InMemoryStore
from smartsensor.adapters.sql.engine import init_db, make_engine
from smartsensor.adapters.sql.lease_store import SqlLeaseStore
from smartsensor.config import ShardRange
from smartsensor.domain.leases import WorkerChecks
from smartsensor.schema.models import shard_lease, worker
from tests.support.common import T0
from tests.support.model import StoreModel, run_model
from tests.support.pg import needs_test_pg, pg_engine

WORKERS = ("w1", "w2", "w3")
LOWS = (0, 10, 20)  # the configured ranges' lower bounds; their upper bounds come from the rules
MOMENTS = st.sampled_from([0, 5, 15, 30, 60])  # seconds after the model's time


class LeaseParity(StoreModel):
    """The same operations on the SQL lease store and the twin (``on`` binds the engine; the config is unused)."""

    emptied = (shard_lease, worker)

    def __init__(self) -> None:
        super().__init__()
        self.sql = SqlLeaseStore(self.engine)
        self.memory = InMemoryStore()
        self.elapsed = 0

    def at(self, seconds: int) -> Any:
        return T0 + timedelta(seconds=self.elapsed + seconds)

    def both(self, operation: str, *args: Any) -> Any:
        """``operation`` in a transaction of each store: the same answer, which it returns."""
        answers = []
        for store in (self.sql, self.memory):
            with store.transaction() as tx:
                answers.append(getattr(tx, operation)(*args))
        assert answers[0] == answers[1], (operation, args, answers)
        return answers[0]

    @rule(seconds=st.sampled_from([1, 10, 31]))
    def time_passes(self, seconds: int) -> None:
        type(self).steps += 1
        self.elapsed += seconds

    @rule(his=st.sampled_from(WORKERS), failing=st.sampled_from([None, 0, 20]), answered=st.sampled_from([None, 0]))
    def upsert_worker(self, his: str, failing: int | None, answered: int | None) -> None:
        type(self).steps += 1
        checks = WorkerChecks(
            None if failing is None else self.at(-failing), None if answered is None else self.at(-answered)
        )
        self.both("upsert_worker", his, "host", 1, T0, self.at(0), checks)

    @rule(his=st.sampled_from(WORKERS))
    def delete_worker(self, his: str) -> None:
        type(self).steps += 1
        self.both("delete_worker", his)

    @rule(ago=MOMENTS)
    def live(self, ago: int) -> None:
        type(self).steps += 1
        self.both("live_worker_checks", self.at(-ago))

    @rule(width=st.sampled_from([5, 10]))
    def ensure_leases(self, width: int) -> None:
        type(self).steps += 1
        self.both("ensure_leases", [ShardRange(lo, lo + width) for lo in LOWS])

    @rule(his=st.sampled_from(WORKERS), lasting=st.sampled_from([5, 30]))
    def renew(self, his: str, lasting: int) -> None:
        type(self).steps += 1
        self.both("renew_leases", his, self.at(0), self.at(lasting))

    @rule(
        lo=st.sampled_from(LOWS), seen=st.integers(0, 4), his=st.sampled_from(WORKERS), lasting=st.sampled_from([5, 30])
    )
    def claim(self, lo: int, seen: int, his: str, lasting: int) -> None:
        type(self).steps += 1
        self.both("claim_lease", lo, seen, his, self.at(0), self.at(lasting))

    @rule(lo=st.sampled_from(LOWS), seen=st.integers(0, 4), upper=st.sampled_from([None, 5, 8]))
    def reshape(self, lo: int, seen: int, upper: int | None) -> None:
        type(self).steps += 1
        self.both("reshape_lease", lo, seen, None if upper is None else lo + upper, self.at(0))

    @rule(lo=st.sampled_from(LOWS), his=st.sampled_from(WORKERS), epoch=st.integers(0, 4))
    def release(self, lo: int, his: str, epoch: int) -> None:
        type(self).steps += 1
        self.both("release_lease", lo, his, epoch)

    @rule(his=st.sampled_from(WORKERS))
    def release_all(self, his: str) -> None:
        type(self).steps += 1
        self.both("release_all_leases", his)

    @rule(his=st.sampled_from(WORKERS), lo=st.sampled_from(LOWS))
    def a_transaction_that_fails_leaves_nothing(self, his: str, lo: int) -> None:
        """A claim and a worker row, then an error inside the same transaction: neither store keeps either."""
        type(self).steps += 1
        for store in (self.sql, self.memory):
            try:
                with store.transaction() as tx:
                    tx.upsert_worker(his, "host", 2, T0, self.at(0))
                    tx.claim_lease(lo, 0, his, self.at(0), self.at(30))
                    raise RuntimeError("the heartbeat failed half way")
            except RuntimeError:
                pass

    @invariant()
    def both_hold_the_same_rows(self) -> None:
        self.both("load_leases")
        assert len(self.both("live_worker_checks", T0 - timedelta(days=1))) == len(self.memory.workers)


def test_the_memory_lease_store_answers_as_sqlite(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'leases.db'}")
    init_db(engine)
    try:
        run_model(LeaseParity.on(engine, None), examples=40, steps=40)  # type: ignore[arg-type]
    finally:
        engine.dispose()


@needs_test_pg
def test_the_memory_lease_store_answers_as_postgresql() -> None:
    with pg_engine() as (engine, _):
        init_db(engine)
        run_model(LeaseParity.on(engine, None), examples=15, steps=40)  # type: ignore[arg-type]
