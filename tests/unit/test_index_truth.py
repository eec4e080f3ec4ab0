"""The round's index agrees with the database (issue 30): the defects a reviewer found, one test each, on the
in-memory store. Each interleaving is forced at the point where the real threads could meet: a store that runs
the other thread's step right after a round's write (before the round updates its index), or a catalog that runs
it while the round waits for its answer. tests/integration/test_index_model.py explores every interleaving."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Callable, Iterable

import pytest

from smartsensor.adapters.memory import InMemoryStore
from smartsensor.domain.keys import Fence, TaskKey
from smartsensor.domain.states import State
from smartsensor.domain.transitions import RoundWrites
from smartsensor.hive_filter.names import TableName
from smartsensor.sensors.checks import Check
from smartsensor.sensors.errors import CheckError, PermanentCheckError
from smartsensor.service.round.range_rounds import RangeRounds, run_round
from tests.support.catalog_doubles import Clock, DictCatalog
from tests.support.common import DAY, make_cfg, named
from tests.unit.test_round import add, state_of

PARTITION = "db.t/ds=1"


@pytest.fixture
def cfg(tmp_path: Any) -> Any:
    """No database behind it: the in-memory store. Rebuilds far apart: only the round's own upkeep counts."""
    return make_cfg(tmp_path, f"sqlite:///{tmp_path / 'unused.db'}", smart_sensor__index_rebuild_interval="604800")


class AfterWrite(InMemoryStore):
    """The in-memory store, running ``then`` once right after the next round write commits: another thread's step
    between a round's write and its update of the index."""

    then: Callable[[], None] | None = None

    def write_round(self, shard_min: int, shard_max: int, writes: RoundWrites, now: datetime, fence: Any) -> Any:
        marked = super().write_round(shard_min, shard_max, writes, now, fence)
        then, self.then = self.then, None
        if then is not None:
            then()
        return marked


class DuringPoke(DictCatalog):
    """A catalog running ``then`` once while it answers: another thread's step during a round's poke."""

    then: Callable[[], None] | None = None

    def check_all(self, checks: Iterable[Check]) -> dict[Check, bool | CheckError]:
        answers = super().check_all(checks)
        then, self.then = self.then, None
        if then is not None:
            then()
        return answers


def whole(store: InMemoryStore, cfg: Any, clock: Clock) -> RangeRounds:
    return RangeRounds(store, cfg, 0, cfg.shard_code_upper_limit, clock=clock)


def waiting_in_index(w: RangeRounds, store: InMemoryStore, dag_id: str) -> bool:
    row = store.tasks[(dag_id, "w", DAY)]
    vigil = w.index.vigils.get(row.vigil)
    return vigil is not None and any(c.start_date == row.start_date for c in vigil.cohorts)


@pytest.mark.parametrize("outcome", ["landed", "permanent error"])
def test_a_task_joining_a_check_while_the_timer_round_writes_it_is_kept(cfg, clock, outcome) -> None:
    """Defect 1: the timer round writes check C; meanwhile the wake-up thread's feed adds a new task of C."""
    store, catalog = AfterWrite(), DictCatalog()
    add(store, cfg, "first", named("w", PARTITION, poke_interval=60))
    w = whole(store, cfg, clock)
    run_round([w], lambda: catalog)
    if outcome == "landed":
        catalog.land(PARTITION)
    else:
        catalog.fail(PARTITION, PermanentCheckError("no such table"))
    clock.advance(60)

    def wake_up_feed() -> None:
        clock.advance(1)
        add(store, cfg, "joined", named("w", PARTITION, poke_interval=60))
        run_round([w], lambda: catalog, focus=set())  # a NOTIFY of a new pending task: starts it, feeds the index

    store.then = wake_up_feed
    run_round([w], lambda: catalog)
    want = State.SUCCESS if outcome == "landed" else State.FAILED
    assert state_of(store, "first", "w") == want and state_of(store, "joined", "w") == State.SMART_RUNNING
    assert waiting_in_index(w, store, "joined"), "the task that joined during the write left the index with it"
    clock.advance(1)  # the next round, not the task's next poke a minute later: its check was seen ending
    run_round([w], lambda: catalog)
    assert state_of(store, "joined", "w") == want


