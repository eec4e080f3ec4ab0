"""The worker loop's own steps, outside a round: the lease heartbeat and its housekeeping."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from smartsensor.adapters.sql import signals as signal_sql
from smartsensor.adapters.sql.round_store import SqlRoundStore
from smartsensor.ports import CheckAnswerer
from smartsensor.service.round.range_rounds import RangeRounds
from smartsensor.service.served_ranges import PinnedRange
from smartsensor.service.signals import SIGNAL_RETENTION
from smartsensor.service.worker_loop import WorkerLoop


def _no_catalog() -> CheckAnswerer:
    raise AssertionError("no round runs in these tests")


def pinned_loop(engine: Any, cfg: Any) -> WorkerLoop:
    served = PinnedRange(RangeRounds(SqlRoundStore(engine), cfg, 0, cfg.shard_code_upper_limit), _no_catalog)
    return WorkerLoop(served, engine, cfg, 60.0, False, lambda _result: None)


def signal_names(engine: Any) -> list[str]:
    with engine.connect() as conn:
        return [name for _, name in signal_sql.signals_after(conn, 0)]


def test_the_lease_heartbeat_prunes_landing_signals_past_their_retention(engine, cfg) -> None:
    now = datetime.utcnow()
    with engine.begin() as conn:
        signal_sql.insert_signal(conn, "db.t/ds=old", now - SIGNAL_RETENTION - timedelta(minutes=1))
        signal_sql.insert_signal(conn, "db.t/ds=recent", now - SIGNAL_RETENTION + timedelta(minutes=5))
    loop = pinned_loop(engine, cfg)
    loop.keep_leases()
    assert signal_names(engine) == ["db.t/ds=recent"]


def test_pruning_runs_at_most_once_a_minute(engine, cfg) -> None:
    loop = pinned_loop(engine, cfg)
    loop.keep_leases()
    with engine.begin() as conn:  # expired by the time of the next heartbeat
        signal_sql.insert_signal(conn, "db.t/ds=old", datetime.utcnow() - 2 * SIGNAL_RETENTION)
    loop.keep_leases()  # within the minute: not pruned again
    assert signal_names(engine) == ["db.t/ds=old"]


def test_a_failed_prune_is_logged_and_retried_at_a_later_heartbeat(engine, cfg, caplog) -> None:
    loop = pinned_loop(engine, cfg)
    with engine.begin() as conn:
        signal_sql.insert_signal(conn, "db.t/ds=old", datetime.utcnow() - 2 * SIGNAL_RETENTION)
    broken = WorkerLoop(loop.served, _BrokenEngine(), cfg, 60.0, False, lambda _result: None)
    broken.keep_leases()
    assert "pruning landing signals failed" in caplog.text
    assert broken._pruned_at == datetime.min  # nothing pruned: the next heartbeat tries again
    loop.keep_leases()
    assert signal_names(engine) == []


class _BrokenEngine:
    """An engine whose database is gone."""

    def begin(self) -> Any:
        raise ConnectionError("database unreachable")
