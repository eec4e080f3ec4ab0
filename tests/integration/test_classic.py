"""Classic poke mode (`run_task`) and the scheduler's passes, in-process on a real metadata DB and Spark.
Real `run-task` and `scheduler` processes are in tests/process/test_classic.py."""

from __future__ import annotations

import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from smartsensor.adapters.sql import classic_store as classic_sql, scheduler_store as scheduler_sql, tasks as task_sql
from smartsensor.adapters.sql.classic_store import SqlClassicRunStore
from smartsensor.adapters.sql.registration_store import SqlRegistrationStore
from smartsensor.adapters.sql.scheduler_store import SqlSchedulerStore
from smartsensor.domain.keys import TaskKey
from smartsensor.domain.states import State
from smartsensor.sensors import NamedHivePartitionSensor
from smartsensor.standalone.classic import TaskRunError, run_task
from smartsensor.standalone.registration import register
from tests.support.common import DAY, wait_until
from tests.support.hive_helpers import create_table, land

pytestmark = pytest.mark.spark


@pytest.fixture
def cfg_overrides() -> dict[str, str]:
    """conftest's cfg (and so its engine) with smart mode off: every task runs the classic way."""
    return {"smart_sensor__use_smart_sensor": "False"}


def run(engine: Any, cfg: Any, spark: Any, task_id: str, **kw: Any):
    return run_task(SqlClassicRunStore(engine), cfg, "d", task_id, DAY, spark_provider=lambda: spark, **kw)


def after_first_poke(action: Any) -> Any:
    """A ``sleep`` for run_task that runs ``action`` once, in the run's first pause: after its first poke,
    before its second, however slow the machine is (a timer could fire before the first poke)."""
    done: list[bool] = []

    def sleep(seconds: float) -> None:
        if not done:
            done.append(True)
            action()
        time.sleep(seconds)

    return sleep


