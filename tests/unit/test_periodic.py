"""A process's periodic side jobs (``adapters.periodic.PeriodicJobs``, on APScheduler): a job that overruns is never
run twice at once, a stop ends every job promptly (a run in flight finishes, or is abandoned past the timeout), and
a job that raises is logged and keeps its schedule; a step of the wall clock, back or forward, moves no job."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from datetime import datetime, timedelta, tzinfo
from typing import Callable

import apscheduler.executors.base
import apscheduler.schedulers.base
import apscheduler.triggers.interval
import pytest

from smartsensor.adapters import periodic
from smartsensor.adapters.periodic import PeriodicJobs
from tests.support.common import wait_until


class Runs:
    """How often each job ran, how many of each ran at once at most, and which ran after a point."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()
        self.now: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self._lock = threading.Lock()

    def job(self, name: str, body: Callable[[], object] = lambda: None) -> Callable[[], None]:
        def run() -> None:
            with self._lock:
                self.count[name] += 1
                self.now[name] += 1
                self.most[name] = max(self.most[name], self.now[name])
            try:
                body()
            finally:
                with self._lock:
                    self.now[name] -= 1

        return run


def test_a_job_that_overruns_is_never_run_twice_at_once_and_keeps_its_schedule(caplog) -> None:
    runs, release = Runs(), threading.Event()
    jobs = PeriodicJobs("test")
    jobs.every("slow", 0.05, runs.job("slow", lambda: release.wait(30)), at_once=True)
    with caplog.at_level(logging.DEBUG, logger="smartsensor.adapters.periodic"), jobs:
        # the first run holds on while its next runs fall due: each is skipped, none starts beside it
        wait_until(lambda: sum("still runs" in r.getMessage() for r in caplog.records) >= 5, timeout=30)
        assert runs.count["slow"] == 1 and runs.most["slow"] == 1
        release.set()
        wait_until(lambda: runs.count["slow"] >= 4, timeout=30)  # the schedule goes on after the overrun
    assert runs.most["slow"] == 1
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # an overrun is no warning


def test_a_stop_ends_every_job_promptly_and_waits_for_the_run_in_flight() -> None:
    runs, in_slow = Runs(), threading.Event()

    def slow() -> None:
        in_slow.set()
        time.sleep(0.3)  # a run under way when the stop comes: it finishes

    jobs = PeriodicJobs("test")
    jobs.every("fast", 0.05, runs.job("fast"), at_once=True)
    jobs.every("aligned", 0.1, runs.job("aligned"), aligned=True)
    jobs.every("slow", 0.2, runs.job("slow", slow), at_once=True)
    jobs.start()
    wait_until(lambda: all(runs.count[n] >= 2 for n in ("fast", "aligned")) and in_slow.is_set(), timeout=30)
    started = time.monotonic()
    assert jobs.stop(timeout=10)  # nothing left in flight
    assert time.monotonic() - started < 5
    assert not jobs.running() and jobs.in_flight() == 0 and sum(runs.now.values()) == 0
    after_stop = dict(runs.count)

    control = Runs()  # time passes, measured by another scheduler's runs: the stopped jobs run no more
    with PeriodicJobs("control") as other:
        other.every("tick", 0.05, control.job("tick"), at_once=True)
        wait_until(lambda: control.count["tick"] >= 10, timeout=30)
    assert dict(runs.count) == after_stop
    assert jobs.stop() and not jobs.running()  # idempotent
    with pytest.raises(RuntimeError):
        jobs.start()


def test_a_stop_abandons_a_run_stuck_past_its_timeout() -> None:
    stuck, release = threading.Event(), threading.Event()

    def hangs() -> None:
        stuck.set()
        release.wait(60)

    jobs = PeriodicJobs("test")
    jobs.every("hangs", 0.05, hangs, at_once=True)
    jobs.start()
    assert stuck.wait(30)
    started = time.monotonic()
    assert not jobs.stop(timeout=0.2)  # still in flight: abandoned, a daemon thread that holds no exit
    assert time.monotonic() - started < 5
    assert not jobs.running() and jobs.in_flight() == 1
    assert all(t.daemon for t in threading.enumerate() if t.name == "test:hangs")
    release.set()
    assert jobs.stop(timeout=30) and jobs.in_flight() == 0


