"""The worker loop's own steps, outside a round: its side jobs (the lease heartbeat, the pruning of landing signals)."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from smartsensor.adapters.lifecycle import StopRequest
from smartsensor.adapters.periodic import PeriodicJobs
from smartsensor.adapters.sql import signals as signal_sql
from smartsensor.adapters.sql.round_store import SqlRoundStore
from smartsensor.ports import CheckAnswerer
from smartsensor.roots.worker import worker_loop
from smartsensor.service.round.range_rounds import RangeRounds
from smartsensor.service.round.report import RoundResult
from smartsensor.service.served_ranges import PinnedRange
from smartsensor.service.signals import SIGNAL_RETENTION
from smartsensor.service.worker_loop import WakeUps, WorkerLoop
from tests.support.common import wait_until


def _no_catalog() -> CheckAnswerer:
    raise AssertionError("no round runs in these tests")


def pinned_loop(engine: Any, cfg: Any) -> WorkerLoop:
    served = PinnedRange(RangeRounds(SqlRoundStore(engine), cfg, 0, cfg.shard_code_upper_limit), _no_catalog)
    return worker_loop(engine, cfg, served, 60.0, False, lambda _result: None)


def signal_names(engine: Any) -> list[str]:
    with engine.connect() as conn:
        return [name for _, name in signal_sql.signals_after(conn, 0)]


def test_pruning_drops_landing_signals_past_their_retention(engine, cfg) -> None:
    now = datetime.now(timezone.utc)
    with engine.begin() as conn:
        signal_sql.insert_signal(conn, "db.t/ds=old", now - SIGNAL_RETENTION - timedelta(minutes=1))
        signal_sql.insert_signal(conn, "db.t/ds=recent", now - SIGNAL_RETENTION + timedelta(minutes=5))
    loop = pinned_loop(engine, cfg)
    loop.prune_signals()
    assert signal_names(engine) == ["db.t/ds=recent"]


def test_the_side_jobs_keep_leases_every_heartbeat_and_prune_once_a_minute(engine, cfg) -> None:
    loop = pinned_loop(engine, cfg)
    jobs = PeriodicJobs("test")
    loop.side_jobs(jobs)
    assert jobs.jobs() == {
        "leases": cfg.settings.smart_sensor.heartbeat_interval,
        "prune-signals": SIGNAL_RETENTION.total_seconds() / 60,
    }  # no stop-watch: a stop request ends the loop's waits itself
    with engine.begin() as conn:
        signal_sql.insert_signal(conn, "db.t/ds=old", datetime.now(timezone.utc) - 2 * SIGNAL_RETENTION)
    with jobs:  # the first pruning runs at once
        wait_until(lambda: signal_names(engine) == [], timeout=30)
    assert not jobs.running() and jobs.in_flight() == 0


def test_a_failed_prune_is_logged_and_retried_at_the_next_run(engine, cfg, caplog) -> None:
    loop = pinned_loop(engine, cfg)
    with engine.begin() as conn:
        signal_sql.insert_signal(conn, "db.t/ds=old", datetime.now(timezone.utc) - 2 * SIGNAL_RETENTION)
    broken = worker_loop(_BrokenEngine(), cfg, loop.served, 60.0, False, lambda _result: None, wake_ups=False)  # type: ignore[arg-type]  # a stand-in for a dead engine
    broken.prune_signals()
    assert "pruning landing signals failed" in caplog.text
    assert signal_names(engine) == ["db.t/ds=old"]  # nothing pruned: the next run tries again
    loop.prune_signals()
    assert signal_names(engine) == []


class _BrokenEngine:
    """An engine whose database is gone."""

    def begin(self) -> Any:
        raise ConnectionError("database unreachable")


class Rounds:
    """Served ranges whose wake-up rounds are counted, the first leaving a check due again."""

    def __init__(self) -> None:
        self.wake_ups: list[set[int] | None] = []

    def wake_rounds(self, tables: set[tuple[str, str]], shardcodes: set[int] | None) -> list[RoundResult]:
        self.wake_ups.append(shardcodes)
        return [RoundResult(0, 10, due_again=1 if len(self.wake_ups) == 1 else 0)]


def test_a_round_that_leaves_a_check_due_again_is_followed_by_a_wake_up_round_at_once() -> None:
    """``RoundResult.due_again`` (a check ended while tasks joined it): one more wake-up round at once, over every
    range, and no more once a round leaves nothing due."""
    rounds, stopping = Rounds(), StopRequest()
    wake_ups = WakeUps(rounds, lambda _result: None, stopping)  # type: ignore[arg-type]  # only wake_rounds is used
    thread = threading.Thread(target=wake_ups.run, daemon=True)
    thread.start()
    try:
        wake_ups.pending({3})
        wait_until(lambda: len(rounds.wake_ups) >= 2, timeout=30)
        assert rounds.wake_ups[:2] == [{3}, None]
        time.sleep(0.6)  # past the wake-up thread's own wait: nothing more comes
        assert len(rounds.wake_ups) == 2
    finally:
        stopping.request()
        thread.join(timeout=10)
    assert not thread.is_alive()  # the stop woke the thread waiting for a wake-up
