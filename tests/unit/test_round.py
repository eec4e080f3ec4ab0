"""The round's logic on the in-memory store with a dict for a catalog: no database, no Spark.

Each test names the rule it pins down. The same rounds run on SQLite and PostgreSQL with a real
SparkSession in tests/integration; tests/integration/test_round_store_parity.py checks that both
stores end in the same states for the same round.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from smartsensor.adapters.memory import InMemoryStore
from smartsensor.domain.keys import TaskKey, VigilKey
from smartsensor.domain.rows import TaskRow
from smartsensor.domain.states import State
from smartsensor.hive_filter.names import TableName
from smartsensor.sensors import NamedHivePartitionSensor
from smartsensor.sensors.errors import PermanentCheckError, TransientCheckError
from smartsensor.service.round.range_rounds import RangeRounds, run_round
from smartsensor.standalone.registration import build_row
from tests.support.catalog_doubles import Clock, DictCatalog
from tests.support.common import DAY, T0, make_cfg, named


@pytest.fixture
def cfg(tmp_path: Any) -> Any:
    """Overrides conftest's cfg: no database behind it."""
    return make_cfg(tmp_path, f"sqlite:///{tmp_path / 'unused.db'}")


def add(store: InMemoryStore, cfg: Any, dag_id: str, sensor: NamedHivePartitionSensor) -> TaskRow:
    row, _ = build_row(sensor, dag_id, DAY, cfg)
    store.add_task(row)
    return row


class Fleet:
    """One worker over the whole range on the in-memory store, answered by ``catalog``."""

    def __init__(self, cfg: Any, store: InMemoryStore, catalog: DictCatalog, clock: Clock) -> None:
        self.worker = RangeRounds(store, cfg, 0, cfg.shard_code_upper_limit, clock=clock)
        self.catalog = catalog

    def round(self) -> Any:
        return run_round([self.worker], lambda: self.catalog)


def state_of(store: InMemoryStore, dag_id: str, task_id: str) -> str:
    return store.tasks[(dag_id, task_id, DAY)].state


def test_identical_waits_are_checked_once_and_marked_together(cfg, clock) -> None:
    store, catalog = InMemoryStore(), DictCatalog()
    for dag in ("a", "b", "c"):
        add(store, cfg, dag, named("wait", "db.events/ds=2026-11-22"))
    add(store, cfg, "d", named("wait", "db.events/ds=2026-11-23"))
    fleet = Fleet(cfg, store, catalog, clock)
    first = fleet.round()
    assert (first.loaded, first.started, first.distinct_checks, first.marked) == (4, 4, 2, {})
    assert len(catalog.asked) == 2 and first.catalog_calls == 1  # two checks on one table: one listing
    catalog.land("db.events/ds=2026-11-22")
    clock.advance(60)
    second = fleet.round()
    assert second.marked == {State.SUCCESS: 3}
    assert [state_of(store, d, "wait") for d in "abcd"] == [State.SUCCESS] * 3 + [State.SMART_RUNNING]


def test_each_task_keeps_its_own_poke_interval(cfg, clock) -> None:
    store, catalog = InMemoryStore(), DictCatalog()
    add(store, cfg, "fast", named("w", "db.t/ds=1", poke_interval=10))
    add(store, cfg, "slow", named("w", "db.t/ds=2", poke_interval=100))
    fleet = Fleet(cfg, store, catalog, clock)
    assert fleet.round().groups_poked == 2  # a new try is checked at once
    polled = []
    for _ in range(10):
        clock.advance(10)
        polled.append(fleet.round().groups_poked)
    assert polled == [1] * 9 + [2]  # the fast one every 10 s; the slow one once, at 100 s


def test_a_landing_signal_makes_its_tables_checks_due_at_once(cfg, clock) -> None:
    store, catalog = InMemoryStore(), DictCatalog()
    add(store, cfg, "d", named("w", "db.t/ds=1", poke_interval=3600))
    fleet = Fleet(cfg, store, catalog, clock)
    fleet.round()
    clock.advance(1)
    catalog.land("db.t/ds=1")
    assert fleet.round().groups_due == 0  # not due for an hour
    fleet.worker.wake({TableName("db", "t")})
    woken = fleet.round()
    assert (woken.woken, woken.marked) == (1, {State.SUCCESS: 1})


