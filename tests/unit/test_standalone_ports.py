"""The standalone door on its ports, without a database: registration, the scheduler's retries and dead runs, and a
classic run's end on the memory stores (``adapters.memory_standalone``), and what the door does with the ports'
errors (``StoreUnavailable``: waited out or reported; ``InsertConflict``: retried once), as it did with SQLAlchemy's."""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from smartsensor.adapters.memory import InMemoryStore
from smartsensor.adapters.memory_standalone import (
    MemoryClassicRunStore,
    MemoryRegistrationStore,
    MemorySchedulerStore,
)
from smartsensor.cli.app import describe_error
from smartsensor.config import Config
from smartsensor.domain.keys import TaskKey
from smartsensor.domain.states import State
from smartsensor.ports import InsertConflict, StoreUnavailable
from smartsensor.standalone.classic import ClassicRun
from smartsensor.standalone.registration import build_row, register, registered_states
from smartsensor.standalone.scheduler import end_zombies, requeue_retries
from tests.support.common import DAY, T0, make_cfg, named


@pytest.fixture
def cfg(tmp_path: Path) -> Config:
    return make_cfg(tmp_path, f"sqlite:///{tmp_path / 'unused.db'}")


def test_register_on_the_memory_store_is_idempotent_and_clears(cfg: Config) -> None:
    store = MemoryRegistrationStore()
    sensors = [("d", named("a")), ("d", named("b"))]
    first = register(store, sensors, DAY, cfg)
    assert [(r.task_id, r.created) for r in first] == [("a", True), ("b", True)]
    store.store.set_state(TaskKey("d", "a", DAY), State.SUCCESS)
    again = register(store, sensors, DAY, cfg)
    assert (again[0].state, again[0].created, again[0].reason) == (State.SUCCESS, False, "already registered")
    assert registered_states(store, "d", DAY) == {"a": State.SUCCESS, "b": State.SMART_PENDING}
    cleared = register(store, sensors, DAY, cfg, clear=True)
    assert cleared[0].reason.startswith("cleared; ") and registered_states(store, "d", DAY)["a"] == State.SMART_PENDING


class RacedOnce(MemoryRegistrationStore):
    """Another registration inserts the same rows first ``times`` times: InsertConflict, nothing written."""

    def __init__(self, times: int) -> None:
        super().__init__()
        self.times = times

    def register_rows(self, rows: Any, execution_date: Any, clear: bool) -> dict[tuple[str, str], str]:
        if self.times:
            self.times -= 1
            super().register_rows(rows, execution_date, clear)  # the other registration's rows
            raise InsertConflict("UNIQUE constraint failed: task_instance.dag_id")
        return super().register_rows(rows, execution_date, clear)


def test_a_raced_registration_is_retried_once(cfg: Config, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, "smartsensor.standalone.registration"):
        done = register(RacedOnce(1), [("d", named("a"))], DAY, cfg)
    assert [(r.created, r.reason) for r in done] == [(False, "already registered")]  # the other one's row
    assert "retrying once" in caplog.text
    with pytest.raises(InsertConflict):
        register(RacedOnce(2), [("d", named("a"))], DAY, cfg)


def classic(cfg: Config, table: InMemoryStore, task: str, **fields: Any) -> TaskKey:
    row, _ = build_row(named(task, **fields), "c", DAY, cfg)
    table.add_task(row._replace(state=State.SCHEDULED))
    return row.key


def test_the_scheduler_retries_and_ends_dead_runs_on_the_memory_store(cfg: Config) -> None:
    table = InMemoryStore()
    scheduler = MemorySchedulerStore(table)
    dead = classic(cfg, table, "dead", retries=1, retry_delay=0)
    retried = classic(cfg, table, "retried", retries=1, retry_delay=60)
    assert [scheduler.claim_scheduled_try(k, T0, "sched:1") for k in (dead, retried)] == [1, 1]
    threshold = cfg.settings.scheduler.zombie_threshold
    assert end_zombies(scheduler, cfg, T0 + timedelta(seconds=threshold - 1)) == {}  # still within the threshold
    assert end_zombies(scheduler, cfg, T0 + timedelta(seconds=threshold + 1)) == {State.UP_FOR_RETRY: 2}
    assert "stopped heartbeating" in (table.tasks[dead].error or "")
    table.change_task(retried, end_date=T0 + timedelta(seconds=threshold + 30))
    later = T0 + timedelta(seconds=threshold + 60)
    assert requeue_retries(scheduler, cfg, later) == {State.SMART_PENDING: 1}  # the other waits its retry_delay
    assert (table.tasks[dead].state, table.tasks[dead].try_number) == (State.SMART_PENDING, 2)
    assert table.tasks[retried].state == State.UP_FOR_RETRY


