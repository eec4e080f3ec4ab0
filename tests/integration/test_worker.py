"""Rounds over a range against a real metastore and a real metadata DB (SQLite and Postgres)."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, update

from smartsensor.adapters.sql import tasks as task_sql
from smartsensor.adapters.sql.engine import make_engine
from smartsensor.adapters.sql.registration_store import SqlRegistrationStore
from smartsensor.adapters.sql.scheduler_store import SqlSchedulerStore
from smartsensor.domain.keys import TaskKey
from smartsensor.domain.states import State
from smartsensor.hive_filter.names import TableName
from smartsensor.schema.models import task_instance
from smartsensor.sensors import HivePartitionSensor
from smartsensor.standalone.registration import register
from smartsensor.standalone.scheduler import requeue_retries
from tests.support import custom_sensors
from tests.support.catalog_doubles import Clock
from tests.support.common import DAY, named, new_db
from tests.support.hive_helpers import create_table, land
from tests.support.round_helpers import RangeUnderTest, spark_range

pytestmark = pytest.mark.spark


def make_worker(engine: Any, cfg: Any, spark: Any, clock: Clock, lo: int = 0, hi: int | None = None) -> RangeUnderTest:
    return spark_range(engine, cfg, spark, lo, hi, clock=clock)


def states(engine: Any) -> dict[tuple[str, str], str]:
    with engine.connect() as conn:
        return {(r.dag_id, r.task_id): r.state for r in task_sql.list_tasks(conn)}


def test_duplicates_across_dags_marked_together_from_one_poke(engine, cfg, spark, hive_db, clock) -> None:
    create_table(spark, hive_db, "events")
    name = f"{hive_db}.events/ds={{{{ ds }}}}/hr=00"
    register(
        SqlRegistrationStore(engine),
        [(f"dag{i}", named("wait", name)) for i in range(3)]
        + [("other", named("wait", f"{hive_db}.events/ds={{{{ ds }}}}/hr=01"))],
        DAY,
        cfg,
    )
    w = make_worker(engine, cfg, spark, clock)
    first = w.run_round()
    assert first.loaded == 4 and first.distinct_hashes == 2 and first.started == 4
    assert first.catalog_calls == 1 and first.marked == {}
    land(spark, hive_db, "events", ds="2026-11-22", hr="00")
    clock.advance(60)
    second = w.run_round()
    assert second.catalog_calls == 1 and second.groups_poked == 2
    assert second.marked == {"success": 3}
    s = states(engine)
    assert [s[(f"dag{i}", "wait")] for i in range(3)] == ["success"] * 3
    assert s[("other", "wait")] == "smart_running"


def test_one_partition_1000_tasks_one_catalog_call_one_update(engine, cfg, spark, hive_db, clock) -> None:
    create_table(spark, hive_db, "big")
    sensors = [(f"dag{i % 10}", named(f"t{i}", f"{hive_db}.big/ds={{{{ ds }}}}/hr=00")) for i in range(1000)]
    register(SqlRegistrationStore(engine), sensors, DAY, cfg)
    w = make_worker(engine, cfg, spark, clock)
    w.run_round()
    land(spark, hive_db, "big", ds="2026-11-22", hr="00")
    clock.advance(60)
    statements: list[str] = []
    listener = lambda *args: statements.append(args[2])  # noqa: E731 - a one-line event listener
    event.listen(engine, "before_cursor_execute", listener)
    try:
        result = w.run_round()
    finally:
        event.remove(engine, "before_cursor_execute", listener)
    assert result.loaded == 1000 and result.distinct_hashes == 1
    assert result.catalog_calls == 1
    assert result.marked == {"success": 1000}
    updates = [s for s in statements if s.lstrip().upper().startswith("UPDATE TASK_INSTANCE")]
    feed = [s for s in updates if "RETURNING" in s.upper()]  # the change feed: start what is pending
    assert len(feed) == 1 and len(updates) == 2, updates  # ... and the one UPDATE that marks all 1000
    # the feed, the reconciliation (60 s passed: one indexed SELECT, after, on PostgreSQL, the oldest open
    # transaction's start from pg_stat_activity), the one UPDATE (+ BEGIN on some drivers)
    assert result.db_statements <= (5 if engine.dialect.name == "postgresql" else 4)


def test_timeout_with_retries_then_failed(engine, cfg, spark, hive_db, clock) -> None:
    create_table(spark, hive_db, "t")
    register(
        SqlRegistrationStore(engine),
        [("d", named("w", f"{hive_db}.t/ds=never/hr=00", poke_interval=10, timeout=30, retries=1, retry_delay=5))],
        DAY,
        cfg,
    )
    w = make_worker(engine, cfg, spark, clock)
    w.run_round()
    clock.advance(29)
    assert w.run_round().marked == {}
    clock.advance(1)
    assert w.run_round().marked == {"up_for_retry": 1}
    assert (
        requeue_retries(SqlSchedulerStore(engine), cfg, now=clock.now + timedelta(seconds=1)) == {}
    )  # retry_delay not passed
    assert requeue_retries(SqlSchedulerStore(engine), cfg, now=clock.now + timedelta(seconds=5)) == {"smart_pending": 1}
    with engine.connect() as conn:
        row = task_sql.get_task(conn, "d", "w", DAY)
    assert row.state == "smart_pending" and row.try_number == 2 and row.start_date is None
    clock.advance(10)
    w.run_round()  # second try starts now
    clock.advance(30)
    assert w.run_round().marked == {"failed": 1}
    with engine.connect() as conn:
        assert task_sql.get_task(conn, "d", "w", DAY).error == "timed out waiting"


def test_soft_fail_skips_and_execution_timeout_wins(engine, cfg, spark, hive_db, clock) -> None:
    create_table(spark, hive_db, "t")
    register(
        SqlRegistrationStore(engine),
        [
            ("d", named("soft", f"{hive_db}.t/ds=never/hr=00", timeout=100, soft_fail=True)),
            ("d", named("short", f"{hive_db}.t/ds=never/hr=01", timeout=1000, execution_timeout=50)),
        ],
        DAY,
        cfg,
    )
    w = make_worker(engine, cfg, spark, clock)
    w.run_round()
    clock.advance(50)
    assert w.run_round().marked == {"failed": 1}
    clock.advance(50)
    assert w.run_round().marked == {"skipped": 1}
    assert states(engine) == {("d", "soft"): "skipped", ("d", "short"): "failed"}


def test_each_task_interval_respected(engine, cfg, spark, hive_db, clock) -> None:
    create_table(spark, hive_db, "t")
    create_table(spark, hive_db, "u")
    register(
        SqlRegistrationStore(engine),
        [
            ("d", named("fast", f"{hive_db}.t/ds=1/hr=00", poke_interval=10)),
            ("d", named("slow_same", f"{hive_db}.t/ds=1/hr=00", poke_interval=300)),
            ("d", named("slow", f"{hive_db}.u/ds=1/hr=00", poke_interval=300)),
        ],
        DAY,
        cfg,
    )
    w = make_worker(engine, cfg, spark, clock)
    assert w.run_round().groups_poked == 2
    polled = []
    for _ in range(30):
        clock.advance(10)
        r = w.run_round()
        polled.append((r.groups_poked, r.catalog_calls))
    assert polled[:29] == [(1, 1)] * 29  # t=10..290 s: only the 10 s group, one table
    assert polled[29] == (2, 2)  # t=300 s: the 300 s group is due too


def test_exponential_backoff(engine, cfg, spark, hive_db, clock) -> None:
    create_table(spark, hive_db, "t")
    register(
        SqlRegistrationStore(engine),
        [("d", named("b", f"{hive_db}.t/ds=1/hr=00", poke_interval=10, exponential_backoff=True))],
        DAY,
        cfg,
    )
    w = make_worker(engine, cfg, spark, clock)
    poked_at = []
    for second in range(0, 160):
        if w.run_round().groups_poked:
            poked_at.append(second)
        clock.advance(1)
    assert poked_at == [0, 10, 30, 70, 150]


def test_range_bounds_min_inclusive_max_exclusive(engine, cfg, spark, hive_db, clock) -> None:
    create_table(spark, hive_db, "t")
    register(
        SqlRegistrationStore(engine), [("d", named(f"t{i}", f"{hive_db}.t/ds={i}/hr=00")) for i in range(3)], DAY, cfg
    )
    with engine.begin() as conn:
        for i, code in enumerate((100, 199, 200)):
            conn.execute(update(task_instance).where(task_instance.c.task_id == f"t{i}").values(shardcode=code))
    w = make_worker(engine, cfg, spark, clock, 100, 200)
    assert w.run_round().loaded == 2
    assert states(engine)[("d", "t2")] == "smart_pending"
    assert make_worker(engine, cfg, spark, clock, 200, 201).run_round().loaded == 1


def test_overlapping_workers_never_double_mark_or_resurrect(engine, cfg, spark, hive_db, clock) -> None:
    create_table(spark, hive_db, "t")
    register(
        SqlRegistrationStore(engine),
        [(f"d{i}", named("w", f"{hive_db}.t/ds={i % 5}/hr=00")) for i in range(50)],
        DAY,
        cfg,
    )
    engine2 = make_engine(cfg.sql_alchemy_conn)
    a = make_worker(engine, cfg, spark, clock, 0, 7000)
    b = make_worker(engine2, cfg, spark, clock, 3000, 10000)
    a.run_round(), b.run_round()
    for ds in range(5):
        land(spark, hive_db, "t", ds=str(ds), hr="00")
    clock.advance(120)
    results = []
    threads = [threading.Thread(target=lambda w=w: results.append(w.run_round())) for w in (a, b)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert sum(r.marked.get("success", 0) for r in results) == 50
    with engine.begin() as conn:  # a user clears one task by hand afterwards
        task_sql.set_state(conn, TaskKey("d0", "w", DAY), State.SCHEDULED)
    clock.advance(120)
    assert a.run_round().marked == {} and b.run_round().marked == {}
    assert states(engine)[("d0", "w")] == "scheduled"
    engine2.dispose()


def test_stale_round_never_ends_a_newer_try(engine, cfg, spark, hive_db, clock) -> None:
    """Worker A loads try 1 as timed out; before it writes, B ends try 1, the scheduler re-queues it and B
    starts try 2, and a user resets another task by hand. A's late write must leave both newer tries alone."""
    from smartsensor.service.round.poke import poke_plans

    create_table(spark, hive_db, "t")
    register(
        SqlRegistrationStore(engine),
        [
            ("d", named("r", f"{hive_db}.t/ds=never/hr=00", timeout=30, retries=1, retry_delay=0)),
            ("d", named("m", f"{hive_db}.t/ds=never/hr=01", timeout=30)),
        ],
        DAY,
        cfg,
    )
    engine2 = make_engine(cfg.sql_alchemy_conn)
    a, b = make_worker(engine, cfg, spark, clock), make_worker(engine2, cfg, spark, clock)
    a.run_round()
    clock.advance(30)
    plan = a.plan_round()  # A sees both tries as timed out ...
    poke_plans([plan], a.answerer, 60)
    assert b.run_round().marked == {"up_for_retry": 1, "failed": 1}  # ... but B ends them first
    assert requeue_retries(SqlSchedulerStore(engine), cfg, now=clock.now) == {"smart_pending": 1}
    with engine.begin() as conn:
        task_sql.set_state(conn, TaskKey("d", "m", DAY), State.SMART_PENDING)  # a user gives m a fresh try
    clock.advance(1)
    assert b.run_round().started == 2  # try 2 of r and the fresh try of m start
    assert a.finish_round(plan).marked == {}
    assert states(engine) == {("d", "r"): "smart_running", ("d", "m"): "smart_running"}
    with engine.connect() as conn:
        assert task_sql.get_task(conn, "d", "r", DAY).try_number == 2
    engine2.dispose()


