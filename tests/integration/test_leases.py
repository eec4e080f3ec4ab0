"""Shard leases on SQLite and Postgres: race-free claims, rebalance, release, takeover and fencing."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from smartsensor.adapters.sql import leases as lease_sql, tasks as task_sql
from smartsensor.adapters.sql.lease_store import SqlLeaseStore
from smartsensor.adapters.sql.registration_store import SqlRegistrationStore
from smartsensor.domain.states import State
from smartsensor.sensors import SuccessFileSensor
from smartsensor.service.lease_clock import LeaseClock
from smartsensor.service.leases import LeaseManager
from smartsensor.standalone.registration import register
from tests.support.common import DAY, lease_owners as owners, make_cfg
from tests.support.pg import postgres_only
from tests.support.round_helpers import spark_range

SHORT_LEASES = {"smart_sensor__heartbeat_interval": "1", "smart_sensor__lease_timeout": "3"}


@pytest.fixture
def cfg_overrides() -> dict[str, str]:
    """conftest's cfg (and so its engine) with short heartbeats and leases."""
    return SHORT_LEASES


def test_simultaneous_start_never_two_owners_and_converges(engine, cfg) -> None:
    from smartsensor.adapters.sql.engine import make_engine

    managers = [LeaseManager(SqlLeaseStore(make_engine(cfg.sql_alchemy_conn)), cfg, f"w{i}") for i in range(4)]
    barrier = threading.Barrier(len(managers))
    errors: list[BaseException] = []

    def beat(m: LeaseManager) -> None:
        try:
            barrier.wait()
            m.heartbeat()
        except BaseException as exc:  # noqa: BLE001 - collected: the test asserts there are none
            errors.append(exc)

    for _ in range(4):
        threads = [threading.Thread(target=beat, args=(m,)) for m in managers]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert not errors, errors
        held = [lo for m in managers for lo in m.owned]
        assert len(held) == len(set(held)), "a range is held by two workers"
        db = owners(engine)
        for m in managers:
            for lo in m.owned:
                assert db[lo] == m.worker_id
    # 5 ranges over 4 workers: fair share is 2, everything owned
    assert sorted(lo for m in managers for lo in m.owned) == [0, 2000, 4000, 6000, 8000]
    assert max(len(m.owned) for m in managers) <= 2
    for m in managers:
        m.store.engine.dispose()  # type: ignore[attr-defined]  # an SqlLeaseStore


def test_join_rebalances_and_clean_stop_releases_at_once(engine, cfg) -> None:
    a = LeaseManager(SqlLeaseStore(engine), cfg, "a")
    a.heartbeat()
    assert len(a.owned) == 5
    b = LeaseManager(SqlLeaseStore(engine), cfg, "b")
    b.heartbeat()  # b is live but everything is taken
    assert len(b.owned) == 0
    assert a.heartbeat()["released"] == [8000, 6000]  # a sees two live workers: keeps 3, gives back 2
    assert sorted(b.heartbeat()["claimed"]) == [6000, 8000]
    a.release_all()
    assert set(owners(engine).values()) == {None, "b"}
    assert len(b.heartbeat()["claimed"]) == 3  # at once, without waiting for expiry
    assert set(owners(engine).values()) == {"b"}


