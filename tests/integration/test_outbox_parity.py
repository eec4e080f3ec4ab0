"""The landings outbox in memory (``adapters.memory_outbox.MemoryOutboxStore``) against the SQL one
(``adapters.sql.landings.SqlOutboxStore``) on SQLite and PostgreSQL: a stateful test applies every operation of
``ports.OutboxStore`` to both, in any order (watches refreshed, landings and re-creations enqueued, claims by two
workers, every end under a claim that holds or lapsed, rows handed back, settled rows forgotten, time passing), and
after each step compares what each answered and every row each holds."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from sqlalchemy import Engine, select, text

from smartsensor.adapters.memory_outbox import MemoryOutboxStore
from smartsensor.adapters.sql.engine import init_db, make_engine
from smartsensor.adapters.sql.landings import AW, LO, SqlOutboxStore
from smartsensor.domain.landings import partition_key
from tests.support.catalog_doubles import Clock
from tests.support.common import T0
from tests.support.model import run_model
from tests.support.pg import needs_test_pg, pg_engine

TABLES = {"hive://m:1/db/a": ("db", "a", 3), "hive://m:1/db/b": ("db", "b", 7)}  # uri → db, table, shardcode
NAMES = [f"ds={d}" for d in range(4)]
EVERYTHING = [(0, 10)]
WORKERS = ("w1", "w2")


def rows_of(engine: Engine) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The watches and the outbox rows the SQL store holds, as the memory store's fields."""
    with engine.connect() as conn:
        watches = [dict(r._mapping) for r in conn.execute(select(AW).order_by(AW.c.uri))]
        outbox = [dict(r._mapping) for r in conn.execute(select(LO).order_by(LO.c.id))]
    return watches, outbox


def memory_rows(store: MemoryOutboxStore) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    watches = [dataclasses.asdict(w) for _, w in sorted(store.watches.items())]
    outbox = [dataclasses.asdict(r) for _, r in sorted(store.outbox.items())]
    return watches, outbox


