"""One bad row, value or module never stalls or fails the rest: bounded exec fields, rows that fail alone,
sensor modules missing on a host, and the day-one errors a new user hits (URLs, dates, DAG files, folders)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text, update

from smartsensor.domain.states import State
from smartsensor.schema.models import TaskInstance
from smartsensor.sensors import SensorDefinitionError, SuccessFileSensor, TransientCheckError
from smartsensor.adapters.sql import leases as lease_sql, tasks as task_sql
from smartsensor.service.classic import run_task
from smartsensor.adapters.sql.engine import DatabaseUrlError, init_db, make_engine, normalize_url
from smartsensor.service.registration import register
from smartsensor.service.scheduler import requeue_retries
from smartsensor.service.status import collect_status
from tests.support.round_helpers import spark_range
from tests.conftest import PG_URL, make_cfg, postgres_only
from tests.support.proc_helpers import cli_env

DAY = datetime(2026, 11, 22)
TI = TaskInstance.__table__


def states(engine: Any) -> dict[str, tuple[str, str | None]]:
    with engine.connect() as conn:
        return {r["dag_id"]: (r["state"], r["error"]) for r in task_sql.list_tasks(conn)}


def set_exec(engine: Any, dag_id: str, **values: Any) -> None:
    """Write exec_dict values by hand, as an older version or a user editing the DB could."""
    with engine.begin() as conn:
        row = conn.execute(text("SELECT exec_dict FROM task_instance WHERE dag_id = :d"), {"d": dag_id}).scalar_one()
        data = json.loads(row)
        data.update(values)
        conn.execute(update(TI).where(TI.c.dag_id == dag_id).values(exec_dict=json.dumps(data)))


# -- exec fields are bounded where they enter ---------------------------------------------------

@pytest.mark.parametrize("field,value", [
    ("poke_interval", 10**12), ("poke_interval", 10**30), ("poke_interval", 1e-9), ("poke_interval", 0),
    ("poke_interval", math.nan), ("poke_interval", math.inf), ("timeout", 1e12), ("timeout", -1),
    ("retry_delay", 1e12), ("retry_delay", timedelta(days=400)), ("execution_timeout", 10**400),
    ("max_wait", -5), ("retries", 10**12), ("retries", 2.5), ("poke_interval", "60"), ("soft_fail", "yes"),
])
def test_exec_fields_out_of_bounds_are_refused_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(SensorDefinitionError, match=field) as info:
        SuccessFileSensor(task_id="t", path="/data/_SUCCESS", **{field: value})
    assert len(str(info.value)) < 300


def test_exec_fields_at_their_bounds_are_accepted() -> None:
    s = SuccessFileSensor(task_id="t", path="/data/_SUCCESS", poke_interval=0.1, timeout=timedelta(days=365),
                          retry_delay=0, retries=1000, max_wait=365 * 86400)
    assert (s.poke_interval, s.timeout, s.retries) == (0.1, 365 * 86400, 1000)


# -- a round, the scheduler and a classic run each isolate a bad row ---------------------------

@pytest.mark.spark
def test_worker_round_fails_a_bad_row_alone_and_marks_the_rest(engine, cfg, spark, tmp_path: Path) -> None:
    flag = tmp_path / "_SUCCESS"
    flag.write_text("")
    register(engine, [(f"good{i}", SuccessFileSensor(task_id="s", path=str(flag), poke_interval=1))
                      for i in range(3)] + [("bad", SuccessFileSensor(task_id="s", path=str(tmp_path / "x")))], DAY, cfg)
    set_exec(engine, "bad", poke_interval=1e12)  # e.g. written by an older version that did not bound it
    worker = spark_range(engine, cfg, spark)
    result = worker.run_round()
    assert result.bad_rows == 1 and result.error is None
    got = states(engine)
    assert [got[f"good{i}"][0] for i in range(3)] == ["success"] * 3
    assert got["bad"][0] == "failed" and "poke_interval" in got["bad"][1]


def test_scheduler_fails_a_bad_retry_row_alone(engine, cfg, tmp_path: Path) -> None:
    register(engine, [(d, SuccessFileSensor(task_id="s", path=str(tmp_path / d), retries=1, retry_delay=0))
                      for d in ("good", "bad")], DAY, cfg)
    with engine.begin() as conn:
        conn.execute(update(TI).values(state=State.UP_FOR_RETRY, end_date=DAY))
    set_exec(engine, "bad", retry_delay=1e12)
    counts = requeue_retries(engine, cfg, now=DAY + timedelta(hours=1))
    assert counts == {State.SMART_PENDING: 1, State.FAILED: 1}
    got = states(engine)
    assert got["good"][0] == State.SMART_PENDING
    assert got["bad"][0] == State.FAILED and "retry_delay" in got["bad"][1]


def test_classic_run_of_a_bad_row_fails_it_clearly(engine, cfg, tmp_path: Path) -> None:
    classic = make_cfg(tmp_path / "home2", cfg.sql_alchemy_conn, smart_sensor__use_smart_sensor="False")
    register(engine, [("bad", SuccessFileSensor(task_id="s", path=str(tmp_path / "x")))], DAY, classic)
    set_exec(engine, "bad", timeout=1e30)
    result = run_task(engine, classic, "bad", "s", DAY, spark_provider=lambda: pytest.fail("must not poke"))
    assert result.state == State.FAILED and "timeout" in (result.error or "")


# -- a sensor module missing on one host -----------------------------------------------------

@pytest.mark.spark
def test_missing_sensor_module_spares_builtin_tasks_and_waits_for_its_own(tmp_path: Path, db_url: str, spark) -> None:
    cfg = make_cfg(tmp_path / "home", db_url, smart_sensor__sensor_modules="tests.support.custom_sensors, no_such_sensor_mod",
                   smart_sensor__sensors_enabled="SuccessFileSensor, KeySensor")
    engine = make_engine(db_url)
    init_db(engine)
    flag = tmp_path / "_SUCCESS"
    flag.write_text("")
    register(engine, [(f"builtin{i}", SuccessFileSensor(task_id="s", path=str(flag), timeout=3600))
                      for i in range(5)] + [("mine", SuccessFileSensor(task_id="s", path=str(tmp_path / "never")))],
             DAY, cfg)
    with engine.begin() as conn:  # a task of a class the missing module defines
        conn.execute(update(TI).where(TI.c.dag_id == "mine").values(classpath="no_such_sensor_mod.MySensor"))
    worker = spark_range(engine, cfg, spark)
    result = worker.run_round()
    got = states(engine)
    assert [got[f"builtin{i}"][0] for i in range(5)] == ["success"] * 5
    assert got["mine"][0] == State.SMART_RUNNING  # waiting within its timeout, not failed
    assert "no_such_sensor_mod" in result.module_errors and result.module_waiting == 1
    problems = collect_status(engine, cfg)["problems"]
    assert any("no_such_sensor_mod" in p and "cannot be imported" in p for p in problems)
    # a classic run of a built-in class is not affected either
    classic = make_cfg(tmp_path / "home2", db_url, smart_sensor__sensor_modules="no_such_sensor_mod",
                       smart_sensor__use_smart_sensor="False")
    register(engine, [("classic", SuccessFileSensor(task_id="s", path=str(flag)))], DAY, classic)
    assert run_task(engine, classic, "classic", "s", DAY, spark_provider=lambda: spark).state == State.SUCCESS
    engine.dispose()


def test_worker_says_at_start_which_sensor_module_fails(tmp_path: Path) -> None:
    env = cli_env(tmp_path / "home", f"sqlite:///{tmp_path}/m.db", SMARTSENSOR__SMART_SENSOR__SENSOR_MODULES="mymod_nope")
    subprocess.run([sys.executable, "-m", "smartsensor.cli", "db", "init"], env=env, check=True, capture_output=True)
    proc = subprocess.run([sys.executable, "-m", "smartsensor.cli", "worker", "--once", "--shard-min", "0",
                           "--shard-max", "10000"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "'mymod_nope' cannot be imported on this host" in proc.stderr and "No module named" in proc.stderr


# -- the metadata DB URL ------------------------------------------------------------------------

def test_bare_postgres_schemes_mean_the_installed_driver() -> None:
    assert normalize_url("postgresql://u:p@h:5432/d").drivername == "postgresql+psycopg2"
    assert normalize_url("postgres://u@h/d").drivername == "postgresql+psycopg2"
    assert normalize_url("postgresql+psycopg2://u@h/d").drivername == "postgresql+psycopg2"
    with pytest.raises(DatabaseUrlError, match="not a database URL"):
        normalize_url("not a url at all")
    with pytest.raises(DatabaseUrlError, match="driver .* is not installed"):
        make_engine("postgresql+psycopg://u@127.0.0.1:1/d")


@postgres_only
def test_plain_postgresql_url_connects(db_url: str) -> None:
    assert PG_URL
    plain = db_url.replace("postgresql+psycopg2://", "postgresql://")
    engine = make_engine(plain)
    init_db(engine)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT 1")).scalar_one() == 1
    engine.dispose()


# -- SQLite folders ---------------------------------------------------------------------------

def test_sqlite_folder_is_created_only_under_the_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    outside = tmp_path / "elsewhere" / "deep"
    with pytest.raises(DatabaseUrlError, match="does not exist"):
        make_engine(f"sqlite:///{outside}/x.db", home=home)
    assert not outside.parent.exists()
    make_engine(f"sqlite:///{home}/sub/x.db", home=home).dispose()
    assert (home / "sub").is_dir()


# -- registration is one transaction --------------------------------------------------------

def test_registration_failing_half_way_leaves_nothing(engine, cfg, tmp_path: Path) -> None:
    sensors = [(f"d{i}", SuccessFileSensor(task_id="s", path=f"/data/{i}/_SUCCESS")) for i in range(12_000)]
    inserts = []

    def fail_second_insert(conn, cursor, statement, params, context, executemany) -> None:  # type: ignore[no-untyped-def]
        if statement.lstrip().upper().startswith("INSERT INTO TASK_INSTANCE"):
            inserts.append(1)
            if len(inserts) == 2:
                raise RuntimeError("killed half-way")

    event.listen(engine, "before_cursor_execute", fail_second_insert)
    try:
        with pytest.raises(RuntimeError, match="killed half-way"):
            register(engine, sensors, DAY, cfg)
    finally:
        event.remove(engine, "before_cursor_execute", fail_second_insert)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM task_instance")).scalar_one() == 0
    assert len(register(engine, sensors, DAY, cfg)) == 12_000  # and a re-submit registers everything
    with engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM task_instance")).scalar_one() == 12_000


# -- the CLI: dates, DAG files, options ------------------------------------------------------

def cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = cli_env(tmp_path / "home", f"sqlite:///{tmp_path}/c.db", **env)
    return subprocess.run([sys.executable, "-m", "smartsensor.cli", *args], env=full, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def dag_file(tmp_path: Path) -> Path:
    path = tmp_path / "dags.py"
    path.write_text("from sensors import SuccessFileSensor\nwait = SuccessFileSensor(task_id='w', path='/d/_SUCCESS')\n")
    assert cli(tmp_path, "db", "init").returncode == 0
    return path


@pytest.mark.parametrize("date,message", [
    ("2026-11-22T05:00:00", "is not YYYY-MM-DD"), ("0001-01-01", "between 1900-01-01 and 2999-12-31"),
    ("9999-12-31", "between 1900-01-01 and 2999-12-31"), ("2026-02-30", "not a real day"), ("22/11/2026", "YYYY-MM-DD"),
])
def test_submit_accepts_exactly_a_day(tmp_path: Path, dag_file: Path, date: str, message: str) -> None:
    proc = cli(tmp_path, "submit", str(dag_file), "-d", date)
    assert proc.returncode == 1 and message in proc.stderr and "Traceback" not in proc.stderr
    assert "OverflowError" not in proc.stderr
    assert json.loads(cli(tmp_path, "tasks", "--json").stdout) == []


@pytest.mark.parametrize("body,said", [
    ("import sys\nsys.exit(0)\n", "called sys.exit(0)"),
    ("import sys\nsys.exit('bye')\n", "called sys.exit('bye')"),
    ("import os\nos._exit(0)\n", "called os._exit(0)"),
    ("raise KeyboardInterrupt\n", "raised KeyboardInterrupt"),
    ("def f():\n    return f()\nf()\n", "RecursionError"),
    ("from sensors import SuccessFileSensor\nDAG_ID = ['a']\nw = SuccessFileSensor(task_id='w', path='/x')\n",
     "DAG_ID must be a string"),
])
def test_a_dag_file_that_exits_or_interrupts_is_reported(tmp_path: Path, dag_file: Path, body: str, said: str) -> None:
    bad = tmp_path / "leaving.py"
    bad.write_text(body)
    proc = cli(tmp_path, "submit", str(bad), "-d", "2026-11-22")
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert said in proc.stderr and "leaving.py" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("args,message", [
    (["worker", "--interval", "nan"], "not a finite number"), (["worker", "--interval", "-1"], "--interval"),
    (["worker", "--metrics-port", "70000"], "--metrics-port"), (["workers", "-n", "0"], "-n"),
    (["worker", "--interval", "inf"], "--interval"),
])
def test_cli_numeric_options_are_validated(tmp_path: Path, args: list[str], message: str) -> None:
    proc = cli(tmp_path, *args)
    assert proc.returncode == 2 and message in proc.stderr


def test_worker_once_that_claims_nothing_says_so(tmp_path: Path, dag_file: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/c.db")
    later = datetime.utcnow() + timedelta(hours=1)
    with engine.begin() as conn:  # a live fleet holds every range
        for lo, hi in ((0, 2000), (2000, 4000), (4000, 6000), (6000, 8000), (8000, 10000)):
            conn.execute(text("INSERT INTO shard_lease (shard_min, shard_max, owner, epoch, expires_at) "
                              "VALUES (:lo, :hi, 'other', 1, :t)"), {"lo": lo, "hi": hi, "t": later})
        conn.execute(text("INSERT INTO worker (worker_id, hostname, pid, started_at, heartbeat_at) "
                          "VALUES ('other', 'h', 1, :t, :t)"), {"t": later})
    engine.dispose()
    proc = cli(tmp_path, "worker", "--once")
    assert proc.returncode == 4 and "claimed no shard range" in proc.stderr


def test_status_after_worker_once_shows_its_round(tmp_path: Path, dag_file: Path) -> None:
    assert cli(tmp_path, "worker", "--once", "--json").returncode == 0
    out = cli(tmp_path, "status").stdout
    assert "no worker has reported a round" not in out
    data = json.loads(cli(tmp_path, "status", "--json").stdout)
    assert data["workers"] and all(w["last_round"]["loaded"] == 0 for w in data["workers"])


def test_worker_once_fenced_out_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    from smartsensor.cli.workers import EXIT_NOTHING_WRITTEN, _report_once
    from smartsensor.service.round_report import RoundResult
    with pytest.raises(SystemExit) as info:
        _report_once([RoundResult(0, 10, fenced_out=True)])
    assert info.value.code == EXIT_NOTHING_WRITTEN and "lost its lease" in capsys.readouterr().err


# -- logs: normal waiting is quiet, a clean stop is clean -------------------------------------

@pytest.mark.spark
def test_waiting_on_a_missing_table_logs_nothing(spark, hive_db: str, capfd: pytest.CaptureFixture[str]) -> None:
    from smartsensor.sensors.batch import BatchChecker
    from smartsensor.sensors.checks import PartitionCheck
    checker = BatchChecker(spark)
    check = PartitionCheck(hive_db, "not_there_yet", (("ds", "2026-11-22"),), exact=True)
    capfd.readouterr()
    assert checker.check_all([check]) == {check: False}
    err = capfd.readouterr().err
    assert "TABLE_OR_VIEW_NOT_FOUND" not in err and "ERROR" not in err, err[:500]


@pytest.mark.slow
def test_a_worker_stopped_twice_stops_cleanly(tmp_path: Path) -> None:
    import signal
    import time
    from tests.support.proc_helpers import CliProcess
    env = cli_env(tmp_path / "home", f"sqlite:///{tmp_path}/w.db")
    subprocess.run([sys.executable, "-m", "smartsensor.cli", "db", "init"], env=env, check=True, capture_output=True)
    worker = CliProcess(["worker", "--json", "--interval", "0.2"], env)
    try:
        worker.wait_round(lambda r: True, timeout=120)
        worker.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)  # a supervisor and a process group both forward the stop: the second comes a moment later
        if worker.proc.poll() is None:
            worker.proc.send_signal(signal.SIGTERM)
        # 0, or -15 when the second signal lands during interpreter shutdown (Python restores SIG_DFL then)
        assert worker.proc.wait(timeout=60) in (0, -15)
    finally:
        worker.stop()
    worker._stderr_done.wait(10)
    err = worker.stderr_tail(200)
    assert "SchedulerNotRunningError" not in err and "Traceback" not in err, err


def test_classic_run_of_a_class_from_a_missing_module_waits_for_its_timeout(tmp_path: Path, db_url: str) -> None:
    cfg = make_cfg(tmp_path / "home", db_url, smart_sensor__sensor_modules="no_such_sensor_mod",
                   smart_sensor__use_smart_sensor="False")
    engine = make_engine(db_url)
    init_db(engine)
    register(engine, [("mine", SuccessFileSensor(task_id="s", path="/x", poke_interval=0.1, timeout=1))], DAY, cfg)
    with engine.begin() as conn:
        conn.execute(update(TI).values(classpath="no_such_sensor_mod.MySensor"))
    result = run_task(engine, cfg, "mine", "s", DAY, spark_provider=lambda: pytest.fail("nothing to poke"))
    assert result.state == State.FAILED  # by its own timeout, not by the missing module
    assert result.error.startswith("timed out waiting; last check error: sensor module 'no_such_sensor_mod'")
    engine.dispose()


# -- a user's poke() that hangs or exits ------------------------------------------------------

def test_a_hanging_poke_is_bounded_and_not_piled_up() -> None:
    import threading
    import time
    from smartsensor.service.bounded_poke import BoundedPoker
    release = threading.Event()
    calls = []

    def hang() -> bool:
        calls.append(1)
        release.wait(60)
        return True
    poker = BoundedPoker(0.3)
    began = time.monotonic()
    first = poker.poke("stuck", hang)
    assert isinstance(first, TransientCheckError) and "did not return within 0.3 s" in str(first)
    assert time.monotonic() - began < 5
    second = poker.poke("stuck", hang)  # its earlier call still runs: not poked again
    assert isinstance(second, TransientCheckError) and "still running" in str(second) and len(calls) == 1
    assert poker.poke("other", lambda: True) is True  # a fresh helper serves everyone else
    assert isinstance(poker.poke("exits", lambda: sys.exit(3)), TransientCheckError)
    release.set()
    deadline = time.monotonic() + 30
    while poker.overrunning and time.monotonic() < deadline:
        time.sleep(0.05)
    assert poker.poke("stuck", lambda: False) is False  # returned at last: poked again


@pytest.mark.spark
def test_a_hanging_user_sensor_does_not_stall_its_round(tmp_path: Path, db_url: str, spark) -> None:
    import time
    from tests.support import custom_sensors
    cfg = make_cfg(tmp_path / "home", db_url, smart_sensor__sensor_modules="tests.support.custom_sensors",
                   smart_sensor__sensors_enabled="SuccessFileSensor, KeySensor, HangingSensor",
                   smart_sensor__poke_timeout="0.5")
    engine = make_engine(db_url)
    init_db(engine)
    flag = tmp_path / "_SUCCESS"
    flag.write_text("")
    custom_sensors.READY.add("ready")
    custom_sensors.HANG.clear()  # hang until this test's end (an earlier parametrisation released it)
    register(engine, [("files", SuccessFileSensor(task_id="s", path=str(flag))),
                      ("mine", custom_sensors.KeySensor(task_id="s", key="ready")),
                      ("hangs", custom_sensors.HangingSensor(task_id="s", key="x", timeout=3600))], DAY, cfg)
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


def test_a_dag_file_that_never_finishes_importing_is_reported(tmp_path: Path, dag_file: Path) -> None:
    bad = tmp_path / "loops.py"
    bad.write_text("while True:\n    pass\n")
    proc = cli(tmp_path, "submit", str(bad), "-d", "2026-11-22", SMARTSENSOR__CORE__DAG_FILE_IMPORT_TIMEOUT="1")
    assert proc.returncode == 1 and "took longer than 1 s" in proc.stderr and "loops.py" in proc.stderr


def test_worker_warns_about_enabled_classes_nobody_defines(tmp_path: Path) -> None:
    env = cli_env(tmp_path / "home", f"sqlite:///{tmp_path}/m.db",
                  SMARTSENSOR__SMART_SENSOR__SENSORS_ENABLED="SuccessFileSensor, NoSuchSensor")
    subprocess.run([sys.executable, "-m", "smartsensor.cli", "db", "init"], env=env, check=True, capture_output=True)
    proc = subprocess.run([sys.executable, "-m", "smartsensor.cli", "worker", "--once", "--shard-min", "0",
                           "--shard-max", "10000"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "sensors_enabled names NoSuchSensor" in proc.stderr


def test_status_shows_checks_a_round_could_not_answer(engine, cfg) -> None:
    from smartsensor.service.round_report import RoundResult
    worker = spark_range(engine, cfg, lambda: pytest.fail("unused"), 0, 10000)
    worker.record(RoundResult(0, 10000, transient_errors=3, transient_example="Spark unavailable: Java not found"))
    problems = collect_status(engine, cfg)["problems"]
    assert any("3 check(s) got no answer" in p and "Java not found" in p for p in problems)


def test_a_host_and_a_database_at_different_schema_revisions_are_told_apart(tmp_path: Path, dag_file: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/c.db")
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0001'"))
    proc = cli(tmp_path, "status")
    assert proc.returncode == 1 and "at schema revision 0001" in proc.stderr and "smartsensor db init" in proc.stderr
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    proc = cli(tmp_path, "worker", "--once")
    assert proc.returncode == 1 and "newer than this smartsensor knows" in proc.stderr
    engine.dispose()


@pytest.mark.spark
def test_a_class_that_cannot_rebuild_on_this_host_waits_and_its_timeout_says_why(engine, cfg, spark) -> None:
    from tests.support import custom_sensors
    cfg = make_cfg(cfg.home, cfg.sql_alchemy_conn, smart_sensor__sensor_modules="tests.support.custom_sensors",
                   smart_sensor__sensors_enabled="KeySensor, FragileSensor")
    register(engine, [("skew", custom_sensors.FragileSensor(task_id="s", key="k-skew", timeout=60)),
                      ("fine", custom_sensors.KeySensor(task_id="s", key="k-fine"))], DAY, cfg)
    custom_sensors.EXPLODE.add("k-skew")
    custom_sensors.READY.add("k-fine")
    now = [datetime(2026, 11, 23, 6)]
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


@pytest.mark.slow
def test_workers_of_a_supervisor_killed_outright_stop_and_release_their_leases(tmp_path: Path) -> None:
    import os
    import signal
    from tests.support.flag_workload import wait_until
    from tests.support.proc_helpers import CliProcess
    db_url = f"sqlite:///{tmp_path}/w.db"
    env = cli_env(tmp_path / "home", db_url)
    subprocess.run([sys.executable, "-m", "smartsensor.cli", "db", "init"], env=env, check=True, capture_output=True)
    sup = CliProcess(["workers", "-n", "1", "--interval", "0.5"], env)
    child = None
    try:
        line = sup.wait_for(lambda l: l.startswith("started 1 workers"), timeout=120)
        child = int(line.split("leased pid ")[1])
        engine = make_engine(db_url)

        def owners() -> set[Any]:
            with engine.connect() as conn:
                return {r["owner"] for r in lease_sql.load_leases(conn)}
        wait_until(lambda: bool(owners() - {None}), timeout=120)  # the worker holds leases
        os.kill(sup.proc.pid, signal.SIGKILL)

        def gone() -> bool:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                return True
            return Path(f"/proc/{child}/stat").read_text().split()[2] == "Z"
        try:
            wait_until(gone, timeout=120)
        except AssertionError:
            raise AssertionError(f"worker {child} still running 120 s after its supervisor was killed; leases "
                                 f"{owners()}; supervisor stderr: {sup.stderr_tail()}") from None
        assert owners() == {None}  # it stopped cleanly: every lease released at once
        engine.dispose()
    finally:
        sup.stop()
        if child is not None:  # never leave the worker behind, even when the test fails
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