class StopAtPause(threading.Event):
    """A ``stop`` event that sets itself at the run's n-th pause, i.e. after exactly n pokes."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.pauses_left = n

    def wait(self, timeout: float | None = None) -> bool:
        self.pauses_left -= 1
        if self.pauses_left <= 0:
            self.set()
        return super().wait(timeout)


def test_run_task_success_after_landing(engine, cfg, spark, hive_db) -> None:
    create_table(spark, hive_db, "t")
    register(
        SqlRegistrationStore(engine),
        [
            (
                "d",
                NamedHivePartitionSensor(
                    task_id="w", partition_names=[f"{hive_db}.t/ds={{{{ ds }}}}/hr=00"], poke_interval=0.2, timeout=600
                ),
            )
        ],
        DAY,
        cfg,
    )
    landing = after_first_poke(lambda: land(spark, hive_db, "t", ds="2026-11-22", hr="00"))
    result = run(engine, cfg, spark, "w", sleep=landing)
    assert result.state == State.SUCCESS and result.pokes == 2 and result.catalog_calls == result.pokes
    with engine.connect() as conn:
        row = task_sql.get_task(conn, "d", "w", DAY)
    assert row.state == "success" and row.end_date is not None


@pytest.mark.slow  # more than 3 s: in the full suite, not in the fast one
@pytest.mark.parametrize(
    "retries,soft_fail,expected", [(1, False, State.UP_FOR_RETRY), (0, False, State.FAILED), (0, True, State.SKIPPED)]
)
def test_run_task_timeouts(engine, cfg, spark, hive_db, retries, soft_fail, expected) -> None:
    create_table(spark, hive_db, "t")
    spark.sql(f"SHOW PARTITIONS {hive_db}.t").collect()  # warm the catalog: the first poke is not the slow one
    register(
        SqlRegistrationStore(engine),
        [
            (
                "d",
                NamedHivePartitionSensor(
                    task_id="w",
                    partition_names=[f"{hive_db}.t/ds=never/hr=00"],
                    poke_interval=0.3,
                    timeout=3,
                    retries=retries,
                    soft_fail=soft_fail,
                ),
            )
        ],
        DAY,
        cfg,
    )
    started = time.monotonic()
    result = run(engine, cfg, spark, "w")
    assert result.state == expected
    assert 2.9 <= time.monotonic() - started < 120  # never before the time limit; "soon after" is load-dependent
    assert result.pokes >= 2


def test_run_task_refuses_unscheduled_and_respects_manual_change(engine, cfg, spark, hive_db) -> None:
    create_table(spark, hive_db, "t")
    register(
        SqlRegistrationStore(engine),
        [
            (
                "d",
                NamedHivePartitionSensor(
                    task_id="w", partition_names=[f"{hive_db}.t/ds=never/hr=00"], poke_interval=0.2, timeout=600
                ),
            )
        ],
        DAY,
        cfg,
    )
    with pytest.raises(TaskRunError, match="no task instance"):
        run_task(SqlClassicRunStore(engine), cfg, "d", "nope", DAY)

    def mark_by_hand() -> None:
        with engine.begin() as conn:
            task_sql.set_state(conn, TaskKey("d", "w", DAY), State.SUCCESS)

    result = run(engine, cfg, spark, "w", sleep=after_first_poke(mark_by_hand))  # while it runs, never before
    assert result.state == State.SUCCESS and result.pokes == 2
    with pytest.raises(TaskRunError, match="not scheduled"):
        run(engine, cfg, spark, "w")


def test_stopped_run_hands_its_task_back_and_the_next_run_continues_the_try(engine, cfg, spark, hive_db) -> None:
    create_table(spark, hive_db, "t")
    register(
        SqlRegistrationStore(engine),
        [
            (
                "d",
                NamedHivePartitionSensor(
                    task_id="w", partition_names=[f"{hive_db}.t/ds={{{{ ds }}}}/hr=00"], poke_interval=0.2, timeout=600
                ),
            )
        ],
        DAY,
        cfg,
    )
    result = run(engine, cfg, spark, "w", stop=StopAtPause(2))
    assert result.state == State.SCHEDULED and result.pokes == 2
    with engine.connect() as conn:
        row = task_sql.get_task(conn, "d", "w", DAY)
    assert (row.state, row.try_number, row.hostname) == (State.SCHEDULED, 1, None)
    first_start = row.start_date
    assert first_start is not None
    land(spark, hive_db, "t", ds="2026-11-22", hr="00")
    assert run(engine, cfg, spark, "w").state == State.SUCCESS
    with engine.connect() as conn:
        row = task_sql.get_task(conn, "d", "w", DAY)
    assert row.start_date == first_start and row.try_number == 1  # the same try went on


def test_run_given_up_for_dead_never_ends_the_next_try(engine, cfg, spark, hive_db) -> None:
    """A run stalls (swapped out, stuck) past zombie_threshold: the scheduler ends its try, re-queues the task
    and a new run starts try 2. When the old run wakes up it must stop and leave try 2 alone."""
    from smartsensor.standalone.scheduler import end_zombies, requeue_retries

    create_table(spark, hive_db, "t")
    register(
        SqlRegistrationStore(engine),
        [
            (
                "d",
                NamedHivePartitionSensor(
                    task_id="w",
                    partition_names=[f"{hive_db}.t/ds=never/hr=00"],
                    poke_interval=0.2,
                    timeout=1.5,
                    retries=2,
                    retry_delay=0,
                ),
            )
        ],
        DAY,
        cfg,
    )
    key = TaskKey("d", "w", DAY)
    stalls: list[float] = []

    def stall(seconds: float) -> None:  # the old run's first pause is where it stalls
        if not stalls:
            stalls.append(seconds)
            later = datetime.now(timezone.utc) + timedelta(seconds=cfg.get("scheduler", "zombie_threshold") + 1)
            assert end_zombies(SqlSchedulerStore(engine), cfg, now=later) == {State.UP_FOR_RETRY: 1}
            assert requeue_retries(SqlSchedulerStore(engine), cfg, now=later) == {
                State.SCHEDULED: 1
            }  # smart mode is off here
            with engine.begin() as conn:
                assert task_sql.claim_scheduled(conn, key, datetime.now(timezone.utc), "another-host")
        time.sleep(seconds)

    result = run(engine, cfg, spark, "w", sleep=stall)
    assert stalls and result.state == State.RUNNING  # it noticed the task is another run's now
    with engine.connect() as conn:
        row = task_sql.get_task(conn, *key)
    assert (row.state, row.try_number, row.hostname) == (State.RUNNING, 2, "another-host")


def test_hand_back_never_resurrects_a_task_changed_meanwhile(engine, cfg, tmp_path) -> None:
    key = _running_task(engine, cfg, tmp_path, "w", retries=0)
    with engine.begin() as conn:
        task_sql.set_state(conn, key, State.FAILED)  # by hand
        assert not classic_sql.hand_back_running(conn, key, datetime.now(timezone.utc))
        assert task_sql.get_task(conn, *key).state == State.FAILED


@pytest.mark.parametrize("state", [State.SCHEDULED, State.SMART_PENDING])
def test_sending_a_task_back_by_hand_starts_a_fresh_try(engine, cfg, tmp_path, state) -> None:
    """Otherwise its old start_date would time the new wait out at once."""
    key = _running_task(engine, cfg, tmp_path, "w", retries=0)
    with engine.begin() as conn:
        task_sql.set_state(conn, key, State.FAILED, from_states=[State.RUNNING], error="timed out waiting")
        task_sql.set_state(conn, key, state)  # by hand
        row = task_sql.get_task(conn, *key)
    assert row.state == state
    assert (row.start_date, row.end_date, row.hostname, row.error) == (None, None, None, None)


def _running_task(engine: Any, cfg: Any, tmp_path: Any, task_id: str, retries: int) -> TaskKey:
    from smartsensor.sensors import SuccessFileSensor

    register(
        SqlRegistrationStore(engine),
        [("d", SuccessFileSensor(task_id=task_id, path=str(tmp_path / "never"), retries=retries))],
        DAY,
        cfg,
    )
    key = TaskKey("d", task_id, DAY)
    with engine.begin() as conn:
        assert task_sql.claim_scheduled(conn, key, datetime.now(timezone.utc), "host-a")
    return key


def test_run_heartbeat_beats_while_running_and_notices_a_manual_change(engine, cfg, tmp_path) -> None:
    from smartsensor.adapters.periodic import PeriodicJobs
    from smartsensor.standalone.classic import RunHeartbeat

    key = _running_task(engine, cfg, tmp_path, "w", retries=0)
    with engine.connect() as conn:
        before = task_sql.get_task(conn, *key).updated_at

    def beaten() -> bool:
        with engine.connect() as conn:
            return task_sql.get_task(conn, *key).updated_at > before

    beat = RunHeartbeat(SqlClassicRunStore(engine), key, interval=0.1)
    with PeriodicJobs("test") as jobs:
        beat.schedule(jobs)
        wait_until(beaten, timeout=60)
        with engine.begin() as conn:
            task_sql.set_state(conn, key, State.FAILED)  # by hand
        assert beat.lost.wait(60)
        wait_until(lambda: RunHeartbeat.JOB not in jobs.jobs(), timeout=60)  # the beats stopped
    with engine.connect() as conn:
        assert task_sql.get_task(conn, *key).state == State.FAILED  # the beat never resurrects it


def test_scheduler_ends_runs_that_stopped_heartbeating(engine, cfg, tmp_path) -> None:
    from datetime import timedelta

    from smartsensor.standalone.scheduler import end_zombies

    _running_task(engine, cfg, tmp_path, "retry", retries=1)
    _running_task(engine, cfg, tmp_path, "last", retries=0)
    alive = _running_task(engine, cfg, tmp_path, "alive", retries=0)
    later = datetime.now(timezone.utc) + timedelta(seconds=cfg.get("scheduler", "zombie_threshold") + 1)
    with engine.begin() as conn:
        classic_sql.heartbeat_running(conn, alive, later - timedelta(seconds=5))  # beat recently
    assert end_zombies(SqlSchedulerStore(engine), cfg, now=later) == {State.UP_FOR_RETRY: 1, State.FAILED: 1}
    with engine.connect() as conn:
        rows = {r.task_id: r for r in task_sql.list_tasks(conn)}
    assert rows["retry"].state == State.UP_FOR_RETRY and "stopped heartbeating" in rows["retry"].error
    assert rows["last"].state == State.FAILED and rows["last"].end_date == later
    assert rows["alive"].state == State.RUNNING
    assert end_zombies(SqlSchedulerStore(engine), cfg, now=later) == {}  # idempotent
    # compare-and-set: a run that beat after the scheduler read it is left alone
    with engine.connect() as conn:
        stale = rows["alive"].updated_at
    assert stale is not None
    with engine.begin() as conn:
        classic_sql.heartbeat_running(conn, alive, later)
        assert not scheduler_sql.end_zombie(conn, alive, stale, State.FAILED, later, "x")


# -- a run-task child that exits without ending its task -------------------------------------------


def _child(stderr: str, code: int, gate: Any = None) -> Any:
    """A Scheduler ``command`` whose children print ``stderr`` and exit with ``code`` (once ``gate`` exists)."""
    script = "import os, sys, time\n"
    if gate is not None:
        script += f"while not os.path.exists({str(gate)!r}):\n    time.sleep(0.05)\n"
    script += f"sys.stderr.write({stderr!r})\nsys.exit({code})\n"
    return lambda *args: [sys.executable, "-c", script]


def _scheduled(engine: Any, cfg: Any, tmp_path: Any, task_id: str, retries: int) -> TaskKey:
    from smartsensor.sensors import SuccessFileSensor

    register(
        SqlRegistrationStore(engine),
        [("d", SuccessFileSensor(task_id=task_id, path=str(tmp_path / "never"), retries=retries))],
        DAY,
        cfg,
    )
    return TaskKey("d", task_id, DAY)


@pytest.mark.parametrize(
    "stderr,code,retries,state,error",
    [
        (
            "Traceback (most recent call last):\n  ...\nModuleNotFoundError: No module named 'smartsensor.schema'\n\n",
            1,
            1,
            State.UP_FOR_RETRY,
            "run-task exited with code 1: ModuleNotFoundError: No module named 'smartsensor.schema'",
        ),
        ("", 1, 0, State.FAILED, "run-task exited with code 1"),
        ("a last word\n", 0, 0, State.FAILED, "run-task exited with code 0: a last word"),
    ],
)
def test_scheduler_ends_the_try_of_a_child_that_exited_without_ending_it(
    engine, cfg, tmp_path, stderr, code, retries, state, error
) -> None:
    """issue 22, defect 1: such a task stayed `running` until zombie_threshold; now its try ends at once, by the
    retry rule, with the child's last error line."""
    from smartsensor.standalone.scheduler import Scheduler

    key = _scheduled(engine, cfg, tmp_path, "w", retries)
    scheduler = Scheduler(SqlSchedulerStore(engine), cfg, command=_child(stderr, code))
    assert scheduler.launch() == 1
    wait_until(lambda: scheduler.children[key].proc.poll() is not None, timeout=60)
    assert scheduler.reap() == 1 and scheduler.children == {}
    with engine.connect() as conn:
        row = task_sql.get_task(conn, *key)
    assert (row.state, row.try_number, row.error) == (state, 1, error)