@pytest.mark.parametrize("meanwhile", ["the timer round feeds", "a rebuild"])
def test_a_task_joining_a_check_while_the_wake_up_round_writes_it_is_kept(cfg, clock, meanwhile) -> None:
    """Defect 1, the threads the other way round: a landing signal's round writes C while the timer round feeds a
    new task of C in, or while a rebuild (another thread's failed round invalidated the index) reads it."""
    store, catalog = AfterWrite(), DictCatalog()
    add(store, cfg, "first", named("w", PARTITION, poke_interval=3600))
    w = whole(store, cfg, clock)
    run_round([w], lambda: catalog)
    catalog.land(PARTITION)

    def join() -> None:
        clock.advance(1)
        add(store, cfg, "joined", named("w", PARTITION, poke_interval=3600))
        if meanwhile == "a rebuild":
            w.load_index()
        else:
            run_round([w], lambda: catalog)

    store.then = join
    run_round([w], lambda: catalog, focus={TableName("db", "t")})
    assert state_of(store, "first", "w") == State.SUCCESS and waiting_in_index(w, store, "joined")
    clock.advance(1)
    run_round([w], lambda: catalog)
    assert state_of(store, "joined", "w") == State.SUCCESS


def test_a_check_that_ended_while_a_task_joined_it_is_due_again_for_the_wake_up_round(cfg, clock) -> None:
    """A round that ends a check while a task joins it (registered or started meanwhile) says so (``due_again``), and
    the wake-up round that follows (``WakeUps.again``) ends that task too, though the check is neither new nor on a
    signalled table: it waits for no timer round (a parked try registered during a landing waited 4.5 s)."""
    store, catalog = AfterWrite(), DictCatalog()
    add(store, cfg, "first", named("w", PARTITION, poke_interval=60))
    w = whole(store, cfg, clock)
    run_round([w], lambda: catalog)
    catalog.land(PARTITION)
    clock.advance(60)

    def join() -> None:
        clock.advance(1)
        add(store, cfg, "joined", named("w", PARTITION, poke_interval=60))
        run_round([w], lambda: catalog, focus=set())  # its NOTIFY's wake-up round feeds it in: the check is held

    store.then = join
    ended = run_round([w], lambda: catalog)
    assert state_of(store, "first", "w") == State.SUCCESS and state_of(store, "joined", "w") == State.SMART_RUNNING
    assert ended.due_again == 1
    woken = run_round([w], lambda: catalog, focus=set())
    assert state_of(store, "joined", "w") == State.SUCCESS
    assert woken.due_again == 0 and woken.groups_poked == 1


def test_a_wake_up_round_leaves_checks_that_are_not_due(cfg, clock) -> None:
    """A wake-up round takes what is due; a check poked a moment ago waits for its own schedule."""
    store, catalog = InMemoryStore(), DictCatalog()
    add(store, cfg, "first", named("w", PARTITION, poke_interval=60))
    w = whole(store, cfg, clock)
    assert run_round([w], lambda: catalog).groups_poked == 1
    clock.advance(30)
    assert run_round([w], lambda: catalog, focus=set()).groups_poked == 0
    clock.advance(30)
    assert run_round([w], lambda: catalog, focus=set()).groups_poked == 1


def test_a_task_set_to_smart_running_by_hand_is_picked_up_by_the_next_reconciliation(cfg, clock) -> None:
    """Defect 2: a task that never started, set to smart_running by hand, reaches the index within the bound."""
    store, catalog = InMemoryStore(), DictCatalog()
    add(store, cfg, "other", named("w", "db.t/ds=other", poke_interval=3600))
    w = whole(store, cfg, clock)
    run_round([w], lambda: catalog)
    add(store, cfg, "by_hand", named("w", PARTITION, poke_interval=3600))
    store.set_state(TaskKey("by_hand", "w", DAY), State.SMART_RUNNING, now=clock())
    assert store.tasks[("by_hand", "w", DAY)].start_date == clock()  # a try by hand starts now
    catalog.land(PARTITION)
    rounds: list[Any] = []
    while state_of(store, "by_hand", "w") != State.SUCCESS:
        assert len(rounds) * cfg.poke_interval <= cfg.convergence_bound, "not picked up within the bound"
        clock.advance(cfg.poke_interval)
        rounds.append(run_round([w], lambda: catalog))
    assert sum(r.reconciled for r in rounds) == 1


