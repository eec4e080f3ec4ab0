"""Leases across workers whose hosts' wall clocks are skewed and stepped (issue 68): a hypothesis state machine that
drives the real ``LeaseManager`` over the real SQL lease store (SQLite and PostgreSQL), each worker with a
``LeaseClock`` of its own (its host's wall clock skewed and stepped, its monotonic clock running with real time), and
checks after every step that the database's time alone decides who holds a range:

- no lease expires further than ``lease_timeout`` past the database's time (a host ahead would write its own);
- a fence passes (``SqlRoundStore.holds``, judged by the worker's clock, as its writes are) only while its lease is
  unexpired in the database's time (a host behind would write under a lease others already found expired);
- lease epochs never go back;
- once every lease held by a worker that stopped beating has expired (by the database's time), the live workers'
  heartbeats take every range over, whatever their hosts' clocks say.

The database's time is the model's (``ModelTime``): the only stand-in; every statement is the store's own.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterator

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule
from sqlalchemy import Engine

from smartsensor.adapters.sql import leases as lease_sql
from smartsensor.adapters.sql.lease_store import SqlLeaseOps, SqlLeaseStore
from smartsensor.adapters.sql.round_store import SqlRoundStore
from smartsensor.schema.models import shard_lease, worker
from smartsensor.service.lease_clock import LeaseClock
from smartsensor.service.leases import LeaseManager
from tests.support.common import T0, make_cfg
from tests.support.model import StoreModel, run_model
from tests.support.pg import needs_test_pg, pg_engine

WORKERS = ("w0", "w1", "w2")
LEASE = 30  # seconds: [smart_sensor] lease_timeout
STEPS = (-600, -45, -5, 5, 45, 600)  # seconds a host's wall clock is stepped by (NTP, a VM resumed, a bad admin)


class ModelTime:
    """The database's clock, and the real time every host's monotonic clock follows."""

    def __init__(self) -> None:
        self.elapsed = 0.0

    def now(self) -> datetime:
        return T0 + timedelta(seconds=self.elapsed)


class _Ops(SqlLeaseOps):
    """The SQL lease operations, the database's time read from the model."""

    time: ModelTime

    def database_now(self) -> datetime:
        return self.time.now()


class ModelStore(SqlLeaseStore):
    def __init__(self, engine: Engine, time: ModelTime) -> None:
        super().__init__(engine)
        self.time = time

    @contextmanager
    def transaction(self) -> Iterator[SqlLeaseOps]:
        with self.engine.begin() as conn:
            ops = _Ops(conn)
            ops.time = self.time
            yield ops


@dataclass
class Host:
    """One worker host: its wall clock's skew from the database's, its worker process (None: none running), and
    the processes it ran (each a worker id)."""

    skew: float = 0.0
    manager: LeaseManager | None = None
    runs: int = 0
    offset: float = field(default=1000.0)  # its monotonic clock's own origin