def test_expired_lease_taken_over_with_new_epoch_and_old_owner_fenced_out(engine, cfg, tmp_path, spark) -> None:
    flags = [tmp_path / f"f{i}" for i in range(10)]
    register(
        SqlRegistrationStore(engine),
        [(f"d{i}", SuccessFileSensor(task_id="s", path=str(flags[i]), poke_interval=1)) for i in range(10)],
        DAY,
        cfg,
    )
    t0 = datetime.now(timezone.utc)
    a = LeaseManager(SqlLeaseStore(engine), cfg, "a")
    a.heartbeat(now=t0)
    old = dict(a.owned)
    # "a" pauses; after lease_timeout "b" takes every range over with epoch + 1
    b = LeaseManager(SqlLeaseStore(engine), cfg, "b")
    later = t0 + timedelta(seconds=4)
    changes = b.heartbeat(now=later)
    assert sorted(changes["claimed"]) == sorted(old)
    assert all(b.owned[lo].epoch == old[lo].epoch + 1 for lo in old)
    for f in flags:
        f.write_text("")
    # "a" resumes and runs a round with its old fence: its writes match nothing
    for lease in old.values():
        w = spark_range(engine, cfg, spark, lease.shard_min, lease.shard_max, clock=lambda: later, record_rounds=False)
        w.fence = lease.fence
        result = w.run_round()
        assert result.marked == {}
        if result.loaded:
            assert result.fenced_out
    with engine.connect() as conn:
        assert {r.state for r in task_sql.list_tasks(conn)} == {State.SMART_PENDING}
    # "a"'s next heartbeat reports every range lost; it renews nothing
    assert sorted(a.heartbeat(now=later)["lost"]) == sorted(old)
    assert a.owned == {}
    # the new owner's writes go through
    marked = 0
    for lease in b.owned.values():
        w = spark_range(engine, cfg, spark, lease.shard_min, lease.shard_max, clock=lambda: later, record_rounds=False)
        w.fence = lease.fence
        marked += w.run_round().marked.get("success", 0)
    assert marked == 10


def test_lapsed_lease_is_reclaimed_not_renewed(engine, cfg) -> None:
    t0 = datetime.now(timezone.utc)
    a = LeaseManager(SqlLeaseStore(engine), cfg, "a")
    a.heartbeat(now=t0)
    epochs = {lo: lease.epoch for lo, lease in a.owned.items()}
    changes = a.heartbeat(now=t0 + timedelta(seconds=10))  # paused past expiry, nobody else around
    assert sorted(changes["lost"]) == sorted(epochs) and sorted(changes["claimed"]) == sorted(epochs)
    assert all(a.owned[lo].epoch == epochs[lo] + 1 for lo in epochs)