def test_manual_override_wins(engine, cfg, spark, hive_db, clock) -> None:
    create_table(spark, hive_db, "t")
    register(
        SqlRegistrationStore(engine),
        [("d", named(f"t{i}", f"{hive_db}.t/ds=1/hr=00", timeout=100)) for i in range(3)],
        DAY,
        cfg,
    )
    w = make_worker(engine, cfg, spark, clock)
    w.run_round()
    with engine.begin() as conn:
        task_sql.set_state(conn, TaskKey("d", "t0", DAY), State.FAILED)
        task_sql.set_state(conn, TaskKey("d", "t1", DAY), State.SUCCESS)
    land(spark, hive_db, "t", ds="1", hr="00")
    clock.advance(60)
    assert w.run_round().marked == {"success": 1}
    assert states(engine) == {("d", "t0"): "failed", ("d", "t1"): "success", ("d", "t2"): "success"}


def test_forced_hash_collision_never_marks_the_other_check(engine, cfg, spark, hive_db, clock) -> None:
    create_table(spark, hive_db, "t")
    register(
        SqlRegistrationStore(engine),
        [
            ("d", named("a", f"{hive_db}.t/ds=1/hr=00")),
            ("d", named("a2", f"{hive_db}.t/ds=1/hr=00")),
            ("d", named("b", f"{hive_db}.t/ds=2/hr=00")),
        ],
        DAY,
        cfg,
    )
    with engine.begin() as conn:
        row_a = task_sql.get_task(conn, "d", "a", DAY)
        conn.execute(
            update(task_instance)
            .where(task_instance.c.task_id == "b")
            .values(hashcode=row_a.hashcode, shardcode=row_a.shardcode)
        )
    land(spark, hive_db, "t", ds="1", hr="00")
    r = make_worker(engine, cfg, spark, clock).run_round()
    assert r.distinct_hashes == 1 and r.distinct_checks == 2 and r.collisions == 1
    assert r.marked == {"success": 2}
    assert states(engine) == {("d", "a"): "success", ("d", "a2"): "success", ("d", "b"): "smart_running"}


