"""The worker loop's own steps, outside a round: its side jobs (the lease heartbeat, the pruning of landing signals)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from smartsensor.adapters.periodic import PeriodicJobs
from smartsensor.adapters.sql import signals as signal_sql
from smartsensor.adapters.sql.round_store import SqlRoundStore
from smartsensor.ports import CheckAnswerer
from smartsensor.service.round.range_rounds import RangeRounds
from smartsensor.service.served_ranges import PinnedRange
from smartsensor.service.signals import SIGNAL_RETENTION
from smartsensor.service.worker_loop import WorkerLoop
from tests.support.common import wait_until


def _no_catalog() -> CheckAnswerer:
    raise AssertionError("no round runs in these tests")


def pinned_loop(engine: Any, cfg: Any) -> WorkerLoop:
    served = PinnedRange(RangeRounds(SqlRoundStore(engine), cfg, 0, cfg.shard_code_upper_limit), _no_catalog)
    return WorkerLoop(served, engine, cfg, 60.0, False, lambda _result: None)


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
        "stop-watch": 0.2,
    }
    with engine.begin() as conn:
        signal_sql.insert_signal(conn, "db.t/ds=old", datetime.now(timezone.utc) - 2 * SIGNAL_RETENTION)
    with jobs:  # the first pruning runs at once
        wait_until(lambda: signal_names(engine) == [], timeout=30)
    assert not jobs.running() and jobs.in_flight() == 0


def test_a_failed_prune_is_logged_and_retried_at_the_next_run(engine, cfg, caplog) -> None:
    loop = pinned_loop(engine, cfg)
    with engine.begin() as conn:
        signal_sql.insert_signal(conn, "db.t/ds=old", datetime.now(timezone.utc) - 2 * SIGNAL_RETENTION)
    broken = WorkerLoop(loop.served, _BrokenEngine(), cfg, 60.0, False, lambda _result: None)
    broken.prune_signals()
    assert "pruning landing signals failed" in caplog.text
    assert signal_names(engine) == ["db.t/ds=old"]  # nothing pruned: the next run tries again
    loop.prune_signals()
    assert signal_names(engine) == []


class _BrokenEngine:
    """An engine whose database is gone."""

    def begin(self) -> Any:
        raise ConnectionError("database unreachable")
