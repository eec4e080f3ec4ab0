"""The errors a new user meets first, from real `smartsensor` processes: dates, DAG files that exit, loop
or interrupt, numeric options, sensor modules missing on a host, a database at another schema revision,
and workers stopped twice or orphaned by a supervisor killed outright. The same suite on the metadata DB
in-process is tests/integration/test_robustness.py."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from smartsensor.adapters.sql.engine import make_engine
from tests.support.common import lease_owners, wait_until
from tests.support.proc_helpers import CliProcess, cli_env, run_cli

# -- a sensor module missing on one host -----------------------------------------------------


def worker_once(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`db init`, then one `worker --once` over every shard, on a fresh SQLite DB with ``env`` set."""
    full = cli_env(tmp_path / "home", f"sqlite:///{tmp_path}/m.db", **env)
    run_cli(["db", "init"], full, check=True)
    return run_cli(["worker", "--once", "--shard-min", "0", "--shard-max", "10000"], full)


def test_worker_says_at_start_which_sensor_module_fails(tmp_path: Path) -> None:
    proc = worker_once(tmp_path, SMARTSENSOR__SMART_SENSOR__SENSOR_MODULES="mymod_nope")
    assert proc.returncode == 0, proc.stderr
    assert "'mymod_nope' cannot be imported on this host" in proc.stderr and "No module named" in proc.stderr


def test_worker_warns_about_enabled_classes_nobody_defines(tmp_path: Path) -> None:
    proc = worker_once(tmp_path, SMARTSENSOR__SMART_SENSOR__SENSORS_ENABLED="SuccessFileSensor, NoSuchSensor")
    assert proc.returncode == 0 and "sensors_enabled names NoSuchSensor" in proc.stderr


# -- the CLI: dates, DAG files, options ------------------------------------------------------


def cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_cli(list(args), cli_env(tmp_path / "home", f"sqlite:///{tmp_path}/c.db", **env))


@pytest.fixture
def dag_file(tmp_path: Path) -> Path:
    path = tmp_path / "dags.py"
    path.write_text(
        "from smartsensor.sensors import SuccessFileSensor\nwait = SuccessFileSensor(task_id='w', path='/d/_SUCCESS')\n"
    )
    assert cli(tmp_path, "db", "init").returncode == 0
    return path


@pytest.mark.parametrize(
    "date,message",
    [
        ("2026-11-22T05:00:00", "is not YYYY-MM-DD"),
        ("0001-01-01", "between 1900-01-01 and 2999-12-31"),
        ("9999-12-31", "between 1900-01-01 and 2999-12-31"),
        ("2026-02-30", "not a real day"),
        ("22/11/2026", "YYYY-MM-DD"),
    ],
)
def test_submit_accepts_exactly_a_day(tmp_path: Path, dag_file: Path, date: str, message: str) -> None:
    proc = cli(tmp_path, "submit", str(dag_file), "-d", date)
    assert proc.returncode == 1 and message in proc.stderr and "Traceback" not in proc.stderr
    assert "OverflowError" not in proc.stderr
    assert json.loads(cli(tmp_path, "tasks", "--json").stdout) == []


@pytest.mark.parametrize(
    "body,said",
    [
        ("import sys\nsys.exit(0)\n", "called sys.exit(0)"),
        ("import sys\nsys.exit('bye')\n", "called sys.exit('bye')"),
        ("import os\nos._exit(0)\n", "called os._exit(0)"),
        ("raise KeyboardInterrupt\n", "raised KeyboardInterrupt"),
        ("def f():\n    return f()\nf()\n", "RecursionError"),
        (
            "from smartsensor.sensors import SuccessFileSensor\nDAG_ID = ['a']\n"
            "w = SuccessFileSensor(task_id='w', path='/x')\n",
            "DAG_ID must be a string",
        ),
    ],
)
def test_a_dag_file_that_exits_or_interrupts_is_reported(tmp_path: Path, dag_file: Path, body: str, said: str) -> None:
    bad = tmp_path / "leaving.py"
    bad.write_text(body)
    proc = cli(tmp_path, "submit", str(bad), "-d", "2026-11-22")
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert said in proc.stderr and "leaving.py" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "args,message",
    [
        (["worker", "--interval", "nan"], "not a finite number"),
        (["worker", "--interval", "-1"], "--interval"),
        (["worker", "--metrics-port", "70000"], "--metrics-port"),
        (["workers", "-n", "0"], "-n"),
        (["worker", "--interval", "inf"], "--interval"),
    ],
)
def test_cli_numeric_options_are_validated(tmp_path: Path, args: list[str], message: str) -> None:
    proc = cli(tmp_path, *args)
    assert proc.returncode == 2 and message in proc.stderr