def _beat_in_thread(manager: LeaseManager, now: datetime, timeout: float) -> dict[str, list[int]]:
    """Run one heartbeat; fail (instead of hanging the suite) if it blocks on another session's locks."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(manager.heartbeat(now=now)), daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "the heartbeat blocked on a lock held by a paused worker"
    return out[0]


@postgres_only  # row locks are a Postgres matter: SQLite serialises all writers (README, HA)
def test_worker_paused_inside_its_heartbeat_does_not_block_takeover(engine, cfg, db_url) -> None:
    """A worker stopped between renewing (row locks taken) and COMMIT: the survivor's heartbeat never
    blocks, and once the server ends the paused session the ranges are taken over."""
    from smartsensor.adapters.sql.engine import make_engine

    paused_engine = make_engine(cfg.sql_alchemy_conn, idle_in_transaction_timeout=1.0)
    t0 = datetime.now(timezone.utc)
    a = LeaseManager(SqlLeaseStore(paused_engine), cfg, "a")
    a.heartbeat(now=t0)
    paused = paused_engine.connect()
    try:
        paused.begin()
        assert lease_sql.renew_leases(paused, "a", t0, t0 + timedelta(seconds=3)) == 5  # ... and "a" stops here
        b = LeaseManager(SqlLeaseStore(engine), cfg, "b")
        later = t0 + timedelta(seconds=4)
        assert _beat_in_thread(b, later, timeout=5)["claimed"] == []  # locked rows are skipped, not waited on
        threading.Event().wait(2.0)  # the server ends a's session after 1 s idle in its transaction
        assert sorted(_beat_in_thread(b, later, timeout=5)["claimed"]) == [0, 2000, 4000, 6000, 8000]
        with pytest.raises(Exception):  # noqa: B017 - whatever the driver raises for a session the server ended
            paused.commit()  # "a" resumes: its session is gone, nothing it did lands
    finally:
        paused.invalidate()
        paused_engine.dispose()
    assert set(owners(engine).values()) == {"b"}


@postgres_only  # row locks are a Postgres matter: SQLite serialises all writers (README, HA)
def test_fenced_write_paused_before_commit_cannot_land_after_a_takeover(engine, cfg, db_url, tmp_path) -> None:
    """The fence share-locks the lease row until the write commits: a takeover waits for it, so a write
    that passed the fence can never commit after another worker owns the range."""
    register(
        SqlRegistrationStore(engine),
        [(f"d{i}", SuccessFileSensor(task_id="s", path=str(tmp_path / f"f{i}"), poke_interval=1)) for i in range(10)],
        DAY,
        cfg,
    )
    with engine.connect() as conn:
        shard = task_sql.list_tasks(conn)[0].shardcode
    t0 = datetime.now(timezone.utc)
    a = LeaseManager(SqlLeaseStore(engine), cfg, "a")
    a.heartbeat(now=t0)
    lease = next(lease for lease in a.owned.values() if lease.shard_min <= shard < lease.shard_max)
    from smartsensor.adapters.sql.engine import make_engine

    a_engine = make_engine(cfg.sql_alchemy_conn)  # no idle timeout: "a" resumes on its own
    a_conn = a_engine.connect()
    try:
        a_conn.begin()
        marked = task_sql.mark_hashes(
            a_conn,
            [r.hashcode for r in task_sql.list_tasks(a_conn) if lease.shard_min <= r.shardcode < lease.shard_max],
            lease.shard_min,
            lease.shard_max,
            State.SUCCESS,
            t0,
            fence=lease.fence,
        )
        assert marked >= 1  # passed the fence ... and "a" pauses past its lease's expiry
        b = LeaseManager(SqlLeaseStore(engine), cfg, "b")
        later = t0 + timedelta(seconds=4)
        first = _beat_in_thread(b, later, timeout=5)
        assert lease.shard_min not in first["claimed"] and len(first["claimed"]) == 4
        a_conn.commit()  # "a" resumes and commits: it still owned the range, nobody took it in between
    finally:
        a_conn.close()
        a_engine.dispose()
    second = _beat_in_thread(b, later, timeout=5)
    assert second["claimed"] == [lease.shard_min] and b.owned[lease.shard_min].epoch == lease.epoch + 1


def test_changed_shard_ranges_reshape_free_lease_rows(engine, cfg, tmp_path, db_url) -> None:
    """Rows made under an old shard_ranges are fitted to the new one once nobody holds them; without
    that the range 0-5000 (its old row says 0-2000) would never be claimed and its tasks would wait forever."""
    old = LeaseManager(SqlLeaseStore(engine), cfg, "old")  # the default 5 ranges: 0-2000, 2000-4000, ...
    t0 = datetime.now(timezone.utc)
    old.heartbeat(now=t0)
    new_cfg = make_cfg(tmp_path / "home2", db_url, **SHORT_LEASES, smart_sensor__shard_ranges="0-5000, 5000-10000")
    new = LeaseManager(SqlLeaseStore(engine), new_cfg, "new")
    # "old" still holds every old row: only the range with no row yet (5000-10000) can be claimed, and
    # old and new both serve 5000-10000 until "old" stops (state guards keep each task marked once)
    assert new.heartbeat(now=t0 + timedelta(seconds=1))["claimed"] == [5000]
    with engine.connect() as conn:
        assert [(r.shard_min, r.shard_max) for r in lease_sql.load_leases(conn)][:2] == [(0, 2000), (2000, 4000)]
    epoch0 = old.owned[0].epoch
    old.release_all()  # the old-config worker stops
    assert new.heartbeat(now=t0 + timedelta(seconds=2))["claimed"] == [0]
    with engine.connect() as conn:
        rows = lease_sql.load_leases(conn)
    assert [(r.shard_min, r.shard_max, r.owner) for r in rows] == [(0, 5000, "new"), (5000, 10000, "new")]
    assert rows[0].epoch > epoch0  # a fence taken under the old shape never passes again
    assert new.owned[0].shard_max == 5000


def test_a_worker_whose_checks_all_fail_hands_its_ranges_to_those_that_answer(engine, cfg, tmp_path) -> None:
    """Issue 68: w0 reaches PostgreSQL but not the metastore (every check of its rounds a transient error) while w1's
    and w2's answer. It keeps its ranges for ``failover_after`` (a blip moves nothing), then hands them over: w1 and
    w2 hold every range. Once w0 has seen no failure for as long (it checks nothing while it holds nothing), it
    takes its share again. When every worker's checks fail, nobody moves."""
    from tests.integration.test_lease_model import ModelStore, ModelTime

    failover = 10
    cfg = make_cfg(
        tmp_path / "failover", cfg.sql_alchemy_conn, **SHORT_LEASES, smart_sensor__failover_after=str(failover)
    )
    time = ModelTime()

    def worker(name: str) -> LeaseManager:
        lease_clock = LeaseClock(monotonic=lambda: time.elapsed, wall=time.now)
        return LeaseManager(ModelStore(engine, time), cfg, name, lease_clock)

    managers = [worker(f"w{i}") for i in range(3)]

    def seconds(n: int, failing: dict[str, bool | None]) -> None:
        """``n`` seconds of heartbeats, each worker's rounds reporting ``failing`` (by worker id) every second."""
        for _ in range(n):
            time.elapsed += 1
            for m in managers:
                m.note_checks(failing.get(m.worker_id) if m.owned else None)
                m.heartbeat()

    seconds(3, {})
    mine = {m.worker_id: set(m.owned) for m in managers}
    assert all(mine.values()) and sum(map(len, mine.values())) == 5, mine
    seconds(failover - 2, {"w0": True, "w1": False, "w2": False})  # a blip: nothing moves
    assert set(managers[0].owned) == mine["w0"]
    seconds(4, {"w0": True, "w1": False, "w2": False})
    assert managers[0].owned == {} and sorted(lo for m in managers[1:] for lo in m.owned) == sorted(owners(engine))
    assert None not in owners(engine).values() and "w0" not in owners(engine).values()
    seconds(failover + 3, {})  # w0 has seen no failure for failover_after: it answers again, takes its share
    assert managers[0].owned and None not in owners(engine).values(), owners(engine)
    seconds(3, {"w0": False, "w1": False, "w2": False})
    before = owners(engine)
    assert set(before.values()) == {"w0", "w1", "w2"}, before
    seconds(3 * failover, {"w0": True, "w1": True, "w2": True})  # every worker's checks fail: nobody moves
    assert owners(engine) == before


