"""Fault suite: repeated kill -9 and SIGSTOP of workers at random moments, and PostgreSQL restarted mid-run."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest

from sensors import SuccessFileSensor
from smartsensor import queries
from smartsensor.db import init_db, make_engine
from smartsensor.registration import register
from tests.conftest import make_cfg
from tests.proc_helpers import CliProcess, cli_env
from tests.test_ha import LEASE, LEASE_ENV, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.fault]
DAY = datetime(2026, 11, 22)


def test_repeated_random_kill9_loses_nothing_marks_nothing_twice(tmp_path: Path, db_url: str) -> None:
    rng = random.Random(int(os.environ.get("SMARTSENSOR_FAULT_SEED", "1234")))
    home = tmp_path / "home"
    cfg = make_cfg(home, db_url, **LEASE)
    engine = make_engine(cfg.sql_alchemy_conn)
    init_db(engine)
    flags = [tmp_path / "f" / f"{i}" / "_SUCCESS" for i in range(40)]
    register(engine, [(f"d{i}", SuccessFileSensor(task_id="s", path=str(flags[i]), poke_interval=0.5, timeout=900))
                      for i in range(40)], DAY, cfg)
    env = cli_env(home, db_url, **LEASE_ENV)
    args = ["worker", "--interval", "0.5", "--json"]
    procs = [CliProcess(args, env), CliProcess(args, env)]
    everyone = list(procs)
    try:
        procs[0].wait_round(lambda r: r["groups_poked"] > 0, timeout=120)
        landed = 0
        for round_no in range(4):
            # land a batch of files, then kill a random worker at a random moment and restart it
            for f in flags[landed:landed + 10]:
                f.parent.mkdir(parents=True)
                f.write_text("")
            landed += 10
            time.sleep(rng.uniform(0.1, 2.5))
            victim = rng.randrange(len(procs))
            os.kill(procs[victim].proc.pid, signal.SIGKILL)
            procs[victim].proc.wait()
            procs[victim] = CliProcess(args, env)
            everyone.append(procs[victim])
        with engine.connect() as conn:
            wait_until(lambda: {r["state"] for r in queries.list_tasks(conn)} == {"success"}, timeout=180, step=0.2)
        time.sleep(1.5)
        total = sum(p.marked() for p in everyone)
        # rounds of killed workers may have committed without printing: never more than 40 in all
        assert total <= 40
        with engine.connect() as conn:
            rows = queries.list_tasks(conn)
        assert len(rows) == 40 and all(r["state"] == "success" and r["end_date"] for r in rows)
    finally:
        for p in everyone:
            p.stop(signal.SIGKILL)
        engine.dispose()


def test_repeated_random_sigstop_loses_nothing_marks_nothing_twice(tmp_path: Path, db_url: str) -> None:
    """Workers paused (SIGSTOP) at random moments for random spans, some past the lease, then resumed.

    Every pause may land inside a transaction; each task must still be marked exactly once, by
    whichever worker owned its range at the time (resumed processes print what they committed).
    """
    rng = random.Random(int(os.environ.get("SMARTSENSOR_FAULT_SEED", "4321")))
    home = tmp_path / "home"
    cfg = make_cfg(home, db_url, **LEASE)
    engine = make_engine(cfg.sql_alchemy_conn)
    init_db(engine)
    flags = [tmp_path / "f" / f"{i}" / "_SUCCESS" for i in range(40)]
    register(engine, [(f"d{i}", SuccessFileSensor(task_id="s", path=str(flags[i]), poke_interval=0.5, timeout=900))
                      for i in range(40)], DAY, cfg)
    env = cli_env(home, db_url, **LEASE_ENV)
    args = ["worker", "--interval", "0.5", "--json"]
    procs = [CliProcess(args, env), CliProcess(args, env)]
    try:
        for p in procs:
            p.wait_round(lambda r: r["groups_poked"] > 0, timeout=120)
        for batch in range(4):
            for f in flags[batch * 10:batch * 10 + 10]:
                f.parent.mkdir(parents=True)
                f.write_text("")
            time.sleep(rng.uniform(0.0, 1.0))
            victim = procs[rng.randrange(len(procs))]
            os.kill(victim.proc.pid, signal.SIGSTOP)
            time.sleep(rng.uniform(0.2, 5.0))  # lease_timeout is 2 s: about half the pauses lose the lease
            os.kill(victim.proc.pid, signal.SIGCONT)
        with engine.connect() as conn:
            wait_until(lambda: {r["state"] for r in queries.list_tasks(conn)} == {"success"}, timeout=120, step=0.2)
        time.sleep(1.5)
        assert sum(p.marked() for p in procs) == 40  # nobody lost output, so: exactly once each
        assert all(p.proc.poll() is None for p in procs)  # both survived their pauses
        with engine.connect() as conn:
            assert all(r["end_date"] for r in queries.list_tasks(conn))
    finally:
        for p in procs:
            if p.proc.poll() is None:
                os.kill(p.proc.pid, signal.SIGCONT)
            p.stop(signal.SIGKILL)
        engine.dispose()


def _pg_ctl(*args: str) -> None:
    bin_dir, data = os.environ["SMARTSENSOR_TEST_PG_BIN"], os.environ["SMARTSENSOR_TEST_PG_DATA"]
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    subprocess.run([*prefix, f"{bin_dir}/pg_ctl", "-D", data, "-w", "-t", "60", *args], check=True,
                   capture_output=True, timeout=90)


def test_postgres_restart_mid_run_workers_reconnect(tmp_path: Path) -> None:
    from tests import conftest
    if not conftest.PG_ADMIN_URL or "SMARTSENSOR_TEST_PG_OPTS" not in os.environ:
        pytest.skip("needs the throwaway PostgreSQL of ./scripts/test.sh")
    name, url = conftest._new_pg_database()
    home = tmp_path / "home"
    cfg = make_cfg(home, url, **LEASE)
    engine = make_engine(cfg.sql_alchemy_conn)
    init_db(engine)
    flags = [tmp_path / "f" / f"{i}" / "_SUCCESS" for i in range(10)]
    register(engine, [(f"d{i}", SuccessFileSensor(task_id="s", path=str(flags[i]), poke_interval=0.5, timeout=900))
                      for i in range(10)], DAY, cfg)
    worker = CliProcess(["worker", "--interval", "0.5", "--json"], cli_env(home, url, **LEASE_ENV))
    try:
        worker.wait_round(lambda r: r["loaded"] == 10 and r["groups_poked"] == 10, timeout=120)
        _pg_ctl("stop", "-m", "fast")
        worker.wait_round(lambda r: r.get("error") is not None, timeout=30)  # rounds fail, worker keeps going
        for f in flags:
            f.parent.mkdir(parents=True)
            f.write_text("")
        time.sleep(2)
        assert worker.proc.poll() is None
        _pg_ctl("start", "-l", str(Path(os.environ["SMARTSENSOR_TEST_PG_DATA"]).parent / "server.log"),
                "-o", os.environ["SMARTSENSOR_TEST_PG_OPTS"])
        worker.wait_round(lambda r: r["marked"].get("success", 0) > 0, timeout=60)
        engine.dispose()
        engine = make_engine(url)
        with engine.connect() as conn:
            wait_until(lambda: {r["state"] for r in queries.list_tasks(conn)} == {"success"}, timeout=60)
    finally:
        worker.stop()
        engine.dispose()
        conftest._drop_pg_database(name)
