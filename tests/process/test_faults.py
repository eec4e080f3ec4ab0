"""Fault suite: repeated kill -9 and SIGSTOP of workers at random moments, and PostgreSQL restarted mid-run."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from smartsensor.adapters.sql import tasks as task_sql
from smartsensor.adapters.sql.classic_store import SqlClassicRunStore
from smartsensor.adapters.sql.registration_store import SqlRegistrationStore
from tests.support.common import DAY, new_db
from tests.support.flag_workload import flag_workload
from tests.support.pg import PrivateServer
from tests.support.proc_helpers import CliProcess

pytestmark = [pytest.mark.slow, pytest.mark.fault]
WORKER = ["worker", "--interval", "0.5", "--json"]


def test_repeated_random_kill9_loses_nothing_marks_nothing_twice(tmp_path: Path, db_url: str) -> None:
    rng = random.Random(int(os.environ.get("SMARTSENSOR_FAULT_SEED", "1234")))
    work = flag_workload(tmp_path, db_url, 40)
    procs = [CliProcess(WORKER, work.env), CliProcess(WORKER, work.env)]
    everyone = list(procs)
    try:
        procs[0].wait_round(lambda r: r["groups_poked"] > 0, timeout=120)
        for batch in range(4):
            # land a batch of files, then kill a random worker at a random moment and restart it
            work.land(work.flags[batch * 10 : batch * 10 + 10])
            time.sleep(rng.uniform(0.1, 2.5))
            victim = rng.randrange(len(procs))
            os.kill(procs[victim].proc.pid, signal.SIGKILL)
            procs[victim].proc.wait()
            procs[victim] = CliProcess(WORKER, work.env)
            everyone.append(procs[victim])
        work.wait_all_success(timeout=180)
        for p in procs:
            p.settle()
        total = sum(p.marked() for p in everyone)
        # rounds of killed workers may have committed without printing: never more than 40 in all
        assert total <= 40
        with work.engine.connect() as conn:
            rows = task_sql.list_tasks(conn)
        assert len(rows) == 40 and all(r.state == "success" and r.end_date for r in rows)
    finally:
        for p in everyone:
            p.stop(signal.SIGKILL)
        work.engine.dispose()


def test_repeated_random_sigstop_loses_nothing_marks_nothing_twice(tmp_path: Path, db_url: str) -> None:
    """Workers paused (SIGSTOP) at random moments for random spans, some past the lease, then resumed.

    Every pause may land inside a transaction; each task must still be marked exactly once, by
    whichever worker owned its range at the time (resumed processes print what they committed).
    """
    rng = random.Random(int(os.environ.get("SMARTSENSOR_FAULT_SEED", "4321")))
    work = flag_workload(tmp_path, db_url, 40)
    procs = [CliProcess(WORKER, work.env), CliProcess(WORKER, work.env)]
    try:
        for p in procs:
            p.wait_round(lambda r: r["groups_poked"] > 0, timeout=120)
        for batch in range(4):
            work.land(work.flags[batch * 10 : batch * 10 + 10])
            time.sleep(rng.uniform(0.0, 1.0))
            victim = procs[rng.randrange(len(procs))]
            os.kill(victim.proc.pid, signal.SIGSTOP)
            time.sleep(rng.uniform(0.2, 5.0))  # lease_timeout is 2 s: about half the pauses lose the lease
            os.kill(victim.proc.pid, signal.SIGCONT)
        work.wait_all_success(timeout=120)
        for p in procs:
            p.settle()
        # nobody lost output, so: exactly once each (a round reports what its ranges committed, even if one failed)
        assert sum(p.marked() for p in procs) == 40, "\n".join(p.marks_seen() for p in procs)
        assert all(p.proc.poll() is None for p in procs)  # both survived their pauses
        with work.engine.connect() as conn:
            assert all(r.end_date for r in task_sql.list_tasks(conn))
    finally:
        for p in procs:
            p.kill()
        work.engine.dispose()


def test_postgres_restart_mid_run_workers_and_scheduler_reconnect(tmp_path: Path, private_pg: PrivateServer) -> None:
    url = private_pg.new_database()  # a server of its own: the one other tests share stays up
    work = flag_workload(tmp_path, url, 10)
    worker = CliProcess(WORKER, work.env)
    scheduler = CliProcess(["scheduler", "--json"], dict(work.env, SMARTSENSOR__SCHEDULER__LOOP_INTERVAL="0.5"))
    try:
        worker.wait_round(lambda r: r["loaded"] == 10 and r["groups_poked"] == 10, timeout=120)
        scheduler.wait_round(lambda r: "launched" in r, timeout=60)
        private_pg.stop()
        worker.wait_round(lambda r: r.get("error") is not None, timeout=30)  # rounds fail, worker keeps going
        scheduler.wait_round(lambda r: r.get("error") is not None, timeout=30)  # and so do scheduler passes
        work.land(work.flags)
        for proc in (worker, scheduler):  # each goes on failing round after round while the server is down
            proc.wait_round(lambda r: r.get("error") is not None, timeout=30)
        private_pg.start()
        worker.wait_round(lambda r: r["marked"].get("success", 0) > 0, timeout=60)
        scheduler.wait_round(lambda r: "launched" in r, timeout=60)  # back to normal passes
        work.engine.dispose()  # the test's own pooled connections died with the server
        work.wait_all_success(timeout=60)
        # a restart is an expected event: WARNING lines, no traceback (issue 22, defect 6)
        for proc in (worker, scheduler):
            logged = "\n".join(proc.stderr_lines)
            assert "Traceback" not in logged and " ERROR " not in logged, logged[-3000:]
    finally:
        scheduler.stop()
        worker.stop()
        work.engine.dispose()


def test_classic_run_rides_out_a_postgres_restart(tmp_path: Path, spark, private_pg: PrivateServer) -> None:
    """A classic `run_task` polling while the metadata DB restarts keeps poking, then records success."""
    import threading

    from smartsensor.sensors import SuccessFileSensor
    from smartsensor.standalone.classic import run_task
    from smartsensor.standalone.registration import register

    url = private_pg.new_database()  # a server of its own: the one other tests share stays up
    cfg, engine = new_db(
        tmp_path / "home",
        url,
        smart_sensor__use_smart_sensor="False",
        scheduler__task_heartbeat_interval="0.5",
        scheduler__zombie_threshold="60",
    )
    flag = tmp_path / "flag" / "_SUCCESS"
    register(
        SqlRegistrationStore(engine),
        [("d", SuccessFileSensor(task_id="s", path=str(flag), poke_interval=0.3, timeout=600))],
        DAY,
        cfg,
    )
    poking = threading.Event()
    results: list[Any] = []

    def provider() -> Any:
        poking.set()
        return spark

    runner = threading.Thread(
        target=lambda: results.append(
            run_task(SqlClassicRunStore(engine), cfg, "d", "s", DAY, spark_provider=provider)
        ),
        daemon=True,
    )
    try:
        runner.start()
        assert poking.wait(30)
        time.sleep(0.5)
        private_pg.stop()
        time.sleep(1.5)  # several state checks fail meanwhile
        flag.parent.mkdir(parents=True)
        flag.write_text("")
        time.sleep(1.5)  # the poke succeeds; recording it fails until the server is back
        assert runner.is_alive()
        private_pg.start()
        runner.join(60)
        assert results and results[0].state == "success"
        engine.dispose()
        with engine.connect() as conn:
            assert task_sql.get_task(conn, "d", "s", DAY).state == "success"
    finally:
        engine.dispose()