def test_permanent_error_fails_with_message(engine, cfg, spark, hive_db, clock) -> None:
    spark.sql(f"CREATE TABLE {hive_db}.flat (x INT) STORED AS PARQUET")
    register(
        SqlRegistrationStore(engine),
        [("d", HivePartitionSensor(task_id="p", table=f"{hive_db}.flat", partition={"ds": "1"}))],
        DAY,
        cfg,
    )
    r = make_worker(engine, cfg, spark, clock).run_round()
    assert r.marked == {"failed": 1} and r.permanent_errors == 1
    with engine.connect() as conn:
        assert "not partitioned" in task_sql.get_task(conn, "d", "p", DAY).error


def test_row_with_unknown_classpath_is_never_imported(engine, cfg, spark, clock, tmp_path) -> None:
    marker = tmp_path / "imported"
    evil_module = tmp_path / "evil_mod.py"
    evil_module.write_text(f"open({str(marker)!r}, 'w').write('x')\nclass Evil: pass\n")
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        register(SqlRegistrationStore(engine), [("d", named("x", "a.b/ds=1"))], DAY, cfg)
        with engine.begin() as conn:
            conn.execute(update(task_instance).values(classpath="evil_mod.Evil"))
        r = make_worker(engine, cfg, spark, clock).run_round()
    finally:
        sys.path.remove(str(tmp_path))
    assert r.marked == {"failed": 1}
    assert not marker.exists()
    with engine.connect() as conn:
        assert "not a known smart-eligible sensor class" in task_sql.get_task(conn, "d", "x", DAY).error


