"""High availability with real worker processes, and landing → success latency with and without signals.

Each runs on SQLite and on Postgres.
"""

from __future__ import annotations

import os
import signal
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from smartsensor.sensors import NamedHivePartitionSensor
from smartsensor.adapters.sql import status as status_sql, tasks as task_sql
from smartsensor.adapters.sql.engine import init_db, make_engine
from smartsensor.service.registration import register
from smartsensor.service.signals import send_signal
from smartsensor.service.runner import LeasedWorker, run_worker
from tests.conftest import make_cfg
from tests.support.flag_workload import DAY, LEASE, FlagWorkload, flag_workload, wait_until
from tests.support.hive_helpers import create_table, land
from tests.support.proc_helpers import CliProcess


@pytest.fixture
def ha_setup(tmp_path: Path, db_url: str):
    work = flag_workload(tmp_path, db_url, 24, timeout=600)
    procs: list[CliProcess] = []
    yield work, procs
    for p in procs:
        if p.proc.poll() is None:
            os.kill(p.proc.pid, signal.SIGCONT)
            p.stop(signal.SIGKILL)
    work.engine.dispose()


def start_two(work: FlagWorkload, procs: list[CliProcess]) -> tuple[CliProcess, CliProcess]:
    args = ["worker", "--interval", "0.5", "--json"]
    a, b = CliProcess(args, work.env), CliProcess(args, work.env)
    procs += [a, b]
    wait_until(lambda: len({o for o in work.lease_owners().values() if o}) == 2
               and None not in work.lease_owners().values(), timeout=60)
    a.wait_round(lambda r: r["loaded"] > 0 and r["groups_poked"] > 0, timeout=120)  # Spark is up in both
    b.wait_round(lambda r: r["loaded"] > 0 and r["groups_poked"] > 0, timeout=120)
    return a, b


def pid_owner(engine: Any, pid: int) -> str:
    with engine.connect() as conn:
        return next(w["worker_id"] for w in status_sql.list_workers(conn) if w["pid"] == pid)


def pause_outside_sqlite_write(proc: CliProcess, engine: Any) -> None:
    """SIGSTOP ``proc``. On SQLite, not while it holds the database's single write lock: there a
    worker paused inside a write stalls every writer until it resumes (a documented limit; Postgres
    ends such a session, see test_leases). Retried until the pause lands outside a write."""
    import sqlite3
    for _ in range(200):
        os.kill(proc.proc.pid, signal.SIGSTOP)
        if engine.dialect.name != "sqlite":
            return
        probe = sqlite3.connect(engine.url.database, timeout=0, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:  # paused mid-write: let it finish, pause again
            os.kill(proc.proc.pid, signal.SIGCONT)
            time.sleep(0.03)
        finally:
            probe.close()
    raise AssertionError("could not pause the worker outside a write transaction")


@pytest.mark.slow
@pytest.mark.fault
def test_kill9_ranges_taken_over_nothing_lost_nothing_twice(ha_setup) -> None:
    work, procs = ha_setup
    a, b = start_two(work, procs)
    a_id = pid_owner(work.engine, a.proc.pid)
    os.kill(a.proc.pid, signal.SIGKILL)
    killed = time.monotonic()
    work.land(work.flags)
    wait_until(lambda: a_id not in work.lease_owners().values() and None not in work.lease_owners().values(),
               timeout=10)
    takeover = time.monotonic() - killed
    assert takeover <= 2 * 2, f"ranges re-owned after {takeover:.1f} s (2 x lease_timeout = 4 s)"
    work.wait_all_success(timeout=60)
    time.sleep(1.5)
    assert a.marked() + b.marked() == 24  # each task marked exactly once
    print(f"takeover after kill -9: {takeover:.2f} s")


@pytest.mark.slow
@pytest.mark.fault
def test_sigstopped_worker_writes_nothing_after_losing_its_lease(ha_setup) -> None:
    work, procs = ha_setup
    a, b = start_two(work, procs)
    a_id = pid_owner(work.engine, a.proc.pid)
    pause_outside_sqlite_write(a, work.engine)
    wait_until(lambda: a_id not in work.lease_owners().values() and None not in work.lease_owners().values(),
               timeout=10)
    work.land(work.flags)
    work.wait_all_success(timeout=60)
    seen_before = len(a.seen)
    os.kill(a.proc.pid, signal.SIGCONT)
    time.sleep(3)  # a resumes, finds its leases gone, and may claim its fair share back (new epochs)
    marked_a = a.marked()
    assert marked_a == 0, a.seen[seen_before:]
    assert b.marked() == 24
    # both processes alive and sharing again; no range with two owners
    assert a.proc.poll() is None and b.proc.poll() is None
    for p in (a, b):
        assert p.stop() == 0
    assert set(work.lease_owners().values()) == {None}  # clean stops released everything at once


class _Runner:
    """A leased worker loop in a thread of this process (the session's SparkSession)."""

    def __init__(self, engine: Any, cfg: Any, spark: Any, signals: bool, interval: float) -> None:
        self.stop = threading.Event()
        self.results: list[Any] = []
        self.runner = LeasedWorker(engine, cfg, spark_provider=lambda: spark)
        self.thread = threading.Thread(target=run_worker, args=(self.runner, engine, cfg, interval, False,
                                                                self.results.append),
                                       kwargs={"signals": signals, "stop_event": self.stop}, daemon=True)

    def __enter__(self) -> "_Runner":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=30)


