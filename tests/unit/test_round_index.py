"""The incremental round on the in-memory store: a round reads only what arrived, works on the due checks only,
and ends tasks as a worker that rebuilds its index from the database every round would."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from smartsensor.adapters.memory import InMemoryStore
from smartsensor.domain.keys import Cohort, Fence, TaskKey, VigilKey
from smartsensor.domain.states import State
from smartsensor.hive_filter.names import TableName
from smartsensor.service.round.index import VigilIndex
from smartsensor.service.round.range_rounds import RangeRounds, run_round
from tests.support.catalog_doubles import Clock, DictCatalog
from tests.support.common import DAY, make_cfg, named
from tests.unit.test_round import add, state_of

START = datetime(2026, 11, 22, tzinfo=timezone.utc)


@pytest.fixture
def cfg(tmp_path: Any) -> Any:
    """No database behind it: the in-memory store."""
    return make_cfg(tmp_path, f"sqlite:///{tmp_path / 'unused.db'}")


def worker(store: InMemoryStore, cfg: Any, clock: Clock, **kw: Any) -> RangeRounds:
    return RangeRounds(store, cfg, 0, cfg.shard_code_upper_limit, clock=clock, **kw)


def test_a_steady_round_reads_only_what_arrived_and_works_only_on_due_checks(cfg, clock) -> None:
    store, catalog = InMemoryStore(), DictCatalog()
    for i in range(50):
        add(store, cfg, f"d{i}", named("w", f"db.t/ds={i % 10}", poke_interval=600))
    w = worker(store, cfg, clock)
    first = run_round([w], lambda: catalog)
    assert (first.rebuilt, first.loaded, first.distinct_checks, first.groups_due) == (1, 50, 10, 10)
    clock.advance(1)
    before = store.statements()
    steady = run_round([w], lambda: catalog)
    assert (steady.rebuilt, steady.loaded, steady.groups_due, steady.groups_poked) == (0, 50, 0, 0)
    assert store.statements() - before == 2  # the change feed, and the round's status row
    add(store, cfg, "late", named("w", "db.t/ds=late", poke_interval=600))
    catalog.land("db.t/ds=late")
    clock.advance(1)
    arrived = run_round([w], lambda: catalog)
    assert (arrived.started, arrived.loaded, arrived.groups_due, arrived.marked) == (1, 51, 1, {State.SUCCESS: 1})
    assert run_round([w], lambda: catalog).loaded == 50  # the ended check left the index


def test_a_try_times_out_on_time_even_when_its_check_is_not_due(cfg, clock) -> None:
    store, catalog = InMemoryStore(), DictCatalog()
    add(store, cfg, "d", named("w", "db.t/ds=never", poke_interval=3600, timeout=30))
    w = worker(store, cfg, clock)
    run_round([w], lambda: catalog)
    clock.advance(29)
    assert run_round([w], lambda: catalog).marked == {}
    clock.advance(1)
    assert run_round([w], lambda: catalog).marked == {State.FAILED: 1}
    assert len(w.index) == 0


def test_cohorts_of_one_check_time_out_by_their_own_settings(cfg, clock) -> None:
    store, catalog = InMemoryStore(), DictCatalog()
    add(store, cfg, "short", named("w", "db.t/ds=never", timeout=30, poke_interval=10))
    add(store, cfg, "long", named("w", "db.t/ds=never", timeout=90, poke_interval=10))
    w = worker(store, cfg, clock)
    run_round([w], lambda: catalog)
    assert len(w.index) == 1 and len(next(iter(w.index.vigils.values())).cohorts) == 2
    clock.advance(30)
    assert run_round([w], lambda: catalog).marked == {State.FAILED: 1}
    assert state_of(store, "long", "w") == State.SMART_RUNNING and w.index.tasks == 1


def test_a_wake_up_round_pokes_only_the_named_tables_and_the_new_checks(cfg, clock) -> None:
    store, catalog = InMemoryStore(), DictCatalog()
    add(store, cfg, "a", named("w", "db.a/ds=1", poke_interval=3600))
    add(store, cfg, "b", named("w", "db.b/ds=1", poke_interval=3600))
    w = worker(store, cfg, clock)
    run_round([w], lambda: catalog)
    catalog.land("db.a/ds=1")
    catalog.land("db.b/ds=1")
    add(store, cfg, "c", named("w", "db.c/ds=1", poke_interval=3600))
    catalog.land("db.c/ds=1")
    clock.advance(1)
    woken = run_round([w], lambda: catalog, focus={TableName("db", "a")})
    assert woken.partial and woken.marked == {State.SUCCESS: 2}  # a (its table was named) and c (new)
    assert state_of(store, "b", "w") == State.SMART_RUNNING
    assert run_round([w], lambda: catalog, focus=set()).groups_due == 0  # nothing new, no table named


def test_the_index_is_rebuilt_on_a_new_epoch_and_after_its_interval(cfg, clock) -> None:
    store, catalog = InMemoryStore(), DictCatalog()
    add(store, cfg, "d", named("w", "db.t/ds=1", poke_interval=3600))
    w = worker(store, cfg, clock)
    assert run_round([w], lambda: catalog).rebuilt == 1
    moved = add(store, cfg, "moved", named("w", "db.t/ds=2", poke_interval=3600))
    store.change_task(moved.key, state=State.SMART_RUNNING, start_date=clock.now)  # by hand
    clock.advance(1)
    assert run_round([w], lambda: catalog).loaded == 1  # not in the change feed ...
    clock.advance(cfg.get("smart_sensor", "index_rebuild_interval"))
    rebuilt = run_round([w], lambda: catalog)
    assert (rebuilt.rebuilt, rebuilt.loaded) == (1, 2)  # ... but in the next rebuild
    assert rebuilt.groups_poked == 1  # the moved one; d keeps its poke time across the rebuild (no poke storm)
    store.set_lease(0, cfg.shard_code_upper_limit, "me", 7, clock.now + timedelta(hours=1))
    w.fence = Fence(0, "me", 7)
    clock.advance(1)
    assert run_round([w], lambda: catalog).rebuilt == 1  # a new lease epoch starts from the database


def test_a_failed_write_rebuilds_the_index_and_loses_nothing(cfg, clock) -> None:
    class FlakyWrites(InMemoryStore):
        fail = False

        def write_round(self, *args: Any) -> Any:
            if self.fail:
                raise ConnectionError("database is down")
            return super().write_round(*args)

    store, catalog = FlakyWrites(), DictCatalog()
    add(store, cfg, "d", named("w", "db.t/ds=1", poke_interval=10))
    w = worker(store, cfg, clock)
    run_round([w], lambda: catalog)
    catalog.land("db.t/ds=1")
    clock.advance(10)
    store.fail = True
    assert run_round([w], lambda: catalog).error == "ConnectionError: database is down"
    store.fail = False
    clock.advance(1)
    again = run_round([w], lambda: catalog)
    assert (again.rebuilt, again.marked) == (1, {State.SUCCESS: 1})


def test_a_kept_index_and_one_rebuilt_every_round_end_in_the_same_states(cfg, clock) -> None:
    """One script on two stores: one worker keeps its index from the change feed, the other rebuilds its index from
    the database before every round (``invalidate``: what a takeover or a failed round does), so it never relies on
    what an earlier round left in memory. Landings, timeouts with retries, a manual change, late arrivals: the two
    agree after every round, and end as the script says."""
    catalog = DictCatalog()
    kept, rebuilt = InMemoryStore(), InMemoryStore()
    for store in (kept, rebuilt):
        for i in range(6):
            add(store, cfg, f"d{i}", named("w", f"db.t/ds={i % 3}", poke_interval=10, timeout=40, retries=i % 2))
    workers = [(kept, worker(kept, cfg, clock)), (rebuilt, worker(rebuilt, cfg, clock))]

    def states(store: InMemoryStore) -> list[tuple[str, str]]:
        return sorted((k.dag_id, r.state) for k, r in store.tasks.items())

    for step in range(8):
        if step == 2:
            catalog.land("db.t/ds=0")
        for store, w in workers:
            if step == 3:
                store.set_state(TaskKey("d1", "w", DAY), State.SUCCESS)  # a user's change wins
            if step == 4:
                add(store, cfg, "late", named("w", "db.t/ds=2", poke_interval=10, timeout=40))
            if store is rebuilt:
                w.invalidate()
            assert run_round([w], lambda: catalog).rebuilt == (1 if store is rebuilt or step == 0 else 0)
        assert states(kept) == states(rebuilt), f"after round {step}"
        clock.advance(10)
    assert states(kept) == [
        ("d0", State.SUCCESS),
        ("d1", State.SUCCESS),
        ("d2", State.FAILED),
        ("d3", State.SUCCESS),
        ("d4", State.FAILED),
        ("d5", State.UP_FOR_RETRY),
        ("late", State.SMART_RUNNING),
    ]


def test_the_index_counts_collisions_and_forgets_them_when_a_check_leaves() -> None:
    index = VigilIndex()
    cohort = Cohort('{"poke_interval": 10}', START, 1)
    new, bad = index.add(
        [(VigilKey(1, "a", "{}"), cohort, 2), (VigilKey(1, "b", "{}"), cohort, 1), (VigilKey(2, "a", "{}"), cohort, 1)]
    )
    assert (len(new), bad, index.collided, index.tasks, index.hashes) == (3, [], {1}, 4, 2)
    index.remove(VigilKey(1, "b", "{}"))
    assert (index.collided, index.tasks) == (set(), 3)
    _, bad = index.add([(VigilKey(3, "a", "{}"), Cohort('{"poke_interval": -1}', START, 1), 1)])
    assert len(bad) == 1 and "poke_interval" in bad[0][2]
    due = index.due(START)
    assert {c.key for c in due} == {(1, "a", "{}"), (2, "a", "{}")} and index.due(START) == []
    for vigil in due:
        index.done(vigil, START)
    assert index.due(START + timedelta(seconds=9)) == [] and len(index.due(START + timedelta(seconds=10))) == 2