def test_user_sensor_poked_once_per_distinct_hash(tmp_path, db_url, spark, clock) -> None:
    cfg, engine = new_db(
        tmp_path,
        db_url,
        smart_sensor__sensor_modules="tests.support.custom_sensors",
        smart_sensor__sensors_enabled="KeySensor",
    )
    custom_sensors.POKES.clear()
    register(
        SqlRegistrationStore(engine),
        [(f"d{i}", custom_sensors.KeySensor(task_id="k", key=f"key{i % 2}")) for i in range(6)],
        DAY,
        cfg,
    )
    w = make_worker(engine, cfg, spark, clock)
    r = w.run_round()
    assert r.poke_calls == 2 and sorted(custom_sensors.POKES) == ["key0", "key1"] and r.catalog_calls == 0
    custom_sensors.READY.add("key1")
    clock.advance(60)
    assert w.run_round().marked == {"success": 3}
    custom_sensors.READY.clear()
    engine.dispose()


def test_leased_worker_lists_each_table_once_for_all_its_ranges(engine, cfg, spark, hive_db, clock) -> None:
    from smartsensor.roots.worker import leased_ranges

    create_table(spark, hive_db, "t")
    register(
        SqlRegistrationStore(engine), [(f"d{i}", named("w", f"{hive_db}.t/ds={i}/hr=00")) for i in range(40)], DAY, cfg
    )
    served = leased_ranges(engine, cfg, spark_provider=lambda: spark)
    served.follow_leases()
    assert len(served.ranges) == 5  # alone: it holds every range
    [result] = served.timer_rounds()
    assert result.ranges == [[0, 2000], [2000, 4000], [4000, 6000], [6000, 8000], [8000, 10000]]
    assert result.loaded == 40 and result.distinct_hashes == 40
    assert result.catalog_calls == 1  # one listing of the table for all five ranges
    for i in range(40):
        land(spark, hive_db, "t", ds=str(i), hr="00")
    served.follow_leases()  # landing 40 partitions can outlast lease_timeout on a loaded machine
    for w in served.ranges.values():
        w.wake({TableName(hive_db, "t")})
    [result] = served.timer_rounds()
    assert result.catalog_calls == 1 and result.marked == {"success": 40} and result.woken == 5
    served.stop()
