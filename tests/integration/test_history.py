"""The status page's history on SQLite and PostgreSQL: one sample per bucket whatever the number of servers,
retention, and a sampler that outlives the database going away."""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta, timezone

from sqlalchemy import text

from smartsensor.adapters.periodic import PeriodicJobs
from smartsensor.adapters.sql import history as history_sql
from smartsensor.adapters.sql.engine import init_db, make_engine
from smartsensor.adapters.sql.registration_store import SqlRegistrationStore
from smartsensor.service.history import FAILED, TAKEN, WRITTEN, HistorySampler, bucket_of, sample_once
from smartsensor.standalone.registration import register
from tests.support.common import DAY, named, wait_until

NOW = datetime(2026, 11, 23, 6, 0, 42, 500000, tzinfo=timezone.utc)
WEEK = 7 * 24 * 3600.0


def samples(engine) -> list[tuple[datetime, str, int]]:
    with engine.connect() as conn:
        return history_sql.load_samples(conn, datetime(2000, 1, 1, tzinfo=timezone.utc))


def test_a_sample_is_the_counts_at_the_start_of_its_bucket(cfg, engine) -> None:
    register(SqlRegistrationStore(engine), [("a", named("w", "db.t/ds=1")), ("b", named("w", "db.t/ds=2"))], DAY, cfg)
    with engine.begin() as conn:
        conn.execute(text("UPDATE task_instance SET state = 'success' WHERE dag_id = 'b'"))
    assert sample_once(engine, 60, WEEK, NOW) == WRITTEN
    bucket = datetime(2026, 11, 23, 6, 0, 0, tzinfo=timezone.utc)
    assert bucket_of(NOW, 60) == bucket
    assert samples(engine) == [(bucket, "smart_pending", 1), (bucket, "success", 1)]
    assert sample_once(engine, 60, WEEK, NOW + timedelta(seconds=10)) == TAKEN  # same bucket: nothing new
    assert sample_once(engine, 60, WEEK, NOW + timedelta(seconds=30)) == WRITTEN
    assert [b for b, _, _ in samples(engine)][-1] == bucket + timedelta(seconds=60)


def test_two_servers_in_the_same_bucket_write_one_sample(cfg, engine, monkeypatch) -> None:
    """The second server's insert hits the primary key (as if both had read "not written" at once): ignored."""
    register(SqlRegistrationStore(engine), [("a", named("w", "db.t/ds=1"))], DAY, cfg)
    other = make_engine(cfg.sql_alchemy_conn)
    try:
        assert sample_once(other, 60, WEEK, NOW) == WRITTEN
        monkeypatch.setattr(history_sql, "bucket_written", lambda conn, bucket: False)
        assert sample_once(engine, 60, WEEK, NOW + timedelta(seconds=1)) == TAKEN
    finally:
        other.dispose()
    assert samples(engine) == [(bucket_of(NOW, 60), "smart_pending", 1)]


def test_samples_older_than_the_retention_are_pruned(cfg, engine) -> None:
    register(SqlRegistrationStore(engine), [("a", named("w", "db.t/ds=1"))], DAY, cfg)
    for minutes in range(5):
        sample_once(engine, 60, 3600, NOW + timedelta(minutes=minutes))
    assert len(samples(engine)) == 5
    sample_once(engine, 60, 180, NOW + timedelta(minutes=5))  # at 06:05:42.5: buckets before 06:02:42.5 go
    kept = [b for b, _, _ in samples(engine)]
    assert kept == [datetime(2026, 11, 23, 6, m, tzinfo=timezone.utc) for m in (3, 4, 5)]


def test_a_database_error_is_one_log_line_and_the_sampler_goes_on(cfg, tmp_path, caplog) -> None:
    home = tmp_path / "home"
    down = make_engine(f"sqlite:///{home / 'late.db'}", home=home)  # no schema yet: every query fails
    sampler = HistorySampler(down, 0.2, WEEK)
    jobs = PeriodicJobs("test")
    sampler.schedule(jobs)
    with caplog.at_level(logging.WARNING, logger="smartsensor.service.history"):
        assert sampler.tick() == FAILED
        jobs.start()
        try:
            wait_until(lambda: len(caplog.records) >= 3, timeout=30)
            assert jobs.running() and HistorySampler.JOB in jobs.jobs()
            assert all("sampling failed" in r.getMessage() and "\n" not in r.getMessage() for r in caplog.records)
            init_db(down)  # the database comes back
            wait_until(lambda: sampler.last_outcome == WRITTEN, timeout=30)
        finally:
            assert jobs.stop(timeout=10)
    assert not jobs.running()
    down.dispose()


def test_stop_ends_the_sampler_at_once_between_samples(engine) -> None:
    sampler = HistorySampler(engine, 3600, WEEK)
    jobs = PeriodicJobs("test")
    sampler.schedule(jobs)
    jobs.start()
    wait_until(lambda: sampler.last_outcome == WRITTEN, timeout=30)  # the first sample, at once
    started = time.monotonic()
    assert jobs.stop(timeout=5)
    assert time.monotonic() - started < 5
    assert not jobs.running() and jobs.in_flight() == 0
