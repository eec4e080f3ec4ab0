"""The lease manager's rules on the in-memory store: fair shares, takeover with a new epoch, a clean stop,
reshaping after a config change, all-or-nothing transactions. tests/integration/test_leases.py runs the
same manager on SQLite and PostgreSQL, with concurrent workers and paused sessions."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from smartsensor.adapters.memory import InMemoryStore
from smartsensor.service.leases import LeaseManager
from tests.support.common import T0, make_cfg


@pytest.fixture
def cfg(tmp_path: Any) -> Any:  # the default 5 ranges: 0-2000, 2000-4000, ... ; leases last 3 s
    return make_cfg(
        tmp_path,
        f"sqlite:///{tmp_path / 'unused.db'}",
        smart_sensor__lease_timeout="3",
        smart_sensor__heartbeat_interval="1",
    )


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def owners(store: InMemoryStore) -> dict[int, str | None]:
    return {r.shard_min: r.owner for r in store.load_leases()}


def test_workers_share_the_ranges_fairly_and_never_twice(cfg) -> None:
    store = InMemoryStore()
    managers = [LeaseManager(store, cfg, f"w{i}") for i in range(4)]
    for second in range(3):
        for m in managers:
            m.heartbeat(now=at(second))
    held = [lo for m in managers for lo in m.owned]
    assert sorted(held) == [0, 2000, 4000, 6000, 8000]  # every range owned, none by two workers
    assert max(len(m.owned) for m in managers) == 2  # 5 ranges over 4 live workers: at most 2 each
    assert all(owners(store)[lo] == m.worker_id for m in managers for lo in m.owned)


def test_a_joining_worker_gets_its_share_and_a_clean_stop_frees_ranges_at_once(cfg) -> None:
    store = InMemoryStore()
    a, b = LeaseManager(store, cfg, "a"), LeaseManager(store, cfg, "b")
    assert len(a.heartbeat(now=at(0))["claimed"]) == 5
    assert b.heartbeat(now=at(0.5))["claimed"] == []  # live, but everything is taken
    assert a.heartbeat(now=at(1))["released"] == [8000, 6000]  # two live workers: a keeps 3
    assert sorted(b.heartbeat(now=at(1.5))["claimed"]) == [6000, 8000]
    a.release_all()
    assert sorted(b.heartbeat(now=at(2))["claimed"]) == [0, 2000, 4000]  # no waiting for expiry
    assert set(owners(store).values()) == {"b"} and "a" not in store.workers


def test_an_expired_lease_is_taken_over_with_a_new_epoch_and_the_old_owner_loses_it(cfg) -> None:
    store = InMemoryStore()
    a, b = LeaseManager(store, cfg, "a"), LeaseManager(store, cfg, "b")
    a.heartbeat(now=at(0))
    old = dict(a.owned)
    assert b.heartbeat(now=at(2))["claimed"] == []  # a's leases still run
    taken = b.heartbeat(now=at(3.5))  # a paused past lease_timeout
    assert sorted(taken["claimed"]) == sorted(old)
    assert all(b.owned[lo].epoch == old[lo].epoch + 1 for lo in old)
    assert sorted(a.heartbeat(now=at(4))["lost"]) == sorted(old)  # a resumes: nothing is renewed
    assert a.owned == {} and set(owners(store).values()) == {"b"}


def test_a_lapsed_lease_is_reclaimed_never_silently_renewed(cfg) -> None:
    store = InMemoryStore()
    a = LeaseManager(store, cfg, "a")
    a.heartbeat(now=at(0))
    epochs = {lo: lease.epoch for lo, lease in a.owned.items()}
    beat = a.heartbeat(now=at(10))  # nobody took them meanwhile, but they lapsed
    assert sorted(beat["lost"]) == sorted(epochs) and sorted(beat["claimed"]) == sorted(epochs)
    assert all(a.owned[lo].epoch == epochs[lo] + 1 for lo in epochs)  # fences of the lapsed epoch are dead


def test_changed_shard_ranges_reshape_rows_once_nobody_holds_them(cfg, tmp_path) -> None:
    store = InMemoryStore()
    old = LeaseManager(store, cfg, "old")
    old.heartbeat(now=at(0))
    new_cfg = make_cfg(
        tmp_path / "new",
        f"sqlite:///{tmp_path / 'unused.db'}",
        smart_sensor__lease_timeout="3",
        smart_sensor__heartbeat_interval="1",
        smart_sensor__shard_ranges="0-5000, 5000-10000",
    )
    new = LeaseManager(store, new_cfg, "new")
    assert new.heartbeat(now=at(1))["claimed"] == [5000]  # the only range without an old row in the way
    epoch0 = old.owned[0].epoch
    old.release_all()
    assert new.heartbeat(now=at(2))["claimed"] == [0]
    rows = store.load_leases()
    assert [(r.shard_min, r.shard_max, r.owner) for r in rows] == [(0, 5000, "new"), (5000, 10000, "new")]
    assert rows[0].epoch > epoch0


def test_a_failed_transaction_changes_nothing(cfg) -> None:
    store = InMemoryStore()
    LeaseManager(store, cfg, "a").heartbeat(now=at(0))
    before = (store.load_leases(), dict(store.workers))
    with pytest.raises(RuntimeError):
        with store.transaction() as tx:
            tx.release_all_leases("a")
            tx.delete_worker("a")
            raise RuntimeError("connection lost before COMMIT")
    assert (store.load_leases(), dict(store.workers)) == before