@pytest.mark.parametrize(
    "kw, final", [({}, State.FAILED), ({"soft_fail": True}, State.SKIPPED), ({"retries": 1}, State.UP_FOR_RETRY)]
)
def test_a_try_ends_by_its_own_timeout(cfg, clock, kw, final) -> None:
    store, catalog = InMemoryStore(), DictCatalog()
    add(store, cfg, "d", named("w", "db.t/ds=never", timeout=30, poke_interval=10, **kw))
    add(store, cfg, "e", named("w", "db.t/ds=never", timeout=3600, poke_interval=10))
    fleet = Fleet(cfg, store, catalog, clock)
    fleet.round()
    clock.advance(29)
    assert fleet.round().marked == {}
    clock.advance(1)
    assert fleet.round().marked == {final: 1}
    assert state_of(store, "d", "w") == final and state_of(store, "e", "w") == State.SMART_RUNNING
    error = store.tasks[("d", "w", DAY)].error
    assert (error is None) if final == State.UP_FOR_RETRY else error.startswith("timed out waiting")


def test_a_transient_error_waits_and_is_named_when_the_try_times_out(cfg, clock) -> None:
    store, catalog = InMemoryStore(), DictCatalog()
    add(store, cfg, "d", named("w", "db.t/ds=1", timeout=20, poke_interval=10))
    catalog.fail("db.t/ds=1", TransientCheckError("metastore unreachable"))
    fleet = Fleet(cfg, store, catalog, clock)
    first = fleet.round()
    assert (first.transient_errors, first.marked) == (1, {})
    assert "metastore unreachable" in first.transient_example
    clock.advance(20)
    assert fleet.round().marked == {State.FAILED: 1}
    assert store.tasks[("d", "w", DAY)].error == "timed out waiting; last check error: metastore unreachable"


def test_a_permanent_error_fails_every_task_of_that_check_only(cfg, clock) -> None:
    store, catalog = InMemoryStore(), DictCatalog()
    add(store, cfg, "a", named("w", "db.gone/ds=1"))
    add(store, cfg, "b", named("w", "db.gone/ds=1"))
    add(store, cfg, "c", named("w", "db.t/ds=1"))
    catalog.fail("db.gone/ds=1", PermanentCheckError("db.gone is not partitioned"))
    result = Fleet(cfg, store, catalog, clock).round()
    assert (result.permanent_errors, result.marked) == (1, {State.FAILED: 2})
    assert store.tasks[("a", "w", DAY)].error == "db.gone is not partitioned"
    assert state_of(store, "c", "w") == State.SMART_RUNNING


def test_a_users_manual_change_wins_over_a_round_in_flight(cfg, clock) -> None:
    store, catalog = InMemoryStore(), DictCatalog()
    add(store, cfg, "a", named("w", "db.t/ds=1"))
    add(store, cfg, "b", named("w", "db.t/ds=1"))
    fleet = Fleet(cfg, store, catalog, clock)
    plan = fleet.worker.plan_round()
    store.set_state(TaskKey("a", "w", DAY), State.FAILED)  # set by hand between the load and the write
    for g in plan.due:
        g.outcome = True
    assert fleet.worker.finish_round(plan).marked == {State.SUCCESS: 1}
    assert (state_of(store, "a", "w"), state_of(store, "b", "w")) == (State.FAILED, State.SUCCESS)


def test_a_worker_that_lost_its_lease_writes_nothing(cfg, clock) -> None:
    store, catalog = InMemoryStore(), DictCatalog()
    add(store, cfg, "a", named("w", "db.t/ds=1"))
    limit = cfg.shard_code_upper_limit
    store.set_lease(0, limit, "me", 1, T0 + timedelta(seconds=30))
    fleet = Fleet(cfg, store, catalog, clock)
    fleet.worker.fence = _fence(0, "me", 1)
    assert fleet.round().started == 1
    catalog.land("db.t/ds=1")
    store.set_lease(0, limit, "other", 2, T0 + timedelta(seconds=600))  # taken over after a pause
    clock.advance(60)
    lost = fleet.round()
    assert (lost.marked, lost.fenced_out) == ({}, True)
    assert state_of(store, "a", "w") == State.SMART_RUNNING
    fleet.worker.fence = _fence(0, "other", 2)  # the new owner's writes go through
    clock.advance(60)
    assert fleet.round().marked == {State.SUCCESS: 1}


