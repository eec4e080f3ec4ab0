"""High availability with real worker processes: a worker killed (kill -9) or paused (SIGSTOP) has its
ranges taken over, nothing is lost, nothing is marked twice. Each runs on SQLite and on Postgres.
Landing → success latency with and without signals is in tests/integration/test_ha.py."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from scripts.harness.waiting import NotReached
from smartsensor.adapters.sql import status as status_sql
from tests.support.common import wait_until
from tests.support.flag_workload import FlagWorkload, flag_workload
from tests.support.proc_helpers import CliProcess


@pytest.fixture
def ha_setup(tmp_path: Path, db_url: str):
    work = flag_workload(tmp_path, db_url, 24, timeout=600)
    procs: list[CliProcess] = []
    yield work, procs
    for p in procs:
        p.kill()
    work.engine.dispose()


def start_two(work: FlagWorkload, procs: list[CliProcess]) -> tuple[CliProcess, CliProcess, str]:
    """Two workers sharing the ranges, both past their first poke; and the worker id of the first."""
    args = ["worker", "--interval", "0.5", "--json"]
    a, b = CliProcess(args, work.env), CliProcess(args, work.env)
    procs += [a, b]
    wait_until(
        lambda: len({o for o in work.lease_owners().values() if o}) == 2 and None not in work.lease_owners().values(),
        timeout=60,
    )
    a.wait_round(lambda r: r["loaded"] > 0 and r["groups_poked"] > 0, timeout=120)  # both past a first poke
    b.wait_round(lambda r: r["loaded"] > 0 and r["groups_poked"] > 0, timeout=120)
    return a, b, pid_owner(work.engine, a.proc.pid)


def taken_over_or_say_why(work: FlagWorkload, owner: str, survivor: CliProcess, timeout: float) -> None:
    """``work.wait_taken_over``; if it is not, fail with what the survivor did meanwhile (alive or not, its last rounds,
    its standard error) and the leases: once, on a loaded CI run (SQLite), the ranges stayed with the paused worker
    for 60 s and the failure said nothing more."""
    try:
        work.wait_taken_over(owner, timeout=timeout)
    except NotReached:
        raise AssertionError(
            f"{owner}'s ranges not taken over in {timeout} s; leases {work.lease_owners()}; the survivor "
            f"{'alive' if survivor.proc.poll() is None else f'exited {survivor.proc.returncode}'}, its last rounds "
            f"{survivor.seen[-3:]}\nits stderr:\n{survivor.stderr_tail(60)}"
        ) from None


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
    a, b, a_id = start_two(work, procs)
    os.kill(a.proc.pid, signal.SIGKILL)
    killed = time.monotonic()
    work.land(work.flags)
    work.wait_taken_over(a_id, timeout=10)
    takeover = time.monotonic() - killed
    assert takeover <= 2 * 2, f"ranges re-owned after {takeover:.1f} s (2 x lease_timeout = 4 s)"
    work.wait_all_success(timeout=60)
    b.settle()  # a is dead: what it printed is all it will ever print
    # Each task marked exactly once. The survivor's marks first, in full on stdout (pytest truncates a long message).
    print(f"worker b: {b.marks_seen()}\nworker a (killed): {a.marks_seen()}")
    assert a.marked() + b.marked() == 24, f"a marked {a.marked()}, b {b.marked()}: see b's rounds in stdout"
    print(f"takeover after kill -9: {takeover:.2f} s")


@pytest.mark.slow
@pytest.mark.fault
def test_sigstopped_worker_writes_nothing_after_losing_its_lease(ha_setup) -> None:
    work, procs = ha_setup
    a, b, a_id = start_two(work, procs)
    pause_outside_sqlite_write(a, work.engine)
    taken_over_or_say_why(work, a_id, b, timeout=60)  # no bound meant here (the kill -9 test times the takeover): a
    # loaded machine has taken longer than 10 s for b's next heartbeats (run F)
    work.land(work.flags)
    work.wait_all_success(timeout=60)
    seen_before = len(a.seen)
    os.kill(a.proc.pid, signal.SIGCONT)
    time.sleep(3)  # a resumes, finds its leases gone, and may claim its fair share back (new epochs)
    marked_a = a.marked()
    assert marked_a == 0, a.seen[seen_before:]
    assert b.marked() == 24, b.marks_seen()
    # both processes alive and sharing again; no range with two owners
    assert a.proc.poll() is None and b.proc.poll() is None
    for p in (a, b):
        assert p.stop() == 0
    assert set(work.lease_owners().values()) == {None}  # clean stops released everything at once
