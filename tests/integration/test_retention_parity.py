"""Retention's deletes in memory (``adapters.memory_retention.MemoryExpiredRows``) against the SQL ones
(``adapters.sql.status_store.SqlExpiredRows``) on SQLite and PostgreSQL: a hypothesis state machine writes task
instances, Airflow keys, range rounds, workers, leases, watches and outbox rows of various ages to both (and moves
tasks by hand, as a user would), runs every ``ports.ExpiredRows`` operation on both (batches with and without
``dry_run``, paged by ``after`` or started over, cutoffs on a row's own time, whole passes of
``service.retention.prune``), and after every step compares what each answered, the statements each counted and
every row each holds."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any, cast

from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, rule
from sqlalchemy import Engine, insert, select, update

from smartsensor.adapters.memory_external import MemoryExternalTryStore
from smartsensor.adapters.memory_outbox import Landing, MemoryOutboxStore, Watch
from smartsensor.adapters.memory_retention import MemoryExpiredRows
from smartsensor.adapters.sql import tasks as task_sql
from smartsensor.adapters.sql.lease_store import SqlLeaseStore
from smartsensor.adapters.sql.retention import AW, EX, LO, SL, TI, WK, WR
from smartsensor.adapters.sql.round_store import SqlRoundStore
from smartsensor.adapters.sql.status_store import SqlExpiredRows
from smartsensor.config import Config
from smartsensor.domain.keys import ExternalKey, TaskKey
from smartsensor.domain.landings import BASELINE, DELIVERED, PENDING, REJECTED, SENDING
from smartsensor.domain.rows import ExternalRow, TaskRow
from smartsensor.domain.states import State
from smartsensor.domain.status_rows import Batch
from smartsensor.service.retention import prune
from tests.support.common import T0
from tests.support.model import StoreModel, run_model

NOW = T0 + timedelta(days=60)
MAX_AGE = timedelta(days=30)
TIMES = [NOW - timedelta(days=d) for d in (0, 10, 30, 31, 45)]  # NOW - 30 days is the pass's cutoff: a boundary
MAYBE_TIMES = st.one_of(st.none(), st.sampled_from(TIMES))
CUTOFFS = [*TIMES, NOW + timedelta(seconds=1)]  # the last: after every row
SIZES = st.integers(1, 3)
STATES = [
    State.SUCCESS,
    State.FAILED,
    State.SKIPPED,
    State.SMART_PENDING,
    State.SMART_RUNNING,
    State.UP_FOR_RETRY,
    State.RUNNING,
]
DAGS, TASKS = ["d0", "d1"], ["t0", "t1"]
URIS = ["hive://m:1/db/a", "hive://m:1/db/b"]
LANDING_STATES = [BASELINE, DELIVERED, REJECTED, PENDING, SENDING]
WORKERS = ["w0", "w1", "w2"]
TASK = st.tuples(
    st.sampled_from(DAGS),
    st.sampled_from(TASKS),
    st.sampled_from(TIMES),
    st.sampled_from(STATES),
    MAYBE_TIMES,
    MAYBE_TIMES,
)  # dag_id, task_id, execution_date, state, end_date, updated_at
KEY = st.tuples(
    st.sampled_from(DAGS),
    st.sampled_from(["r0", "r1"]),
    st.sampled_from([-1, 0]),
    st.sampled_from(["", "b"]),
    st.sampled_from(TASKS),
    st.sampled_from(TIMES),
    st.sampled_from(TIMES),
)  # dag_id, run_id, map_index, instance; the task instance's task_id and execution_date; registered_at
WATCH = st.tuples(st.sampled_from(URIS), st.sampled_from(TIMES), st.booleans())  # uri, seen_at, baselined


def task(key: TaskKey, state: str, end: datetime | None, updated: datetime | None) -> TaskRow:
    return TaskRow(*key, state, 1, 0, None, end, updated, "Op", "sensors.Op", None, None, None, '{"t": 1}', "{}", 7, 7)


def sql_rows(engine: Engine) -> dict[str, list[Any]]:
    """Every row of the tables retention deletes from (and the leases that keep a worker), in key order."""
    with engine.connect() as conn:

        def rows(table: Any, *order: Any) -> list[dict[str, Any]]:
            return [dict(r._mapping) for r in conn.execute(select(table).order_by(*order))]

        return {
            "tasks": task_sql.list_tasks(conn),
            "keys": sorted(ExternalRow._make(r) for r in conn.execute(select(EX))),
            "watches": rows(AW, AW.c.uri),
            "outbox": rows(LO, LO.c.id),
            "rounds": rows(WR, WR.c.range_rounds_id),
            "workers": rows(WK, WK.c.worker_id),
            "leases": rows(SL, SL.c.shard_min),
        }


def memory_rows(rows: MemoryExpiredRows) -> dict[str, list[Any]]:
    store, outbox = rows.store, rows.outbox
    return {
        "tasks": [store.tasks[k] for k in sorted(store.tasks)],
        "keys": sorted(rows.external.mappings.values()),
        "watches": [dataclasses.asdict(w) for _, w in sorted(outbox.watches.items())],
        "outbox": [dataclasses.asdict(r) for _, r in sorted(outbox.outbox.items())],
        "rounds": [store.rounds[k] for k in sorted(store.rounds)],
        "workers": [store.workers[k] for k in sorted(store.workers)],
        "leases": [dataclasses.asdict(lease) for lease in store.load_leases()],
    }


class ParityModel(StoreModel):
    """Both stores over the same rows, run ``on`` the SQL engine and config."""

    emptied = (EX, TI, LO, AW, WR, WK, SL)

    def __init__(self) -> None:
        super().__init__()
        self.sql = SqlExpiredRows(self.engine)
        self.memory = MemoryExpiredRows(MemoryExternalTryStore(), MemoryOutboxStore())
        self.store = self.memory.store
        self.after: dict[str, Any] = {"prune_keys_batch": None, "prune_tasks_batch": None}
        self.next_id = 1

    def both(self, operation: str, *args: Any) -> Any:
        """``operation`` on both: the same answer and the same statements sent, the answer returned."""
        answers = []
        for rows in (self.sql, self.memory):
            sent = rows.statements()
            answers.append((getattr(rows, operation)(*args), rows.statements() - sent))
        assert answers[0] == answers[1], (operation, args, answers)
        return answers[0][0]

    def write(self, table: Any, row: dict[str, Any]) -> None:
        with self.engine.begin() as conn:
            conn.execute(insert(table).values(**row))

    @initialize(
        tasks=st.lists(TASK, max_size=6),
        keys=st.lists(KEY, max_size=4),
        watches=st.lists(WATCH, max_size=2),
        landings=st.lists(st.tuples(st.sampled_from(URIS), st.sampled_from(LANDING_STATES), st.sampled_from(TIMES))),
    )
    def some_rows(
        self,
        tasks: list[tuple[Any, ...]],
        keys: list[tuple[Any, ...]],
        watches: list[tuple[str, datetime, bool]],
        landings: list[tuple[str, str, datetime]],
    ) -> None:
        """Rows of each kind to start with, so that retention finds some at once."""
        self.add_tasks(tasks)
        self.add_keys(keys)
        self.watches(watches)
        for uri, state, landed in landings:
            self.landings(uri, [state], landed)

    # -- rows of various ages ------------------------------------------------------------------------------------

    @rule(tasks=st.lists(TASK, min_size=1, max_size=3))
    def add_tasks(self, tasks: list[tuple[Any, ...]]) -> None:
        """Task instances (dag_id, task_id, execution_date, state, end_date, updated_at), each key once."""
        for dag, task_id, when, state, end, updated in tasks:
            key = TaskKey(dag, task_id, when)
            if key not in self.store.tasks:
                row = task(key, state, end, updated)
                self.write(TI, row.columns())
                self.store.add_task(row)

    @rule(data=st.data(), state=st.sampled_from(STATES), when=st.sampled_from(TIMES))
    def user_sets(self, data: st.DataObject, state: str, when: datetime) -> None:
        """A user's ``set-state``: an ended task sent back to wait, or a waiting one ended."""
        if self.store.tasks:
            key = data.draw(st.sampled_from(sorted(self.store.tasks)))
            with self.engine.begin() as conn:
                task_sql.set_state(conn, key, state, now=when)
            self.store.set_state(key, state, now=when)

    @rule(keys=st.lists(KEY, min_size=1, max_size=3))
    def add_keys(self, keys: list[tuple[Any, ...]]) -> None:
        """Airflow keys (dag_id, run_id, map_index, instance) mapped to a task instance (task_id, execution_date)
        that may not be there, or be gone later, registered at a time."""
        for dag, run, map_index, instance, task_id, ti_when, registered in keys:
            key = ExternalKey(dag, "wait", run, map_index, instance)
            if key not in self.memory.external.mappings:
                row = ExternalRow(dag, "wait", run, map_index, 1, None, task_id, ti_when, registered, instance)
                self.write(EX, row._asdict())
                self.memory.external.mappings[key] = row

    @rule(
        rounds=st.lists(
            st.tuples(st.sampled_from(["r0", "r1", "r2"]), st.sampled_from([0, 5]), MAYBE_TIMES), min_size=1, max_size=3
        )
    )
    def record_rounds(self, rounds: list[tuple[str, int, datetime | None]]) -> None:
        """Range rounds' last rounds (None: a row that never had one)."""
        for rounds_id, shard_min, when in rounds:
            for store in (SqlRoundStore(self.engine), self.store):
                store.record_round(rounds_id, "h", 1, shard_min, shard_min + 5, when, 0.5, "{}")  # type: ignore[arg-type]

    @rule(
        workers=st.lists(st.sampled_from(WORKERS), min_size=1, max_size=3, unique=True),
        started=st.sampled_from(TIMES),
        beat=MAYBE_TIMES,
        holds=st.sampled_from([None, 0, 5]),
    )
    def heartbeat(self, workers: list[str], started: datetime, beat: datetime | None, holds: int | None) -> None:
        """Workers' heartbeats (None: rows of workers that never beat), the first holding a lease or not."""
        for worker in workers:
            if beat is None:
                if worker not in self.store.workers:
                    row = {"worker_id": worker, "hostname": "h", "pid": 1, "started_at": started, "heartbeat_at": None}
                    row.update(checks_failing_since=None, checks_answered_at=None)
                    self.write(WK, row)
                    self.store.workers[worker] = row
                continue
            with SqlLeaseStore(self.engine).transaction() as ops:
                ops.upsert_worker(worker, "h", 1, started, beat)
            with self.store.transaction() as ops:
                ops.upsert_worker(worker, "h", 1, started, beat)
        if holds is not None:
            self.lease(holds, workers[0])

    @rule(shard_min=st.sampled_from([0, 5]))
    def lease_lapses(self, shard_min: int) -> None:
        """A lease given up: its worker may go."""
        self.lease(shard_min, None)

    def lease(self, shard_min: int, owner: str | None) -> None:
        """A lease held by ``owner``, or free."""
        if shard_min in self.store.leases:
            with self.engine.begin() as conn:
                conn.execute(update(SL).where(SL.c.shard_min == shard_min).values(owner=owner))
        else:
            self.write(SL, {"shard_min": shard_min, "shard_max": shard_min + 5, "owner": owner, "epoch": 1})
        self.store.set_lease(shard_min, shard_min + 5, owner, 1, None)

    @rule(watches=st.lists(WATCH, min_size=1, max_size=2))
    def watches(self, watches: list[tuple[str, datetime, bool]]) -> None:
        for uri, seen, baselined in watches:
            self.watch(uri, seen, baselined)

    def watch(self, uri: str, seen: datetime, baselined: bool) -> None:
        """A table watched, or listed again (seen by Airflow at ``seen``), with its baseline taken or not."""
        baseline = TIMES[-1] if baselined else None
        old = self.memory.outbox.watches.get(uri)
        if old is not None:
            with self.engine.begin() as conn:
                conn.execute(update(AW).where(AW.c.uri == uri).values(seen_at=seen, baselined_at=baseline))
            self.memory.outbox.watches[uri] = dataclasses.replace(old, seen_at=seen, baselined_at=baseline)
            return
        row = Watch(uri, 1, "db", uri[-1], 3, TIMES[-1], seen, baseline)
        self.write(AW, dataclasses.asdict(row))
        self.memory.outbox.watches[uri] = row

    @rule(
        uri=st.sampled_from(URIS),
        states=st.lists(st.sampled_from(LANDING_STATES), min_size=1, max_size=4),
        landed=st.sampled_from(TIMES),
    )
    def landings(self, uri: str, states: list[str], landed: datetime) -> None:
        """Outbox rows of a table (watched or not), settled or not."""
        for state in states:
            row = Landing(self.next_id, uri, f"ds={self.next_id}", f"k{self.next_id}", 3, state, landed, landed)
            self.write(LO, dataclasses.asdict(row))
            self.memory.outbox.outbox[row.id] = row
            self.next_id += 1

    # -- retention -----------------------------------------------------------------------------------------------

    @rule(
        table=st.sampled_from(["prune_keys_batch", "prune_tasks_batch"]),
        restart=st.booleans(),
        size=SIZES,
        cutoff=st.sampled_from(CUTOFFS),
        dry_run=st.booleans(),
    )
    def prune_batch(self, table: str, restart: bool, size: int, cutoff: datetime, dry_run: bool) -> None:
        """One window of keys or of task instances: the next one of the pass, or the first again."""
        after = None if restart else self.after[table]
        self.after[table] = self.both(table, after, size, cutoff, dry_run).after

    @rule(
        operation=st.sampled_from(["prune_rounds", "prune_workers"]),
        cutoff=st.sampled_from(CUTOFFS),
        size=SIZES,
        dry_run=st.booleans(),
    )
    def prune_limited(self, operation: str, cutoff: datetime, size: int, dry_run: bool) -> None:
        self.both(operation, cutoff, size, dry_run)

    @rule(now=st.sampled_from(TIMES), days=st.sampled_from([0, 30]))
    def watch_cutoff(self, now: datetime, days: int) -> None:
        self.both("watch_cutoff", now, timedelta(days=days))

    @rule(cutoff=st.sampled_from(CUTOFFS), after=st.sampled_from(["", *URIS]), size=SIZES)
    def read_unwatched(self, cutoff: datetime, after: str, size: int) -> None:
        self.both("read_unwatched", cutoff, after, size)

    @rule(uris=st.lists(st.sampled_from(URIS), max_size=3))
    def count_unwatched_landings(self, uris: list[str]) -> None:
        self.both("count_unwatched_landings", uris)

    @rule(uri=st.sampled_from(URIS), cutoff=st.sampled_from(CUTOFFS), size=SIZES)
    def forget_unwatched(self, uri: str, cutoff: datetime, size: int) -> None:
        self.both("forget_unwatched_batch", uri, cutoff, size)

    @rule(size=SIZES, dry_run=st.booleans())
    def prune_pass(self, size: int, dry_run: bool) -> None:
        """A whole pass of ``service.retention.prune``: the same rows and statements per table."""
        reports = [prune(rows, MAX_AGE, size, dry_run=dry_run, now=NOW) for rows in (self.sql, self.memory)]
        shown = [{t: (r.rows, r.statements) for t, r in report.tables.items()} for report in reports]
        assert shown[0] == shown[1]

    @invariant()
    def both_hold_the_same_rows(self) -> None:
        type(self).steps += 1
        assert sql_rows(self.engine) == memory_rows(self.memory)