def test_colliding_hashes_never_mark_the_other_check(cfg, clock) -> None:
    store, catalog = InMemoryStore(), DictCatalog()
    landed = add(store, cfg, "a", named("w", "db.t/ds=1"))
    other = add(store, cfg, "b", named("w", "db.t/ds=2"))
    store.change_task(("b", "w", DAY), hashcode=landed.hashcode, shardcode=landed.shardcode)  # forced collision
    assert other.attr_dict != landed.attr_dict
    catalog.land("db.t/ds=1")
    result = Fleet(cfg, store, catalog, clock).round()
    assert (result.distinct_hashes, result.distinct_checks, result.collisions) == (1, 2, 1)
    assert result.marked == {State.SUCCESS: 1}
    assert (state_of(store, "a", "w"), state_of(store, "b", "w")) == (State.SUCCESS, State.SMART_RUNNING)


def test_a_row_that_cannot_be_planned_fails_alone(cfg, clock) -> None:
    store, catalog = InMemoryStore(), DictCatalog()
    add(store, cfg, "bad", named("w", "db.t/ds=0"))
    add(store, cfg, "good", named("w", "db.t/ds=1"))
    store.change_task(("bad", "w", DAY), exec_dict=json.dumps({"poke_interval": 1e12}))
    catalog.land("db.t/ds=1")
    result = Fleet(cfg, store, catalog, clock).round()
    assert result.bad_rows == 1 and result.marked == {State.FAILED: 1, State.SUCCESS: 1}
    assert "poke_interval" in store.tasks[("bad", "w", DAY)].error
    assert state_of(store, "good", "w") == State.SUCCESS


def test_a_class_off_the_allow_list_fails_permanently(cfg, clock) -> None:
    store, catalog = InMemoryStore(), DictCatalog()
    add(store, cfg, "a", named("w", "db.t/ds=1"))
    store.change_task(("a", "w", DAY), classpath="os.system")
    result = Fleet(cfg, store, catalog, clock).round()
    assert result.marked == {State.FAILED: 1} and catalog.asked == []
    assert "not a known smart-eligible sensor class" in store.tasks[("a", "w", DAY)].error


def test_rows_stored_with_the_old_class_path_still_resolve(cfg, clock) -> None:
    store, catalog = InMemoryStore(), DictCatalog()
    add(store, cfg, "a", named("w", "db.t/ds=1"))
    store.change_task(("a", "w", DAY), classpath="sensors.hive.NamedHivePartitionSensor")  # written by 0.1
    catalog.land("db.t/ds=1")
    assert Fleet(cfg, store, catalog, clock).round().marked == {State.SUCCESS: 1}


def test_an_outage_is_reported_in_the_result_not_raised(cfg, clock) -> None:
    class Down(InMemoryStore):
        def load_cohorts(self, *args: Any) -> Any:
            raise ConnectionError("database is down")

    result = Fleet(cfg, Down(), DictCatalog(), clock).round()
    assert result.error == "ConnectionError: database is down" and result.marked == {}


def test_a_catalog_that_cannot_start_leaves_every_task_waiting(cfg, clock) -> None:
    store = InMemoryStore()
    add(store, cfg, "a", named("w", "db.t/ds=1", timeout=3600))
    worker = RangeRounds(store, cfg, 0, cfg.shard_code_upper_limit, clock=clock)

    def no_java() -> Any:
        raise RuntimeError("Java gateway process exited")

    result = run_round([worker], no_java)
    assert result.transient_errors == 1 and "Spark unavailable" in result.transient_example
    assert state_of(store, "a", "w") == State.SMART_RUNNING


