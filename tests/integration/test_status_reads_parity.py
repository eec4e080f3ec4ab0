"""What `status` reads in memory (``adapters.memory_status.MemoryStatusReads``, over the rows of the round's and the
outbox's memory twins) against the SQL reads (``adapters.sql.status_store.SqlStatusReads``) on SQLite and
PostgreSQL: hypothesis writes the same generated task instances (every state, checks that landed or collide, starts
and changes of various ages, exec settings with a time limit, the defaults, none or unreadable, shardcodes in, out
of or without a range), range rounds, leases, workers, watches and outbox rows to both, then compares
``read_status`` (for generated ranges and cutoffs), ``read_stuck`` (and what it asked ``past_limits``),
``read_outbox_summary`` and the schema's revision and problem."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

from hypothesis import given, settings, strategies as st
from sqlalchemy import Engine, delete, insert

from smartsensor.adapters.memory import InMemoryStore
from smartsensor.adapters.memory_outbox import Landing, MemoryOutboxStore, Watch
from smartsensor.adapters.memory_status import MemoryStatusReads
from smartsensor.adapters.sql.engine import known_revisions
from smartsensor.adapters.sql.retention import AW, LO, SL, TI, WK, WR
from smartsensor.adapters.sql.status_store import SqlStatusReads
from smartsensor.domain.landings import BASELINE, DELIVERED, PENDING, REJECTED, SENDING
from smartsensor.domain.leases import LeaseRow
from smartsensor.domain.rows import TaskRow
from smartsensor.domain.states import State
from smartsensor.domain.status_rows import Cutoffs, StatusQuery
from smartsensor.service.status import _StuckRule
from tests.support.common import SHARD_LIMIT, T0

NOW = T0 + timedelta(days=10)
TIMES = [NOW - timedelta(minutes=m) for m in (0, 2, 30, 90)] + [NOW - timedelta(days=d) for d in (2, 8)]
MAYBE = st.sampled_from([None, *TIMES])
EXECS = ['{"timeout": 60}', '{"timeout": 86400}', "{}", None, "not json"]
CHECKS = [(1, "sensors.A", '{"t": 1}'), (1, "sensors.B", '{"t": 1}'), (2, "sensors.A", '{"t": 2}')]  # 1: a collision
STATES = [  # the waiting ones and success (a landing) twice as likely
    State.SMART_PENDING,
    State.SMART_RUNNING,
    State.SMART_RUNNING,
    State.SUCCESS,
    State.SUCCESS,
    State.FAILED,
    State.UP_FOR_RETRY,
    State.RUNNING,
    State.SCHEDULED,
]
TASK = st.tuples(
    st.sampled_from(["d0", "d1"]),
    st.sampled_from(["t0", "t1", "t2"]),
    st.sampled_from(TIMES),
    st.sampled_from(STATES),
    st.sampled_from(CHECKS),
    st.sampled_from(EXECS),
    st.tuples(MAYBE, MAYBE, MAYBE),  # start, end, updated
    st.sampled_from([0, 3, 9, 10, -1]),  # shardcodes: 10 and -1 are stranded below 10
)
ROUND = st.tuples(st.sampled_from(["r0", "r1", "r2"]), st.sampled_from([0, 5]), MAYBE)
WORKER = st.tuples(st.sampled_from(["w0", "w1"]), st.integers(0, 5), MAYBE)
LANDING = st.tuples(
    st.sampled_from(["hive://m:1/db/a", "hive://m:1/db/b"]),
    st.sampled_from([BASELINE, DELIVERED, REJECTED, PENDING, SENDING]),
    st.sampled_from(TIMES),
    st.integers(0, 3),  # posts
    st.integers(0, 2),  # unknown outcomes
    MAYBE,  # unknown since
)
RANGES = st.lists(st.tuples(st.sampled_from([0, 3, 5]), st.sampled_from([5, 10])), max_size=3)


def task(spec: tuple[Any, ...]) -> TaskRow:
    dag, task_id, when, state, (hashcode, classpath, attr), exec_dict, (start, end, updated), shard = spec
    return TaskRow(
        dag,
        task_id,
        when,
        state,
        1,
        0,
        start,
        end,
        updated,
        "Op",
        classpath,
        None,
        "h",
        None,
        attr,
        exec_dict,
        hashcode,
        shard,
    )


def landing(i: int, spec: tuple[Any, ...]) -> Landing:
    uri, state, landed, posts, unknown, since = spec
    return Landing(
        i, uri, f"ds={i}", f"k{i}", 3, state, landed, landed, posts=posts, unknown_outcomes=unknown, unknown_since=since
    )


class Stores:
    """The same generated rows in the SQL tables and in the memory twins."""

    def __init__(self, engine: Engine, tasks: list[Any], rounds: list[Any], workers: list[Any], lands: list[Any]):
        self.store, self.outbox = InMemoryStore(), MemoryOutboxStore()
        for spec in tasks:
            row = task(spec)
            self.store.tasks.setdefault(row.key, row)
        for rounds_id, shard_min, when in rounds:
            self.store.record_round(rounds_id, "h", 1, shard_min, shard_min + 5, when, 0.5, "{}")
        for name, started, beat in workers:
            start = NOW - timedelta(hours=started)  # distinct starts: `status` lists workers by start
            self.store.workers[name] = {"worker_id": name, "hostname": "h", "pid": 1, "started_at": start}
            self.store.workers[name].update(heartbeat_at=beat, checks_failing_since=None, checks_answered_at=None)
        self.store.leases[0] = LeaseRow(0, 5, workers[0][0] if workers else None, 2, TIMES[0])
        self.store.leases[5] = LeaseRow(5, 10, None, 0, None)
        for i, spec in enumerate(lands, 1):
            self.outbox.outbox[i] = landing(i, spec)
        for uri in {r.uri for r in self.outbox.outbox.values()}:
            self.outbox.watches[uri] = Watch(uri, 1, "db", uri[-1], 3, TIMES[-1], TIMES[0])
        with engine.begin() as conn:
            for table in (TI, WR, WK, SL, LO, AW):
                conn.execute(delete(table))
            self._insert(conn, TI, [r.columns() for r in self.store.tasks.values()])
            self._insert(conn, WR, list(self.store.rounds.values()))
            self._insert(conn, WK, list(self.store.workers.values()))
            self._insert(conn, SL, [dataclasses.asdict(r) for r in self.store.leases.values()])
            self._insert(conn, LO, [dataclasses.asdict(r) for r in self.outbox.outbox.values()])
            self._insert(conn, AW, [dataclasses.asdict(w) for w in self.outbox.watches.values()])

    @staticmethod
    def _insert(conn: Any, table: Any, rows: list[dict[str, Any]]) -> None:
        if rows:
            conn.execute(insert(table), rows)


class AskedLimits:
    """``collect_stuck``'s ``past_limits``, keeping what each store asked it (exec_dicts in any order: the rule is
    given them sorted, so that a tie between two goes the same way for both)."""

    def __init__(self, bound: float) -> None:
        self.rule = _StuckRule(bound, NOW)
        self.asked: list[list[tuple[str | None, datetime]]] = []

    def __call__(self, starts: list[tuple[str | None, datetime]]) -> tuple[Cutoffs, tuple[str | None, datetime] | None]:
        ordered = sorted(starts, key=lambda s: (s[0] is not None, s[0] or ""))
        self.asked.append(ordered)
        return self.rule.past_limits(ordered)


def status_parity(engine: Engine, data: tuple[Any, ...]) -> MemoryStatusReads:
    """The same rows in both: the same reads. The memory reads, for a test to look further."""
    tasks, rounds, workers, lands, ranges, landed_before, zombie_cutoff, bound = data
    stores = Stores(engine, tasks, rounds, workers, lands)
    sql = SqlStatusReads(engine)
    memory = MemoryStatusReads(stores.store, stores.outbox, known_revisions(), sql.schema_revision())
    limits = AskedLimits(bound)
    query = StatusQuery(landed_before, limits, ranges, zombie_cutoff, 10)
    ours, theirs = sql.read_status(query), memory.read_status(query)
    assert limits.asked[0] == limits.asked[1]
    assert sorted(ours.load_zombies) == sorted(theirs.load_zombies)  # in no order
    assert ours._replace(load_zombies=[]) == theirs._replace(load_zombies=[])
    assert sql.read_stuck(landed_before, limits) == memory.read_stuck(landed_before, limits)
    assert sql.read_outbox_summary(SHARD_LIMIT) == memory.read_outbox_summary(SHARD_LIMIT)
    for revision in (memory.schema_revision(), None, known_revisions()[-1], "f" * 12):
        assert sql.schema_problem(revision) == memory.schema_problem(revision)
    return memory


DATA = st.tuples(
    st.lists(TASK, min_size=6, max_size=20),
    st.lists(ROUND, max_size=3),
    st.lists(WORKER, max_size=2, unique_by=lambda w: w[0]),
    st.lists(LANDING, max_size=6),
    RANGES,
    st.sampled_from(TIMES),
    st.sampled_from(TIMES),
    st.sampled_from([0.0, 600.0]),
)


def test_the_memory_status_reads_as_the_sql_one(engine: Engine) -> None:
    @settings(max_examples=60 if engine.dialect.name == "sqlite" else 30, deadline=None, derandomize=True)
    @given(DATA)
    def check(data: tuple[Any, ...]) -> None:
        status_parity(engine, data)

    check()


def test_a_stuck_task_and_an_unknown_outcome_are_read_alike(engine: Engine) -> None:
    """A fixed case the generated ones may miss: a task waiting after its check landed and past its time limit, a
    stranded one, and an outbox row of unknown outcome."""
    landed = ("d0", "t0", TIMES[3], State.SUCCESS, CHECKS[0], "{}", (TIMES[4], TIMES[3], None), 3)
    waits = ("d1", "t0", TIMES[4], State.SMART_RUNNING, CHECKS[0], '{"timeout": 60}', (TIMES[4], None, None), 3)
    stranded = ("d1", "t1", TIMES[4], State.SMART_PENDING, CHECKS[2], None, (None, None, TIMES[5]), 10)
    lands = [("hive://m:1/db/a", SENDING, TIMES[2], 2, 1, TIMES[1])]
    data: tuple[Any, ...] = ([landed, waits, stranded], [], [("w0", 1, TIMES[0])], lands, [(0, 5)], NOW, NOW, 0.0)
    memory = status_parity(engine, data)
    rows = memory.read_status(StatusQuery(NOW, AskedLimits(0.0), [(0, 5)], NOW, 10))
    assert rows.stuck.after_landing == (1, ("d1", "t0", TIMES[4], TIMES[3]))
    assert rows.stuck.past_time_limit == (1, ("d1", "t0", TIMES[4], TIMES[4]))
    assert rows.stranded_count == 1 and rows.waiting_by_range.per_range == {0: (1, 1)}
    assert memory.read_outbox_summary(SHARD_LIMIT).unresolved == 1