class ParityModel(RuleBasedStateMachine):
    """The same operations on both stores (``machine_for`` binds the SQL engine)."""

    engine: Engine
    steps = 0

    def __init__(self) -> None:
        super().__init__()
        with self.engine.begin() as conn:  # empty, its ids from 1 again, as the memory store's
            conn.execute(LO.delete())
            conn.execute(AW.delete())
            if self.engine.dialect.name == "postgresql":
                conn.execute(text("SELECT setval(pg_get_serial_sequence('landing_outbox', 'id'), 1, false)"))
            elif conn.execute(text("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'")).first():
                conn.execute(text("DELETE FROM sqlite_sequence WHERE name = 'landing_outbox'"))
        self.sql = SqlOutboxStore(self.engine)
        self.memory = MemoryOutboxStore()
        self.clock = Clock(T0)
        self.ids = {(uri, name): i + 10 * n for n, uri in enumerate(TABLES) for i, name in enumerate(NAMES)}
        self.next_id = 100
        self.claims: list[tuple[int, str]] = []  # (row id, token) of every claim made, lapsed or not
        self.tokens = 0

    def both(self, operation: str, *args: Any, key: Any = None) -> Any:
        """``operation`` on both stores: the same answer (compared through ``key``), which it returns."""
        ours = getattr(self.sql, operation)(*args)
        theirs = getattr(self.memory, operation)(*args)
        shown = key or (lambda value: value)
        assert shown(ours) == shown(theirs), (operation, args, ours, theirs)
        return ours

    def watch(self, uri: str) -> Any:
        found = [w for w in self.both("read_watches", EVERYTHING, T0 - timedelta(days=1)) if w.uri == uri]
        return found[0] if found else None

    @rule(uris=st.sets(st.sampled_from(sorted(TABLES)), min_size=1), asset=st.integers(1, 3))
    def record_watches(self, uris: set[str], asset: int) -> None:
        now = self.clock()
        rows = [
            {
                "uri": uri,
                "asset_id": asset,
                "db_name": TABLES[uri][0],
                "table_name": TABLES[uri][1],
                "shardcode": TABLES[uri][2],
                "watched_since": now,
                "seen_at": now,
            }
            for uri in sorted(uris)
        ]
        self.both("record_watches", rows, now)

    @rule(uri=st.sampled_from(sorted(TABLES)), names=st.sets(st.sampled_from(NAMES)), existing=st.booleans())
    def enqueue_landings(self, uri: str, names: set[str], existing: bool) -> None:
        watch = self.watch(uri)
        if watch is None:
            return
        known = self.both("read_outbox_names", uri)
        keyed = [(n, partition_key(n), self.ids[(uri, n)]) for n in sorted(names)]
        new = [k for k in keyed if k[0] not in known]
        self.both("enqueue_landings", watch, new, lambda: list(keyed), self.clock(), existing)

    @rule(uri=st.sampled_from(sorted(TABLES)), names=st.sets(st.sampled_from(NAMES), min_size=1), down=st.booleans())
    def enqueue_recreated(self, uri: str, names: set[str], down: bool) -> None:
        """Partitions dropped and added again (their id grows), or read from a replica that lags (``down``)."""
        watch = self.watch(uri)
        if watch is None:
            return
        for name in names:
            if down:
                self.ids[(uri, name)] -= 1
            else:
                self.ids[(uri, name)] = self.next_id
                self.next_id += 1
        listed = {n: (partition_key(n), self.ids[(uri, n)]) for n in sorted(names)}
        self.both("enqueue_recreated", watch, listed, self.clock())

    @rule(
        uri=st.sampled_from(sorted(TABLES)), gone=st.sets(st.sampled_from(NAMES)), back=st.sets(st.sampled_from(NAMES))
    )
    def mark_missing(self, uri: str, gone: set[str], back: set[str]) -> None:
        """A listing lacks ``gone`` and has ``back`` again; then since when each name is missing, as either store
        tells."""
        self.both("mark_missing", uri, sorted(gone), sorted(back - gone), self.clock())
        self.both("read_missing", uri)

    @rule(uri=st.sampled_from(sorted(TABLES)), names=st.sets(st.sampled_from(NAMES)), age=st.sampled_from([0, 5, 60]))
    def forget_dropped(self, uri: str, names: set[str], age: int) -> None:
        cutoff = self.clock() - timedelta(seconds=age)
        self.both("forget_dropped", uri, sorted(names), cutoff, key=sorted)

    @rule(worker=st.sampled_from(WORKERS), limit=st.integers(0, 3), seconds=st.sampled_from([5, 30]))
    def claim(self, worker: str, limit: int, seconds: int) -> None:
        self.tokens += 1
        token = f"{worker}-{self.tokens}"
        now = self.clock()
        claimed = self.both("claim_landings", EVERYTHING, worker, token, now, now + timedelta(seconds=seconds), limit)
        self.claims += [(c.id, token) for c in claimed]

    def a_claim(self, data: st.DataObject) -> tuple[int, str]:
        return data.draw(st.sampled_from(self.claims))

    @precondition(lambda self: bool(self.claims))
    @rule(data=st.data(), ahead=st.sampled_from([10, 40]))
    def begin_post(self, data: st.DataObject, ahead: int) -> None:
        row_id, token = self.a_claim(data)
        self.both("begin_post", row_id, token, self.clock(), self.clock() + timedelta(seconds=ahead))

    @precondition(lambda self: bool(self.claims))
    @rule(data=st.data(), event=st.integers(1, 5), found=st.sampled_from([0, 1, 2]))
    def end_delivered_or_found(self, data: st.DataObject, event: int, found: int) -> None:
        """A 2xx read (``found`` 0), or Airflow found to hold one or two events of the row."""
        row_id, token = self.a_claim(data)
        if found:
            self.both("end_found", row_id, token, self.clock(), event, found)
        else:
            self.both("end_delivered", row_id, token, self.clock(), event)

    @precondition(lambda self: bool(self.claims))
    @rule(data=st.data(), unknown=st.booleans(), answered=st.booleans(), backoff=st.sampled_from([0, 3]))
    def end_failed_or_unanswered(self, data: st.DataObject, unknown: bool, answered: bool, backoff: int) -> None:
        row_id, token = self.a_claim(data)
        now = self.clock()
        later = now + timedelta(seconds=backoff)
        if answered:
            self.both("end_failed", row_id, token, now, later, "HTTP 503", unknown)
        else:
            self.both("end_unanswered", row_id, token, now, later, "HTTP 500")

    @precondition(lambda self: bool(self.claims))
    @rule(data=st.data())
    def end_rejected(self, data: st.DataObject) -> None:
        row_id, token = self.a_claim(data)
        self.both("end_rejected", row_id, token, self.clock(), "HTTP 422")

    @precondition(lambda self: bool(self.claims))
    @rule(data=st.data())
    def release_unposted(self, data: st.DataObject) -> None:
        row_id, token = self.a_claim(data)
        self.both("release_unposted", [row_id], token, self.clock())

    @rule(seconds=st.sampled_from([1, 10, 31]))
    def time_passes(self, seconds: int) -> None:
        self.clock.advance(seconds)

    @invariant()
    def both_hold_the_same_rows(self) -> None:
        type(self).steps += 1
        assert self.both("newest_watch_seen") == self.memory.newest_watch_seen()
        for uri in TABLES:
            self.both("read_outbox_names", uri)
        assert rows_of(self.engine) == memory_rows(self.memory)