def test_a_child_exit_never_ends_a_try_changed_or_claimed_by_someone_else(engine, cfg, tmp_path) -> None:
    from smartsensor.standalone.scheduler import Scheduler

    by_hand = _scheduled(engine, cfg, tmp_path, "by_hand", retries=1)
    reclaimed = _scheduled(engine, cfg, tmp_path, "reclaimed", retries=1)
    gate = tmp_path / "gate"
    scheduler = Scheduler(SqlSchedulerStore(engine), cfg, command=_child("boom\n", 1, gate))
    assert scheduler.launch() == 2
    with engine.begin() as conn:
        task_sql.set_state(conn, by_hand, State.SUCCESS)  # a user's change
        assert classic_sql.hand_back_running(conn, reclaimed, datetime.now(timezone.utc))  # handed back, then another
        assert task_sql.claim_scheduled(
            conn, reclaimed, datetime.now(timezone.utc), "another-host"
        )  # scheduler's claim
    gate.write_text("")
    wait_until(lambda: all(c.proc.poll() is not None for c in scheduler.children.values()), timeout=60)
    assert scheduler.reap() == 2
    with engine.connect() as conn:
        rows = {r.task_id: r for r in task_sql.list_tasks(conn)}
    assert (rows["by_hand"].state, rows["by_hand"].error) == (State.SUCCESS, None)
    assert (rows["reclaimed"].state, rows["reclaimed"].hostname, rows["reclaimed"].error) == (
        State.RUNNING,
        "another-host",
        None,
    )