def test_the_round_counts_store_statements(cfg, clock) -> None:
    store, catalog = InMemoryStore(), DictCatalog()
    for i in range(50):
        add(store, cfg, f"d{i}", named("w", f"db.t/ds={i}"))
        catalog.land(f"db.t/ds={i}")
    result = Fleet(cfg, store, catalog, clock).round()
    # the rebuild (start + load), one write of all 50 hashes, the round's status row: constant in the number of tasks
    assert result.marked == {State.SUCCESS: 50} and result.db_statements == 3


def test_the_round_times_its_finish_step_as_a_whole(cfg, clock, monkeypatch) -> None:
    """``finish_seconds`` is the finish step's wall time: the ranges' writes run at once in it, so it is less than
    their sum (``write_seconds``)."""
    store, catalog = InMemoryStore(), DictCatalog()
    for i in range(20):
        add(store, cfg, f"d{i}", named("w", f"db.t/ds={i}"))
        catalog.land(f"db.t/ds={i}")
    write = store.write_round

    def slow_write(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.2)
        return write(*args, **kwargs)

    monkeypatch.setattr(store, "write_round", slow_write)
    half, limit = cfg.shard_code_upper_limit // 2, cfg.shard_code_upper_limit
    ranges = [RangeRounds(store, cfg, 0, half, clock=clock), RangeRounds(store, cfg, half, limit, clock=clock)]
    result = run_round(ranges, lambda: catalog)
    assert result.marked == {State.SUCCESS: 20} and result.write_seconds >= 0.4  # both ranges wrote
    assert 0.2 <= result.finish_seconds < result.write_seconds and result.finish_seconds <= result.seconds


def _fence(shard_min: int, owner: str, epoch: int) -> Any:
    from smartsensor.domain.keys import Fence

    return Fence(shard_min, owner, epoch)


def test_checks_are_built_once_per_waiting_check_and_a_raising_one_is_tried_again(cfg, clock, monkeypatch) -> None:
    """checks() follows from the stored fields: a round reuses it while the check waits (W3 has 100,000 distinct
    checks a round); one that raised is not remembered, so a fixed module or a passing glitch is picked up."""
    store, catalog = InMemoryStore(), DictCatalog()
    add(store, cfg, "a", named("w", "db.once/ds=built-once"))
    add(store, cfg, "b", named("w", "db.once/ds=raises-once"))
    calls: list[str] = []
    original = NamedHivePartitionSensor.checks

    def counting(self: NamedHivePartitionSensor) -> Any:
        calls.append(self.partition_names[0])
        if self.partition_names[0].endswith("raises-once") and calls.count(self.partition_names[0]) == 1:
            raise RuntimeError("a passing glitch")
        return original(self)

    monkeypatch.setattr(NamedHivePartitionSensor, "checks", counting)
    fleet = Fleet(cfg, store, catalog, clock)
    first = fleet.round()
    assert first.transient_errors == 1
    for _ in range(3):
        clock.advance(60)
        fleet.round()
    assert calls.count("db.once/ds=built-once") == 1
    assert calls.count("db.once/ds=raises-once") == 2  # raised once, then built and kept
    catalog.land("db.once/ds=raises-once")
    clock.advance(60)
    assert fleet.round().marked == {State.SUCCESS: 1}


def test_the_writes_name_every_hashcode_they_end_for_the_wake_up() -> None:
    """What the round's NOTIFY names: landed, failed (collided or not), timed-out and unplannable tries."""
    from smartsensor.adapters.sql.channels import ended_hashcodes
    from smartsensor.domain.keys import Cohort
    from smartsensor.domain.transitions import DueVigil, decide
    from smartsensor.sensors.errors import PermanentCheckError

    start = datetime(2026, 11, 22, tzinfo=timezone.utc)

    def cohort(timeout: int = 3600) -> dict[Cohort, int]:
        return {Cohort(json.dumps({"timeout": timeout, "poke_interval": 10}), start, 1): 3}

    groups = [
        DueVigil(VigilKey(1, "c", "{}"), cohort(), True),
        DueVigil(VigilKey(2, "c", "{}"), cohort(), True),
        DueVigil(VigilKey(3, "c", "{}"), cohort(), PermanentCheckError("no such column")),
        DueVigil(VigilKey(4, "c", "{}"), {**cohort(timeout=60), **cohort()}, False),
        DueVigil(VigilKey(5, "c", "{}"), cohort(), False),
    ]
    unplannable = (VigilKey(6, "c", "{}"), Cohort("{", start, 1), "bad exec")
    writes = decide(groups, {2}, start + timedelta(seconds=61), bad=[unplannable]).writes
    assert writes.hashcodes() == {1, 2, 3, 4, 6}  # 5 still waits
    assert (
        ended_hashcodes("1,2,-3") == frozenset({1, 2, -3})
        and ended_hashcodes("*") is None
        and ended_hashcodes("x") is None
    )


