"""Classic mode with real processes: `scheduler` launching `run-task` children, a SIGTERM handing their
tasks back, and a kill -9'd `run-task` ended by the scheduler. In-process runs are in
tests/integration/test_classic.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from smartsensor.adapters.sql import tasks as task_sql
from smartsensor.adapters.sql.registration_store import SqlRegistrationStore
from smartsensor.adapters.sql.scheduler_store import SqlSchedulerStore
from smartsensor.domain.states import State
from smartsensor.sensors import SuccessFileSensor
from smartsensor.standalone.registration import register
from smartsensor.standalone.scheduler import end_zombies
from tests.support.common import DAY, ROOT, new_db, override_env, wait_until
from tests.support.packaging import build_wheel
from tests.support.proc_helpers import cli_env, run_cli

pytestmark = pytest.mark.spark


def run_heartbeating(engine: Any) -> bool:
    """Whether task d.w is `running` and its run has heartbeat since it started.

    `running` is set by the scheduler's claim, before a child even started; a heartbeat comes from inside
    run_task, so the run's SIGTERM handler is installed by then."""
    with engine.connect() as conn:
        row = task_sql.get_task(conn, "d", "w", DAY)
    return row.state == State.RUNNING and row.updated_at > row.start_date


@pytest.mark.slow
def test_stopping_the_scheduler_hands_its_classic_runs_back(tmp_path, db_url) -> None:
    """SIGTERM to `scheduler`: its `run-task` children stop and their tasks are `scheduled` again, no try spent."""
    home = tmp_path / "home"
    cfg, engine = new_db(home, db_url, smart_sensor__use_smart_sensor="False")
    register(
        SqlRegistrationStore(engine),
        [
            (
                "d",
                SuccessFileSensor(
                    task_id="w", path=(tmp_path / "never").as_uri(), poke_interval=0.2, timeout=600, retries=0
                ),
            )
        ],
        DAY,
        cfg,
    )
    env = cli_env(
        home,
        db_url,
        SMARTSENSOR__SMART_SENSOR__USE_SMART_SENSOR="False",
        SMARTSENSOR__SCHEDULER__TASK_HEARTBEAT_INTERVAL="0.5",
        SMARTSENSOR__SCHEDULER__STOP_GRACE="300",
    )  # a bound, not a wait: SIGTERM may come mid Spark start
    proc = subprocess.Popen(
        [sys.executable, "-m", "smartsensor.cli", "scheduler"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: run_heartbeating(engine), timeout=300, step=0.1)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err
    with engine.connect() as conn:
        row = task_sql.get_task(conn, "d", "w", DAY)
    assert (row.state, row.try_number, row.error) == (State.SCHEDULED, 1, None)
    engine.dispose()


@pytest.mark.slow  # more than 3 s: in the full suite, not in the fast one
def test_scheduler_runs_scheduled_tasks_in_child_processes(tmp_path, db_url) -> None:
    """`scheduler --once` launches real `run-task` processes (SuccessFileSensor: no metastore needed)."""
    home = tmp_path / "home"
    cfg, engine = new_db(home, db_url, smart_sensor__use_smart_sensor="False", scheduler__parallelism="2")
    flag = tmp_path / "_SUCCESS"
    flag.write_text("")
    register(
        SqlRegistrationStore(engine),
        [
            ("d", SuccessFileSensor(task_id="ok", path=flag.as_uri(), poke_interval=0.2, timeout=60)),
            ("d", SuccessFileSensor(task_id="never", path=(tmp_path / "nope").as_uri(), poke_interval=0.2, timeout=1)),
        ],
        DAY,
        cfg,
    )
    env = cli_env(home, db_url, SMARTSENSOR__SMART_SENSOR__USE_SMART_SENSOR="False")
    out = run_cli(["scheduler", "--once", "--json"], env, timeout=240)
    assert out.returncode == 0, out.stderr
    assert '"launched": 2' in out.stdout
    with engine.connect() as conn:
        rows = task_sql.list_tasks(conn)
    got = {r.task_id: r.state for r in rows}
    why = {r.task_id: (r.error, r.start_date, r.end_date) for r in rows}
    assert got == {"ok": "success", "never": "failed"}, f"{why}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    engine.dispose()


def wheel_install(tmp_path: Path) -> Path:
    """A venv holding this working tree's smartsensor as a wheel (not editable); its dependencies come from this
    interpreter's site-packages through a .pth line, so nothing is downloaded. Returns the venv's bin folder."""
    wheel = build_wheel(tmp_path)
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True, timeout=120)
    venv_python = tmp_path / "venv" / "bin" / "python"
    subprocess.run(
        [*pip, "--python", str(venv_python), "install", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    site = subprocess.run(
        [str(venv_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # after the wheel's own packages
    return venv_python.parent


@pytest.fixture(scope="module")
def wheel_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return wheel_install(tmp_path_factory.mktemp("wheel"))


def wheel_env(home: Path, db_url: str, **extra: str) -> dict[str, str]:
    return {k: v for k, v in cli_env(home, db_url, **extra).items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


@pytest.mark.slow
def test_classic_runs_of_a_wheel_install_started_from_the_checkout_root(wheel_bin: Path, tmp_path: Path) -> None:
    """issue 22, defect 1: `python -m smartsensor.cli run-task` children took the cwd first on sys.path; from the
    checkout root the source tree shadowed a wheel install, whose smartsensor.schema exists only through
    package_dir: every child died with ModuleNotFoundError and its task stayed `running`."""
    home, db_url = tmp_path / "home", f"sqlite:///{tmp_path}/m.db"  # the same on any DB: SQLite alone
    cfg, engine = new_db(home, db_url, smart_sensor__use_smart_sensor="False")
    flag = tmp_path / "_SUCCESS"
    flag.write_text("")
    register(
        SqlRegistrationStore(engine),
        [("d", SuccessFileSensor(task_id="ok", path=flag.as_uri(), poke_interval=0.2, timeout=120))],
        DAY,
        cfg,
    )
    out = subprocess.run(
        [str(wheel_bin / "smartsensor"), "scheduler", "--once", "--json"],
        cwd=ROOT,
        env=wheel_env(home, db_url, SMARTSENSOR__SMART_SENSOR__USE_SMART_SENSOR="False"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0 and '"launched": 1' in out.stdout, out.stdout + out.stderr[-3000:]
    with engine.connect() as conn:
        row = task_sql.get_task(conn, "d", "ok", DAY)
    assert (row.state, row.error) == (State.SUCCESS, None), out.stderr[-3000:]
    engine.dispose()


@pytest.mark.slow
def test_workers_of_a_wheel_install_started_from_the_checkout_root(wheel_bin: Path, tmp_path: Path) -> None:
    """The same for the worker processes `smartsensor workers` starts."""
    home, db_url = tmp_path / "home", f"sqlite:///{tmp_path}/m.db"
    cfg, engine = new_db(home, db_url)
    flag = tmp_path / "_SUCCESS"
    flag.write_text("")
    register(
        SqlRegistrationStore(engine),
        [("d", SuccessFileSensor(task_id="ok", path=flag.as_uri(), poke_interval=0.2))],
        DAY,
        cfg,
    )
    log = tmp_path / "workers.log"

    def state() -> str:
        with engine.connect() as conn:
            return task_sql.get_task(conn, "d", "ok", DAY).state

    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(wheel_bin / "smartsensor"), "workers", "-n", "1", "--interval", "0.5"],
            cwd=ROOT,
            env=wheel_env(home, db_url),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            try:
                wait_until(lambda: state() == State.SUCCESS, timeout=90, step=0.2)
            except AssertionError:
                raise AssertionError(log.read_text()[-3000:]) from None
        finally:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, log.read_text()[-3000:]
    engine.dispose()


@pytest.mark.slow
def test_killed_run_task_process_is_ended_by_the_scheduler(tmp_path, db_url) -> None:
    """kill -9 of a real `run-task` process: its task no longer stays `running` forever."""
    home = tmp_path / "home"
    overrides = dict(
        smart_sensor__use_smart_sensor="False",
        scheduler__task_heartbeat_interval="0.5",
        scheduler__zombie_threshold="2",
    )
    cfg, engine = new_db(home, db_url, **overrides)
    register(
        SqlRegistrationStore(engine),
        [
            (
                "d",
                SuccessFileSensor(
                    task_id="w", path=(tmp_path / "never").as_uri(), poke_interval=0.2, timeout=600, retries=1
                ),
            )
        ],
        DAY,
        cfg,
    )
    env = cli_env(home, db_url, **override_env(overrides))
    proc = subprocess.Popen(
        [sys.executable, "-m", "smartsensor.cli", "run-task", "d", "w", "2026-11-22"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: run_heartbeating(engine), timeout=120, step=0.1)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    with engine.connect() as conn:
        last_beat = task_sql.get_task(conn, "d", "w", DAY).updated_at
    assert last_beat is not None
    # not yet a zombie while its last beat is younger than zombie_threshold (judged at an explicit time, so a
    # loaded machine cannot turn "not yet" into "already")
    assert end_zombies(SqlSchedulerStore(engine), cfg, now=last_beat + timedelta(seconds=1)) == {}

    def status_zombies() -> list[dict[str, Any]]:
        status = run_cli(["status", "--json"], env, timeout=60, check=True)
        return json.loads(status.stdout)["zombies"]

    wait_until(
        lambda: [(z["dag_id"], z["task_id"]) for z in status_zombies()] == [("d", "w")], timeout=120, step=0.5
    )  # visible before it is ended
    out = run_cli(["scheduler", "--once", "--json"], env, timeout=60)
    assert out.returncode == 0 and '"zombies": 1' in out.stdout, out.stdout + out.stderr
    assert status_zombies() == []
    with engine.connect() as conn:
        row = task_sql.get_task(conn, "d", "w", DAY)
    assert row.state == State.UP_FOR_RETRY and "stopped heartbeating" in row.error
    engine.dispose()