class LeaseClocks(StoreModel):
    """Workers on three hosts, beating, dying, restarting, their wall clocks stepped; the database's time moving."""

    emptied = (shard_lease, worker)

    def __init__(self) -> None:
        super().__init__()
        self.time = ModelTime()
        self.hosts = {name: Host(offset=1000.0 * (i + 1)) for i, name in enumerate(WORKERS)}
        self.epochs: dict[int, int] = {}
        self.dead_until: datetime | None = None  # every lease of a worker that stopped beating expired by then

    def manager(self, name: str) -> LeaseManager:
        host = self.hosts[name]
        host.runs += 1
        lease_clock = LeaseClock(
            monotonic=lambda: host.offset + self.time.elapsed,
            wall=lambda: self.time.now() + timedelta(seconds=host.skew),
        )
        return LeaseManager(ModelStore(self.engine, self.time), self.cfg, f"{name}:{host.runs}", lease_clock)

    @rule(name=st.sampled_from(WORKERS))
    def start(self, name: str) -> None:
        type(self).steps += 1
        if self.hosts[name].manager is None:
            self.hosts[name].manager = self.manager(name)

    @rule(name=st.sampled_from(WORKERS))
    def beat(self, name: str) -> None:
        type(self).steps += 1
        manager = self.hosts[name].manager
        if manager is not None:
            manager.heartbeat()

    @rule(seconds=st.sampled_from([1, 5, 10, 20, LEASE + 1]))
    def time_passes(self, seconds: int) -> None:
        type(self).steps += 1
        self.time.elapsed += seconds

    @rule(name=st.sampled_from(WORKERS), seconds=st.sampled_from(STEPS))
    def step_wall_clock(self, name: str, seconds: int) -> None:
        type(self).steps += 1
        self.hosts[name].skew += seconds

    @rule(name=st.sampled_from(WORKERS), clean=st.booleans())
    def stop(self, name: str, clean: bool) -> None:
        """The worker stops: cleanly (its ranges given back) or killed (its leases left to expire)."""
        type(self).steps += 1
        manager = self.hosts[name].manager
        if manager is None:
            return
        if clean:
            manager.release_all()
        self.hosts[name].manager = None

    @precondition(lambda self: any(h.manager is not None for h in self.hosts.values()))
    @rule()
    def every_live_worker_beats_after_the_dead_leases_expire(self) -> None:
        """Past every lease a dead worker left (``lease_timeout`` from now, by the database's time), each live
        worker beats twice: every range is held by a live worker, unexpired."""
        type(self).steps += 1
        self.time.elapsed += LEASE + 1
        live = {name: h.manager for name, h in self.hosts.items() if h.manager is not None}
        for _ in range(2):
            for manager in live.values():
                manager.heartbeat()
        now = self.time.now()
        ids = {m.worker_id for m in live.values()}
        for row in self.rows():
            assert row.owner in ids and row.expires_at is not None and row.expires_at > now, (row, now, self.skews())

    def rows(self) -> list[Any]:
        with self.engine.connect() as conn:
            return lease_sql.load_leases(conn)

    def skews(self) -> dict[str, float]:
        return {name: h.skew for name, h in self.hosts.items()}

    @invariant()
    def no_lease_runs_past_the_database_time_plus_a_timeout(self) -> None:
        limit = self.time.now() + timedelta(seconds=LEASE)
        for row in self.rows():
            assert row.expires_at is None or row.expires_at <= limit, (row, self.time.now(), self.skews())

    @invariant()
    def a_fence_passes_only_while_its_lease_is_unexpired_by_the_database(self) -> None:
        rounds = SqlRoundStore(self.engine)
        now = self.time.now()
        by_range = {row.shard_min: row for row in self.rows()}
        for host in self.hosts.values():
            manager = host.manager
            if manager is None:
                continue
            for lease in manager.owned.values():
                if rounds.holds(lease.fence, manager.clock.now()):
                    row = by_range[lease.shard_min]
                    assert row.expires_at is not None and row.expires_at > now, (lease, row, now, self.skews())

    @invariant()
    def epochs_never_go_back(self) -> None:
        for row in self.rows():
            assert row.epoch >= self.epochs.get(row.shard_min, 0), row
            self.epochs[row.shard_min] = row.epoch


def test_leases_on_sqlite_are_judged_by_the_database_time_whatever_the_hosts_clocks(tmp_path: Any) -> None:
    from smartsensor.adapters.sql.engine import init_db, make_engine

    cfg = make_cfg(tmp_path / "home", f"sqlite:///{tmp_path / 'leases.db'}", smart_sensor__lease_timeout=str(LEASE))
    engine = make_engine(cfg.sql_alchemy_conn)
    init_db(engine)
    try:
        run_model(LeaseClocks.on(engine, cfg), examples=40, steps=40)
    finally:
        engine.dispose()


@needs_test_pg
def test_leases_on_postgresql_are_judged_by_the_database_time_whatever_the_hosts_clocks(tmp_path: Any) -> None:
    with pg_engine() as (engine, url):
        from smartsensor.adapters.sql.engine import init_db

        init_db(engine)
        cfg = make_cfg(tmp_path / "home", url, smart_sensor__lease_timeout=str(LEASE))
        run_model(LeaseClocks.on(engine, cfg), examples=15, steps=40)


@pytest.mark.parametrize("skew", [-600.0, 0.0, 600.0])
def test_a_lease_clock_is_the_database_time_carried_on_the_monotonic_clock(skew: float) -> None:
    """Read at a sync, carried on the monotonic clock: a step of the wall clock afterwards moves nothing; before
    its first reading it is the wall clock."""
    time = ModelTime()
    wall = {"skew": skew}
    lease_clock = LeaseClock(
        monotonic=lambda: 50.0 + time.elapsed, wall=lambda: time.now() + timedelta(seconds=wall["skew"])
    )
    assert lease_clock.now() == time.now() + timedelta(seconds=skew) and not lease_clock.synced
    assert lease_clock.sync(time.now) == time.now()
    time.elapsed += 12.5
    wall["skew"] += 3600
    assert lease_clock.now() == time.now()