def machine_for(engine: Engine) -> type[ParityModel]:
    return type("Parity", (ParityModel,), {"engine": engine})


def test_the_memory_outbox_answers_as_sqlite(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'outbox.db'}")
    init_db(engine)
    try:
        run_model(machine_for(engine), examples=40, steps=40)
    finally:
        engine.dispose()


@needs_test_pg
def test_the_memory_outbox_answers_as_postgresql(tmp_path: Path) -> None:
    with pg_engine() as (engine, _):
        init_db(engine)
        run_model(machine_for(engine), examples=15, steps=40)


@pytest.fixture(autouse=True)
def _no_steps_carried_over() -> None:
    ParityModel.steps = 0


@pytest.mark.parametrize("store", ["sql", "memory"])
def test_a_second_unknown_outcome_keeps_when_the_first_became_unknown(tmp_path: Path, store: str) -> None:
    """Two timeouts in a row: the row is unknown since the first (the look-up must reach back to it)."""
    engine = make_engine(f"sqlite:///{tmp_path / 'outbox.db'}")
    init_db(engine)
    outbox: Any = SqlOutboxStore(engine) if store == "sql" else MemoryOutboxStore()
    uri = sorted(TABLES)[0]
    watch_row = {"uri": uri, "asset_id": 1, "db_name": "db", "table_name": "a", "shardcode": 3}
    outbox.record_watches([{**watch_row, "watched_since": T0, "seen_at": T0}], T0)
    watch = outbox.read_watches(EVERYTHING, T0)[0]
    outbox.enqueue_landings(watch, [], lambda: [("ds=0", "0", 1)], T0, True)
    first, second = T0 + timedelta(seconds=1), T0 + timedelta(seconds=20)
    for token, at in (("t1", first), ("t2", second)):
        (row,) = outbox.claim_landings(EVERYTHING, "w1", token, at, at + timedelta(seconds=5), 1)
        assert outbox.end_failed(row.id, token, at, at, "ReadTimeout", True)
    (row,) = outbox.claim_landings(EVERYTHING, "w1", "t3", second, second + timedelta(seconds=5), 1)
    assert (row.unknown_outcomes, row.unknown_since) == (2, first)
    engine.dispose()