def test_a_job_that_raises_is_logged_and_keeps_its_schedule(caplog) -> None:
    runs = Runs()

    def fails() -> None:
        raise ValueError(f"boom {runs.count['fails']}")

    with caplog.at_level(logging.ERROR), PeriodicJobs("test") as jobs:
        jobs.every("fails", 0.05, runs.job("fails", fails), at_once=True)
        jobs.every("fine", 0.05, runs.job("fine"), at_once=True)
        wait_until(lambda: runs.count["fails"] >= 3 and runs.count["fine"] >= 3, timeout=30)
        failed = [r for r in caplog.records if r.levelno == logging.ERROR and "fails" in r.getMessage()]
        assert len(failed) >= 2
        assert all(r.exc_info and isinstance(r.exc_info[1], ValueError) for r in failed)  # with its traceback
        assert jobs.running() and set(jobs.jobs()) == {"fails", "fine"}


def test_a_job_removes_itself_and_jobs_added_before_start_run_from_it() -> None:
    runs = Runs()
    jobs = PeriodicJobs("test")

    def once_then_gone() -> None:
        jobs.remove("once")  # as a classic run's heartbeat does when its task left `running`

    jobs.every("once", 0.05, runs.job("once", once_then_gone), at_once=True)
    jobs.every("later", 0.05, runs.job("later"))  # first run after one interval
    assert jobs.jobs() == {"once": 0.05, "later": 0.05}
    with jobs:
        wait_until(lambda: "once" not in jobs.jobs() and runs.count["later"] >= 5, timeout=30)
    assert runs.count["once"] == 1
    with pytest.raises(ValueError):
        jobs.every("never", 0, lambda: None)


class SteppedWallClock:
    """The wall clock as this process's scheduler reads it (``time.time``, and ``datetime.now`` where APScheduler and
    ``adapters.periodic`` call it), ``offset`` seconds from the machine's; the monotonic clock and the machine's
    own are left alone. ``step`` moves it, as NTP stepping the system clock would."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.offset = 0.0
        real_time, clock = time.time, self

        class SteppedDatetime(datetime):
            @classmethod
            def now(cls, tz: tzinfo | None = None) -> datetime:  # type: ignore[override]
                return datetime.now(tz) + timedelta(seconds=clock.offset)

        monkeypatch.setattr(time, "time", lambda: real_time() + clock.offset)
        for module in (
            apscheduler.schedulers.base,
            apscheduler.executors.base,
            apscheduler.triggers.interval,
            periodic,
        ):
            monkeypatch.setattr(module, "datetime", SteppedDatetime)

    def step(self, seconds: float) -> None:
        self.offset += seconds


@pytest.mark.parametrize("step", [-3600.0, 3600.0], ids=["back", "forward"])
def test_a_wall_clock_step_either_way_moves_no_job(monkeypatch, caplog, step: float) -> None:
    wall, runs = SteppedWallClock(monkeypatch), Runs()
    often = ("fast", "aligned", "later")
    with caplog.at_level(logging.WARNING, logger="smartsensor.adapters.periodic"), PeriodicJobs("test") as jobs:
        jobs.every("fast", 0.05, runs.job("fast"), at_once=True)
        jobs.every("aligned", 0.1, runs.job("aligned"), aligned=True)
        jobs.every("later", 0.15, runs.job("later"))
        jobs.every("hourly", 3600, runs.job("hourly"))  # due in an hour, by the monotonic clock
        wait_until(lambda: all(runs.count[n] >= 2 for n in often), timeout=30)
        before = dict(runs.count)
        wall.step(step)
        # back: every job still runs every interval (APScheduler alone waits for the wall clock to catch up, an hour)
        wait_until(lambda: all(runs.count[n] >= before[n] + 5 for n in often), timeout=30)
        # forward: none runs early (APScheduler alone runs the hourly job at once: it looks an hour late)
        assert runs.count["hourly"] == 0
        assert any("wall clock stepped" in r.getMessage() for r in caplog.records)
    assert max(runs.most.values()) == 1