def test_worker_once_that_claims_nothing_says_so(tmp_path: Path, dag_file: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/c.db")
    later = datetime.utcnow() + timedelta(hours=1)
    with engine.begin() as conn:  # a live fleet holds every range
        for lo, hi in ((0, 2000), (2000, 4000), (4000, 6000), (6000, 8000), (8000, 10000)):
            conn.execute(
                text(
                    "INSERT INTO shard_lease (shard_min, shard_max, owner, epoch, expires_at) "
                    "VALUES (:lo, :hi, 'other', 1, :t)"
                ),
                {"lo": lo, "hi": hi, "t": later},
            )
        conn.execute(
            text(
                "INSERT INTO worker (worker_id, hostname, pid, started_at, heartbeat_at) "
                "VALUES ('other', 'h', 1, :t, :t)"
            ),
            {"t": later},
        )
    engine.dispose()
    proc = cli(tmp_path, "worker", "--once")
    assert proc.returncode == 4 and "claimed no shard range" in proc.stderr


def test_status_after_worker_once_shows_its_round(tmp_path: Path, dag_file: Path) -> None:
    assert cli(tmp_path, "worker", "--once", "--json").returncode == 0
    out = cli(tmp_path, "status").stdout
    assert "no worker has reported a round" not in out
    data = json.loads(cli(tmp_path, "status", "--json").stdout)
    assert data["workers"] and all(w["last_round"]["loaded"] == 0 for w in data["workers"])


def test_a_dag_file_that_never_finishes_importing_is_reported(tmp_path: Path, dag_file: Path) -> None:
    bad = tmp_path / "loops.py"
    bad.write_text("while True:\n    pass\n")
    proc = cli(tmp_path, "submit", str(bad), "-d", "2026-11-22", SMARTSENSOR__CORE__DAG_FILE_IMPORT_TIMEOUT="1")
    assert proc.returncode == 1 and "took longer than 1 s" in proc.stderr and "loops.py" in proc.stderr


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


# -- a clean stop is clean, also when a supervisor is killed outright ---------------------------


@pytest.mark.slow
def test_a_worker_stopped_twice_stops_cleanly(tmp_path: Path) -> None:
    import signal
    import time

    env = cli_env(tmp_path / "home", f"sqlite:///{tmp_path}/w.db")
    run_cli(["db", "init"], env, check=True)
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


@pytest.mark.slow
def test_workers_of_a_supervisor_killed_outright_stop_and_release_their_leases(tmp_path: Path) -> None:
    import os
    import signal

    db_url = f"sqlite:///{tmp_path}/w.db"
    env = cli_env(tmp_path / "home", db_url)
    run_cli(["db", "init"], env, check=True)
    sup = CliProcess(["workers", "-n", "1", "--interval", "0.5"], env)
    child = None
    try:
        line = sup.wait_for(lambda ln: ln.startswith("started 1 workers"), timeout=120)
        child = int(line.split("leased pid ")[1])
        engine = make_engine(db_url)

        def owners() -> set[Any]:
            return set(lease_owners(engine).values())

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
            raise AssertionError(
                f"worker {child} still running 120 s after its supervisor was killed; leases "
                f"{owners()}; supervisor stderr: {sup.stderr_tail()}"
            ) from None
        assert owners() == {None}  # it stopped cleanly: every lease released at once
        engine.dispose()
    finally:
        sup.stop()
        if child is not None:  # never leave the worker behind, even when the test fails
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