class Outage(MemoryClassicRunStore):
    """The database is down for the first ``failures`` ends of a try."""

    def __init__(self, table: InMemoryStore, failures: int) -> None:
        super().__init__(table)
        self.failures = failures

    def end_try(self, *args: Any, **kwargs: Any) -> bool:
        if self.failures:
            self.failures -= 1
            raise StoreUnavailable("(sqlite3.OperationalError) database is locked", "database is locked")
        return super().end_try(*args, **kwargs)


def a_claimed_run(cfg: Config, failures: int) -> tuple[ClassicRun, InMemoryStore, list[float]]:
    """A classic run of a task it claimed, on a store down for its first ``failures`` ends; the pauses it sleeps."""
    table = InMemoryStore()
    store = Outage(table, failures)
    _, row = store.claim_run(classic(cfg, table, "w"), T0, "host-a", False)
    assert row is not None
    slept: list[float] = []
    return ClassicRun(store, cfg, row, sleep=slept.append), table, slept


def test_a_classic_run_s_end_waits_out_an_outage(cfg: Config, caplog: pytest.LogCaptureFixture) -> None:
    run, table, slept = a_claimed_run(cfg, failures=2)
    result = run.finish(State.SUCCESS)
    assert (result.state, slept, table.tasks[run.key].state) == (State.SUCCESS, [0.5, 1.0], State.SUCCESS)
    assert (
        "metadata DB unavailable writing c.w -> success, retrying in 0.5 s: (sqlite3.OperationalError)" in caplog.text
    )


def test_a_classic_run_s_end_gives_up_after_its_patience(cfg: Config) -> None:
    run, table, slept = a_claimed_run(cfg, failures=1000)
    with pytest.raises(StoreUnavailable):
        run.finish(State.SUCCESS)
    assert sum(slept) >= cfg.settings.scheduler.zombie_threshold and table.tasks[run.key].state == State.RUNNING


def test_the_cli_tells_a_store_error_as_the_database_error_behind_it() -> None:
    try:
        try:
            raise OperationalError("SELECT 1", {}, ConnectionRefusedError("connection refused"))
        except OperationalError as exc:
            raise StoreUnavailable(str(exc), "connection refused") from exc
    except StoreUnavailable as exc:
        told = describe_error(exc, None)
    assert told == "metadata database ? unreachable or unusable: connection refused"


def test_a_stop_ends_the_schedulers_wait_between_passes_at_once(tmp_path: Path) -> None:
    """One stop (issue 56): the scheduler waits its minute-long loop interval on its ``StopRequest``, so a stop
    requested meanwhile ends it well within the interval (it used to sleep the interval out)."""
    import threading
    import time

    from smartsensor.adapters.lifecycle import StopRequest
    from smartsensor.standalone.scheduler import Scheduler

    cfg = make_cfg(tmp_path, f"sqlite:///{tmp_path / 'unused.db'}", SCHEDULER__LOOP_INTERVAL="60")
    assert cfg.settings.scheduler.loop_interval == 60
    passes: list[dict[str, Any]] = []
    stop = StopRequest()
    scheduler = Scheduler(MemorySchedulerStore(InMemoryStore()), cfg, stop=stop)
    thread = threading.Thread(target=scheduler.run, args=(False, passes.append), daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not passes and time.monotonic() < deadline:
        time.sleep(0.01)
    assert passes and "error" not in passes[0], passes
    began = time.monotonic()
    stop.request()
    thread.join(30)
    assert not thread.is_alive() and time.monotonic() - began < 30
    assert len(passes) == 1  # no second pass: the stop came within the first wait