def two_ranges_all_landed(
    cfg: Any, clock: Any
) -> tuple[InMemoryStore, DictCatalog, list[Any], RangeRounds, RangeRounds]:
    """Twelve tasks over two ranges (both hold some), one round run while nothing had landed, then every partition
    landed and the clock past the next poke: the store, the catalog, the rows and the two ranges."""
    store, catalog = InMemoryStore(), DictCatalog()
    rows = [add(store, cfg, f"d{i}", named("wait", f"db.events/ds=2026-11-{i:02d}")) for i in range(1, 13)]
    middle = cfg.shard_code_upper_limit // 2
    low, high = (
        RangeRounds(store, cfg, 0, middle, clock=clock),
        RangeRounds(store, cfg, middle, cfg.shard_code_upper_limit, clock=clock),
    )
    assert 0 < sum(1 for r in rows if r.shardcode < middle) < len(rows)  # both ranges hold tasks
    run_round([low, high], lambda: catalog)
    for i in range(1, 13):
        catalog.land(f"db.events/ds=2026-11-{i:02d}")
    clock.advance(60)
    return store, catalog, rows, low, high


def test_what_one_range_committed_is_reported_when_another_range_of_the_round_fails(cfg, clock) -> None:
    """A process round over several ranges writes each in its own transaction: when one range's write fails after
    another's committed, the round reports the committed marks with the error (they were lost from the output, and
    from `status`, when the whole round was reported as failed), and only the failed range rebuilds its index."""
    store, catalog, rows, low, high = two_ranges_all_landed(cfg, clock)
    in_low = sum(1 for r in rows if r.shardcode < high.shard_min)

    def lost_connection(*_: Any) -> None:
        raise ConnectionError("server closed the connection unexpectedly")

    setattr(high, "write", lost_connection)  # this range's writes fail from now on  # noqa: B010
    result = run_round([low, high], lambda: catalog)
    assert result.marked == {State.SUCCESS: in_low}
    assert result.error == "ConnectionError: server closed the connection unexpectedly"
    assert sum(1 for r in rows if state_of(store, r.dag_id, "wait") == State.SUCCESS) == in_low
    delattr(high, "write")  # the connection is back: the next round marks the rest
    clock.advance(60)
    assert run_round([low, high], lambda: catalog).marked == {State.SUCCESS: len(rows) - in_low}


def test_a_range_whose_write_committed_reports_its_marks_when_a_later_step_fails(cfg, clock) -> None:
    """A range's finish is decide, write, then update the index (``apply``). When a step after the committed write
    raises, the range's marks stand in the database and must stand in the round's result too, beside the error:
    reported as 0, they went missing from --json, metrics and status (a worker's printed marks then summed to less
    than what the database holds). The failed range rebuilds its index, and nothing is marked twice."""
    store, catalog, rows, low, high = two_ranges_all_landed(cfg, clock)

    def index_update_fails(*_: Any) -> None:
        raise RuntimeError("index update failed")

    setattr(high, "apply", index_update_fails)  # after this range's write has committed  # noqa: B010
    result = run_round([low, high], lambda: catalog)
    assert all(state_of(store, r.dag_id, "wait") == State.SUCCESS for r in rows)  # both writes committed
    assert result.marked == {State.SUCCESS: len(rows)}  # and the round says so
    assert result.error == "RuntimeError: index update failed"
    assert low.index_current() and not high.index_current()  # only the failed range rebuilds its index
    delattr(high, "apply")
    clock.advance(60)
    after = run_round([low, high], lambda: catalog)
    assert (after.marked, after.error, after.rebuilt) == ({}, None, 1)