def _state(engine: Any, dag_id: str) -> str:
    with engine.connect() as conn:
        return task_sql.get_task(conn, dag_id, "w", DAY)["state"]


@pytest.mark.spark
@pytest.mark.slow
def test_landing_to_success_latency_with_and_without_signal(tmp_path, db_url, spark, hive_db) -> None:
    cfg = make_cfg(tmp_path / "home", db_url, **LEASE)
    engine = make_engine(cfg.sql_alchemy_conn)
    init_db(engine)
    create_table(spark, hive_db, "t")
    n = 10
    # signalled tasks poke only every 10 minutes: without the signal they would wait that long
    register(engine, [(f"sig{i}", NamedHivePartitionSensor(task_id="w", partition_names=[f"{hive_db}.t/ds=s{i}/hr=00"],
                                                           poke_interval=600)) for i in range(n)]
             + [(f"poll{i}", NamedHivePartitionSensor(task_id="w", partition_names=[f"{hive_db}.t/ds=p{i}/hr=00"],
                                                      poke_interval=2)) for i in range(3)], DAY, cfg)
    signalled, polled = [], []
    with _Runner(engine, cfg, spark, signals=True, interval=1.0) as r:
        wait_until(lambda: any(x.loaded for x in r.results), timeout=60)
        time.sleep(1.5)
        for i in range(n):
            land(spark, hive_db, "t", ds=f"s{i}", hr="00")
            t0 = time.monotonic()
            send_signal(engine, f"{hive_db}.t/ds=s{i}/hr=00")
            wait_until(lambda: _state(engine, f"sig{i}") == "success", timeout=30, step=0.01)
            signalled.append(time.monotonic() - t0)
            time.sleep(0.3)
        for i in range(3):
            land(spark, hive_db, "t", ds=f"p{i}", hr="00")  # timed from the landing's commit
            polled.append(wait_until(lambda: _state(engine, f"poll{i}") == "success", timeout=30, step=0.01))
        rounds = [x.seconds for x in r.results if x.loaded]
    p95 = sorted(signalled)[int(0.95 * (n - 1))]
    worst_round = max(rounds)
    print(f"[{engine.dialect.name}] with signal: p50 {statistics.median(signalled):.3f} s, p95 {p95:.3f} s; "
          f"without: {[round(x, 2) for x in polled]} s (poke_interval 2 s, rounds every 1 s, slowest round "
          f"{worst_round:.2f} s)")
    assert p95 <= (1.0 if engine.dialect.name == "postgresql" else 1.5)
    assert max(polled) <= 2 + 1.0 + worst_round + 0.5  # poke interval + one round interval + one round
    engine.dispose()