def test_a_task_another_process_started_is_picked_up_by_the_next_reconciliation(cfg, clock) -> None:
    """Defect 5: an overlapping range (a pinned `worker --once`, ranges being reshaped) started the task."""
    store, catalog = InMemoryStore(), DictCatalog()
    add(store, cfg, "other", named("w", "db.t/ds=other", poke_interval=3600))
    mine, theirs = whole(store, cfg, clock), whole(store, cfg, clock)
    run_round([mine], lambda: catalog)
    add(store, cfg, "theirs", named("w", PARTITION, poke_interval=3600))
    clock.advance(1)
    run_round([theirs], lambda: catalog)  # started there, not landed yet; that process goes away
    catalog.land(PARTITION)
    clock.advance(cfg.get("smart_sensor", "reconcile_interval"))
    found = run_round([mine], lambda: catalog)
    assert found.reconciled == 1 and found.marked == {State.SUCCESS: 1}


def test_a_cohort_that_joins_during_a_poke_is_poked_on_its_own_schedule(cfg, clock) -> None:
    """Defect 6: the poke time is when the catalog was asked, so a task that joined while it answered is not put a
    whole poke_interval after an answer that predates it."""
    store, catalog = InMemoryStore(), DuringPoke()
    add(store, cfg, "first", named("w", PARTITION, poke_interval=60))
    w = whole(store, cfg, clock)

    def join_while_answering() -> None:
        clock.advance(5)
        add(store, cfg, "joined", named("w", PARTITION, poke_interval=60))
        run_round([w], lambda: catalog, focus=set())

    catalog.then = join_while_answering
    assert run_round([w], lambda: catalog).marked == {}
    catalog.land(PARTITION)
    clock.advance(1)
    assert run_round([w], lambda: catalog).marked == {State.SUCCESS: 2}


def test_a_heartbeat_during_a_rebuild_does_not_mark_it_built_under_the_new_epoch(cfg, clock) -> None:
    """Defect 8: the fence is read once per step; an index built under epoch 1 is rebuilt under epoch 2."""
    store = InMemoryStore()
    limit = cfg.shard_code_upper_limit
    store.set_lease(0, limit, "me", 1, clock() + timedelta(hours=1))
    w = whole(store, cfg, clock)
    w.fence = Fence(0, "me", 1)
    loads = store.load_cohorts

    def load_then_heartbeat(*args: Any) -> Any:
        rows = loads(*args)
        store.set_lease(0, limit, "me", 2, clock() + timedelta(hours=1))  # lost and claimed again meanwhile
        w.fence = Fence(0, "me", 2)
        return rows

    store.load_cohorts = load_then_heartbeat  # type: ignore[method-assign,assignment]  # the heartbeat lands mid-step
    assert run_round([w], DictCatalog).rebuilt == 1
    store.load_cohorts = loads  # type: ignore[method-assign]
    assert run_round([w], DictCatalog).rebuilt == 1, "the index read under epoch 1 was taken as built under 2"


def test_a_task_set_waiting_by_hand_in_the_instant_its_worker_started_it_is_not_taken_for_its_feeds(cfg, clock) -> None:
    """Found by the model test: set-state smart_running by hand on a task the worker started, with the same clock
    reading (start = updated_at, hostname = the worker): the reconciliation skips its own feed's starts, so a
    change by hand clears the hostname."""
    store, catalog = InMemoryStore(), DictCatalog()
    add(store, cfg, "d", named("w", PARTITION, poke_interval=1, timeout=3600))
    catalog.land(PARTITION)
    w = whole(store, cfg, clock)
    assert run_round([w], lambda: catalog).marked == {State.SUCCESS: 1}
    store.set_state(TaskKey("d", "w", DAY), State.SMART_RUNNING, now=clock())  # the same instant as its start
    clock.advance(cfg.get("smart_sensor", "reconcile_interval"))
    assert run_round([w], lambda: catalog).marked == {State.SUCCESS: 1}