def test_an_answer_from_just_before_a_fault_that_hit_everyone_moves_nothing(engine, cfg, tmp_path) -> None:
    """Found by the several-host bed under load: the metastore stalls for every worker; w0's first failing round
    ends a second before w1's last answering one (a round that ended as the fault began). w1's answer must not
    count as "another worker answers": both fail from then on, and nobody moves."""
    from tests.integration.test_lease_model import ModelStore, ModelTime

    cfg = make_cfg(tmp_path / "race", cfg.sql_alchemy_conn, **SHORT_LEASES, smart_sensor__failover_after="4")
    time = ModelTime()
    managers = [
        LeaseManager(ModelStore(engine, time), cfg, f"w{i}", LeaseClock(monotonic=lambda: time.elapsed, wall=time.now))
        for i in range(2)
    ]

    def second(failing: dict[str, bool | None]) -> None:
        time.elapsed += 1
        for m in managers:
            m.note_checks(failing.get(m.worker_id))
            m.heartbeat()

    for _ in range(3):
        second({"w0": False, "w1": False})
    before = owners(engine)
    assert set(before.values()) == {"w0", "w1"}, before
    second({"w0": True, "w1": False})  # w1's round ended with answers just as the fault began
    for _ in range(12):
        second({"w0": True, "w1": True})
    assert owners(engine) == before