def test_the_memory_retention_keeps_step_with_the_sql_one(cfg: Config, engine: Engine) -> None:
    examples = 20 if engine.dialect.name == "sqlite" else 8
    run_model(ParityModel.on(engine, cfg), examples=examples, steps=30)


def test_the_memory_retention_answers_a_script_as_the_sql_one(cfg: Config, engine: Engine) -> None:
    """The rules a run of the machine may meet rarely, with what both must answer."""
    both = cast(ParityModel, ParityModel.on(engine, cfg)())  # on(): the same class, bound
    old, cutoff = TIMES[4], NOW - MAX_AGE
    both.watch(URIS[0], old, True)
    both.landings(URIS[0], [DELIVERED, REJECTED, PENDING], old)
    assert both.both("forget_unwatched_batch", URIS[0], cutoff, 1) == (1, False)  # the batch's size: the watch stays
    assert both.memory.outbox.watches[URIS[0]].baselined_at is None  # without its baseline
    assert both.both("forget_unwatched_batch", URIS[0], cutoff, 5) == (1, False)  # an undelivered row keeps it
    assert both.both("read_unwatched", cutoff, "", 5) == [URIS[0]]
    both.heartbeat(WORKERS, old, old, holds=0)  # w0 holds a lease: it stays
    assert both.both("prune_workers", cutoff, 1, True) == 2  # a dry run counts them all
    assert both.both("prune_workers", cutoff, 1, False) == 1
    both.record_rounds([("r0", 0, old), ("r1", 5, old), ("r2", 0, NOW)])
    assert both.both("prune_rounds", cutoff, 1, True) == 2
    assert both.both("prune_rounds", cutoff, 1, False) == 1
    both.add_tasks(
        [("d0", t, old, State.SUCCESS, old, None) for t in TASKS] + [("d1", "t0", old, State.RUNNING, old, None)]
    )
    first = both.both("prune_tasks_batch", None, 2, cutoff, True)
    assert first == Batch(2, ("d0", "t1", old))  # a dry run: nothing deleted
    assert both.both("prune_tasks_batch", first.after, 2, cutoff, False) == Batch(0, None)  # running: kept
    assert both.both("prune_tasks_batch", None, 2, cutoff, False) == Batch(2, ("d0", "t1", old))
    both.both_hold_the_same_rows()
