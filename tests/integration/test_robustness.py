"""One bad row or module never stalls or fails the rest, on a real metadata DB (SQLite and Postgres) and the
session's SparkSession: rows that fail alone, sensor modules missing on a host, user sensors that hang.
Pure checks (exec-field bounds, URLs) are in tests/unit/test_robustness.py; the CLI and worker processes
a new user meets first are in tests/process/test_robustness.py."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text, update

from smartsensor.adapters.sql import tasks as task_sql
from smartsensor.adapters.sql.classic_store import SqlClassicRunStore
from smartsensor.adapters.sql.engine import init_db, make_engine
from smartsensor.adapters.sql.registration_store import SqlRegistrationStore
from smartsensor.adapters.sql.scheduler_store import SqlSchedulerStore
from smartsensor.adapters.sql.status_store import SqlStatusReads
from smartsensor.domain.states import State
from smartsensor.hive_filter.names import TableName
from smartsensor.schema.models import task_instance as TI
from smartsensor.sensors import SuccessFileSensor
from smartsensor.service.status import collect_status
from smartsensor.standalone.classic import run_task
from smartsensor.standalone.registration import register
from smartsensor.standalone.scheduler import requeue_retries
from tests.support.common import DAY, make_cfg, new_db
from tests.support.pg import PG_URL, postgres_only
from tests.support.round_helpers import spark_range


def states(engine: Any) -> dict[str, tuple[str, str | None]]:
    with engine.connect() as conn:
        return {r.dag_id: (r.state, r.error) for r in task_sql.list_tasks(conn)}


def set_exec(engine: Any, dag_id: str, **values: Any) -> None:
    """Write exec_dict values by hand, as an older version or a user editing the DB could."""
    with engine.begin() as conn:
        row = conn.execute(text("SELECT exec_dict FROM task_instance WHERE dag_id = :d"), {"d": dag_id}).scalar_one()
        data = json.loads(row)
        data.update(values)
        conn.execute(update(TI).where(TI.c.dag_id == dag_id).values(exec_dict=json.dumps(data)))


# -- a round, the scheduler and a classic run each isolate a bad row ---------------------------


@pytest.mark.spark
def test_worker_round_fails_a_bad_row_alone_and_marks_the_rest(engine, cfg, spark, tmp_path: Path) -> None:
    flag = tmp_path / "_SUCCESS"
    flag.write_text("")
    register(
        SqlRegistrationStore(engine),
        [(f"good{i}", SuccessFileSensor(task_id="s", path=str(flag), poke_interval=1)) for i in range(3)]
        + [("bad", SuccessFileSensor(task_id="s", path=str(tmp_path / "x")))],
        DAY,
        cfg,
    )
    set_exec(engine, "bad", poke_interval=1e12)  # e.g. written by an older version that did not bound it
    worker = spark_range(engine, cfg, spark)
    result = worker.run_round()
    assert result.bad_rows == 1 and result.error is None
    got = states(engine)
    assert [got[f"good{i}"][0] for i in range(3)] == ["success"] * 3
    assert got["bad"][0] == "failed" and "poke_interval" in got["bad"][1]


def test_scheduler_fails_a_bad_retry_row_alone(engine, cfg, tmp_path: Path) -> None:
    register(
        SqlRegistrationStore(engine),
        [
            (d, SuccessFileSensor(task_id="s", path=str(tmp_path / d), retries=1, retry_delay=0))
            for d in ("good", "bad")
        ],
        DAY,
        cfg,
    )
    with engine.begin() as conn:
        conn.execute(update(TI).values(state=State.UP_FOR_RETRY, end_date=DAY))
    set_exec(engine, "bad", retry_delay=1e12)
    counts = requeue_retries(SqlSchedulerStore(engine), cfg, now=DAY + timedelta(hours=1))
    assert counts == {State.SMART_PENDING: 1, State.FAILED: 1}
    got = states(engine)
    assert got["good"][0] == State.SMART_PENDING
    assert got["bad"][0] == State.FAILED and "retry_delay" in got["bad"][1]


def test_classic_run_of_a_bad_row_fails_it_clearly(engine, cfg, tmp_path: Path) -> None:
    classic = make_cfg(tmp_path / "home2", cfg.sql_alchemy_conn, smart_sensor__use_smart_sensor="False")
    register(
        SqlRegistrationStore(engine), [("bad", SuccessFileSensor(task_id="s", path=str(tmp_path / "x")))], DAY, classic
    )
    set_exec(engine, "bad", timeout=1e30)
    result = run_task(
        SqlClassicRunStore(engine), classic, "bad", "s", DAY, spark_provider=lambda: pytest.fail("must not poke")
    )
    assert result.state == State.FAILED and "timeout" in (result.error or "")


# -- a sensor module missing on one host -----------------------------------------------------


@pytest.mark.spark
def test_missing_sensor_module_spares_builtin_tasks_and_waits_for_its_own(tmp_path: Path, db_url: str, spark) -> None:
    cfg, engine = new_db(
        tmp_path / "home",
        db_url,
        smart_sensor__sensor_modules="tests.support.custom_sensors, no_such_sensor_mod",
        smart_sensor__sensors_enabled="SuccessFileSensor, KeySensor",
    )
    flag = tmp_path / "_SUCCESS"
    flag.write_text("")
    register(
        SqlRegistrationStore(engine),
        [(f"builtin{i}", SuccessFileSensor(task_id="s", path=str(flag), timeout=3600)) for i in range(5)]
        + [("mine", SuccessFileSensor(task_id="s", path=str(tmp_path / "never")))],
        DAY,
        cfg,
    )
    with engine.begin() as conn:  # a task of a class the missing module defines
        conn.execute(update(TI).where(TI.c.dag_id == "mine").values(classpath="no_such_sensor_mod.MySensor"))
    worker = spark_range(engine, cfg, spark)
    result = worker.run_round()
    got = states(engine)
    assert [got[f"builtin{i}"][0] for i in range(5)] == ["success"] * 5
    assert got["mine"][0] == State.SMART_RUNNING  # waiting within its timeout, not failed
    assert "no_such_sensor_mod" in result.module_errors and result.module_waiting == 1
    problems = collect_status(SqlStatusReads(engine), cfg).problems
    assert any("no_such_sensor_mod" in p and "cannot be imported" in p for p in problems)
    # a classic run of a built-in class is not affected either
    classic = make_cfg(
        tmp_path / "home2",
        db_url,
        smart_sensor__sensor_modules="no_such_sensor_mod",
        smart_sensor__use_smart_sensor="False",
    )
    register(SqlRegistrationStore(engine), [("classic", SuccessFileSensor(task_id="s", path=str(flag)))], DAY, classic)
    assert (
        run_task(SqlClassicRunStore(engine), classic, "classic", "s", DAY, spark_provider=lambda: spark).state
        == State.SUCCESS
    )
    engine.dispose()


# -- the metadata DB URL ------------------------------------------------------------------------


@postgres_only
def test_plain_postgresql_url_connects(db_url: str) -> None:
    assert PG_URL
    plain = db_url.replace("postgresql+psycopg2://", "postgresql://")
    engine = make_engine(plain)
    init_db(engine)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT 1")).scalar_one() == 1
    engine.dispose()


def _listener_pids(engine: Any) -> list[int]:
    """Backends of this database that LISTEN for landing signals (a worker's signal listener)."""
    with engine.connect() as conn:
        return list(
            conn.execute(
                text(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %'"
                    " AND pid <> pg_backend_pid()"
                )
            ).scalars()
        )


@postgres_only
def test_a_dropped_signal_connection_logs_one_warning_and_no_traceback(
    engine, cfg, caplog: pytest.LogCaptureFixture
) -> None:
    """issue 22, defect 6: the listener's connection dying (a PostgreSQL restart) gave an ERROR traceback from
    the pool, which was handed the dead connection back; now one WARNING, and the listener carries on."""
    import logging

    from smartsensor.adapters.lifecycle import StopRequest
    from smartsensor.adapters.sql.channels import SIGNAL_CHANNEL
    from smartsensor.adapters.sql.notifications import NotificationHub
    from smartsensor.adapters.sql.signals import SqlLandingSignals
    from smartsensor.service.signals import send_signal, signalled_tables
    from tests.support.common import wait_until

    woken: list[set[TableName]] = []
    stopping = StopRequest()
    caplog.set_level(logging.WARNING)
    hub = NotificationHub(engine, stopping, 0.2, name="signal listener")
    hub.subscribe(SIGNAL_CHANNEL, lambda names: woken.append(signalled_tables(names)))
    hub.start()
    try:
        wait_until(lambda: len(_listener_pids(engine)) == 1, timeout=30)
        [first] = _listener_pids(engine)
        with engine.connect() as conn:  # what a server restart does to every session, to this one alone
            assert conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": first}).scalar_one()
        wait_until(lambda: _listener_pids(engine) not in ([], [first]), timeout=60)  # listening again
        send_signal(SqlLandingSignals(engine), "demo.events/ds=2026-11-22")
        wait_until(lambda: {("demo", "events")} in woken, timeout=30)
    finally:
        stopping.request()
        hub.close(timeout=30)
    assert not hub.running
    loud = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not loud, [(r.name, r.getMessage()) for r in loud]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith("signal listener: "), warnings


# -- registration is one transaction --------------------------------------------------------


def test_registration_failing_half_way_leaves_nothing(engine, cfg, tmp_path: Path) -> None:
    sensors = [(f"d{i}", SuccessFileSensor(task_id="s", path=f"/data/{i}/_SUCCESS")) for i in range(12_000)]
    inserts = []

    def fail_second_insert(conn, cursor, statement, params, context, executemany) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO TASK_INSTANCE"):
            inserts.append(1)
            if len(inserts) == 2:
                raise RuntimeError("killed half-way")

    event.listen(engine, "before_cursor_execute", fail_second_insert)
    try:
        with pytest.raises(RuntimeError, match="killed half-way"):
            register(SqlRegistrationStore(engine), sensors, DAY, cfg)
    finally:
        event.remove(engine, "before_cursor_execute", fail_second_insert)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM task_instance")).scalar_one() == 0
    assert (
        len(register(SqlRegistrationStore(engine), sensors, DAY, cfg)) == 12_000
    )  # and a re-submit registers everything
    with engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM task_instance")).scalar_one() == 12_000


# -- logs: normal waiting is quiet, a clean stop is clean -------------------------------------


@pytest.mark.spark
def test_waiting_on_a_missing_table_logs_nothing(spark, hive_db: str, capfd: pytest.CaptureFixture[str]) -> None:
    from smartsensor.adapters.catalog.batch import BatchChecker
    from smartsensor.sensors.checks import PartitionCheck

    checker = BatchChecker(spark)
    check = PartitionCheck(hive_db, "not_there_yet", (("ds", "2026-11-22"),), exact=True)
    capfd.readouterr()
    assert checker.check_all([check]) == {check: False}
    err = capfd.readouterr().err
    assert "TABLE_OR_VIEW_NOT_FOUND" not in err and "ERROR" not in err, err[:500]


def test_classic_run_of_a_class_from_a_missing_module_waits_for_its_timeout(tmp_path: Path, db_url: str) -> None:
    cfg, engine = new_db(
        tmp_path / "home",
        db_url,
        smart_sensor__sensor_modules="no_such_sensor_mod",
        smart_sensor__use_smart_sensor="False",
    )
    register(
        SqlRegistrationStore(engine),
        [("mine", SuccessFileSensor(task_id="s", path="/x", poke_interval=0.1, timeout=1))],
        DAY,
        cfg,
    )
    with engine.begin() as conn:
        conn.execute(update(TI).values(classpath="no_such_sensor_mod.MySensor"))
    result = run_task(
        SqlClassicRunStore(engine), cfg, "mine", "s", DAY, spark_provider=lambda: pytest.fail("nothing to poke")
    )
    assert result.state == State.FAILED  # by its own timeout, not by the missing module
    assert result.error.startswith("timed out waiting; last check error: sensor module 'no_such_sensor_mod'")
    engine.dispose()


# -- Spark in a classic run: started at the poke that needs it --------------------------------


class SparkAtStart:
    """A Spark provider whose first ``failures`` starts fail as where the JVM cannot start; then a stand-in session."""

    def __init__(self, failures: int) -> None:
        self.failures, self.calls = failures, 0

    def __call__(self) -> Any:
        self.calls += 1
        if self.calls <= self.failures:
            raise RuntimeError("Java gateway process exited before sending its port number")
        return object()


@pytest.mark.parametrize("failures,state,pokes", [(1, State.SUCCESS, 2), (10**6, State.FAILED, None)])
def test_classic_run_tries_a_failed_spark_start_again_at_each_poke(
    tmp_path: Path, db_url: str, failures: int, state: str, pokes: int | None
) -> None:
    """A Spark that cannot start is an outage of that poke, not of the run: the next poke starts it again; one that
    never starts ends the try by its timeout, which names it."""
    from tests.support.custom_sensors import SparkSensor

    cfg, engine = new_db(
        tmp_path / "home",
        db_url,
        smart_sensor__sensor_modules="tests.support.custom_sensors",
        smart_sensor__use_smart_sensor="False",
    )
    register(
        SqlRegistrationStore(engine), [("d", SparkSensor(task_id="s", key="k", poke_interval=0.1, timeout=1))], DAY, cfg
    )
    spark = SparkAtStart(failures)
    result = run_task(SqlClassicRunStore(engine), cfg, "d", "s", DAY, spark_provider=spark)
    assert result.state == state, result
    assert spark.calls == result.pokes and (pokes is None or result.pokes == pokes), result
    if state == State.FAILED:
        assert result.pokes >= 2 and result.error == (
            "timed out waiting; last check error: Spark unavailable: "
            "Java gateway process exited before sending its port number"
        )
    engine.dispose()


# -- a user's poke() that hangs or exits ------------------------------------------------------


@pytest.mark.spark
def test_a_hanging_user_sensor_does_not_stall_its_round(tmp_path: Path, db_url: str, spark) -> None:
    import time

    from tests.support import custom_sensors

    cfg, engine = new_db(
        tmp_path / "home",
        db_url,
        smart_sensor__sensor_modules="tests.support.custom_sensors",
        smart_sensor__sensors_enabled="SuccessFileSensor, KeySensor, HangingSensor",
        smart_sensor__poke_timeout="0.5",
    )
    flag = tmp_path / "_SUCCESS"
    flag.write_text("")
    custom_sensors.READY.add("ready")
    custom_sensors.HANG.clear()  # hang until this test's end (an earlier parametrisation released it)
    register(
        SqlRegistrationStore(engine),
        [
            ("files", SuccessFileSensor(task_id="s", path=str(flag))),
            ("mine", custom_sensors.KeySensor(task_id="s", key="ready")),
            ("hangs", custom_sensors.HangingSensor(task_id="s", key="x", timeout=3600)),
        ],
        DAY,
        cfg,
    )
    worker = spark_range(engine, cfg, spark)
    try:
        began = time.monotonic()
        result = worker.run_round()
        assert time.monotonic() - began < 60 and result.transient_errors == 1
        got = states(engine)
        assert got["files"][0] == got["mine"][0] == State.SUCCESS and got["hangs"][0] == State.SMART_RUNNING
    finally:
        custom_sensors.HANG.set()
        engine.dispose()


def test_status_shows_checks_a_round_could_not_answer(engine, cfg) -> None:
    from smartsensor.service.round.report import RoundResult

    worker = spark_range(engine, cfg, lambda: pytest.fail("unused"), 0, 10000)
    worker.record(RoundResult(0, 10000, transient_errors=3, transient_example="Spark unavailable: Java not found"))
    problems = collect_status(SqlStatusReads(engine), cfg).problems
    assert any("3 check(s) got no answer" in p and "Java not found" in p for p in problems)


@pytest.mark.spark
def test_a_class_that_cannot_rebuild_on_this_host_waits_and_its_timeout_says_why(engine, cfg, spark) -> None:
    from tests.support import custom_sensors

    cfg = make_cfg(
        cfg.home,
        cfg.sql_alchemy_conn,
        smart_sensor__sensor_modules="tests.support.custom_sensors",
        smart_sensor__sensors_enabled="KeySensor, FragileSensor",
    )
    register(
        SqlRegistrationStore(engine),
        [
            ("skew", custom_sensors.FragileSensor(task_id="s", key="k-skew", timeout=60)),
            ("fine", custom_sensors.KeySensor(task_id="s", key="k-fine")),
        ],
        DAY,
        cfg,
    )
    custom_sensors.EXPLODE.add("k-skew")
    custom_sensors.READY.add("k-fine")
    now = [datetime(2026, 11, 23, 6, tzinfo=timezone.utc)]
    worker = spark_range(engine, cfg, spark, 0, 10000, clock=lambda: now[0])
    try:
        first = worker.run_round()
        assert first.transient_errors == 1 and "cannot be rebuilt" in (first.transient_example or "")
        assert states(engine)["skew"][0] == State.SMART_RUNNING and states(engine)["fine"][0] == State.SUCCESS
        now[0] += timedelta(seconds=61)
        worker.run_round()
        state, error = states(engine)["skew"]
        assert state == State.FAILED and error.startswith("timed out waiting; last check error:")
        assert "this version cannot read key" in error
    finally:
        custom_sensors.EXPLODE.discard("k-skew")
