"""The metastore-database backend following the metastore's PARTITIONS by id (``[catalog] metastore_db_feed``), on
a Hive-shaped database on the test PostgreSQL and MariaDB servers: a partition is looked up once, then followed;
ids committed out of order are read as gaps; drops are seen at the next verify. The stateful test drives the
real backend and a real database through every interleaving of additions (in and out of id order), drops,
id blocks given up, rounds and the clock, and after each round compares every answer with the database."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from sqlalchemy import create_engine

from smartsensor.adapters.catalog.batch import BatchChecker
from smartsensor.adapters.catalog.metastore_db import MetastoreDbCatalog
from smartsensor.adapters.catalog.partition_feed import PartitionFeed
from smartsensor.adapters.sql.engine import normalize_url
from smartsensor.sensors.checks import PartitionCheck
from tests.support.hive_schema import HiveSchema
from tests.support.mysql import drop_mysql_database, needs_test_mysql, new_mysql_database
from tests.support.pg import drop_pg_database, needs_test_pg, new_pg_database

DB = "feed_db"
DAYS = ("2026-11-22", "2026-11-23", "2026-11-24")
HOURS = ("0", "1", "10")


SERVERS = [pytest.param("postgresql", marks=needs_test_pg), pytest.param("mysql", marks=needs_test_mysql)]


@contextlib.contextmanager
def hive_database(server: str, catalogs: bool = False) -> Iterator[HiveSchema]:
    """An empty Hive-shaped metastore database on a new database of the test ``server`` (Hive 3's DBS with
    ``catalogs``), dropped afterwards."""
    if server == "mysql":
        name, url = new_mysql_database()
        drop = drop_mysql_database
    else:
        name, url = new_pg_database()
        drop = drop_pg_database
    engine = create_engine(normalize_url(url))
    try:
        schema = HiveSchema(engine, catalogs)
        schema.url = url  # type: ignore[attr-defined]
        yield schema
    finally:
        engine.dispose()
        drop(name)


@pytest.fixture(params=SERVERS)
def hive(request: pytest.FixtureRequest) -> Iterator[HiveSchema]:
    """An empty Hive-shaped metastore database with two tables: events(ds string, hr int), logs(ds string)."""
    with hive_database(request.param) as schema:
        schema.create_table(DB, "events", {"ds": "string", "hr": "int"})
        schema.create_table(DB, "logs", {"ds": "string"})
        yield schema


class Clock:
    """Monotonic seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def catalog_on(hive: HiveSchema, feed: PartitionFeed | None) -> MetastoreDbCatalog:
    return MetastoreDbCatalog.from_url(hive.url, 10.0, feed)  # type: ignore[attr-defined]


def event(ds: str, hr: str) -> PartitionCheck:
    return PartitionCheck(DB, "events", (("ds", ds), ("hr", hr)), True)


def day(ds: str) -> PartitionCheck:
    return PartitionCheck(DB, "events", (("ds", ds),), False)


def log(ds: str) -> PartitionCheck:
    return PartitionCheck(DB, "logs", (("ds", ds),), True)


def ask(catalog: MetastoreDbCatalog, checks: list[PartitionCheck]) -> dict[Any, Any]:
    """One round's answers through the product's checker."""
    return dict(BatchChecker(lister=catalog).check_all(checks))


def test_a_partition_is_looked_up_once_then_followed_in_one_statement_per_round(hive: HiveSchema) -> None:
    hive.add(DB, "events", "ds=2026-11-22/hr=0", 1)
    feed = PartitionFeed(clock=Clock())
    catalog = catalog_on(hive, feed)
    try:
        checks = [event("2026-11-22", "00"), event("2026-11-22", "1"), day("2026-11-23"), log("2026-11-22")]
        first = ask(catalog, checks)
        assert [first[c] for c in checks] == [True, False, False, False]  # hr=00 is stored as hr=0 on an int column
        sent = catalog.statements
        hive.add(DB, "events", "ds=2026-11-22/hr=1", 2)
        hive.add(DB, "events", "ds=2026-11-23/hr=10", 3)
        hive.add(DB, "logs", "ds=2026-11-22", 4)
        second = ask(catalog, checks)
        assert [second[c] for c in checks] == [True, True, True, True]
        assert catalog.statements - sent == 1  # the feed alone: nothing new to look up
        assert catalog.catalogs is False  # Hive 2.3's DBS: no CTLG_NAME
        assert feed.covered(DB, "events") == ({"ds=2026-11-22/hr=0", "ds=2026-11-22/hr=1"}, {"ds=2026-11-23/"})
        assert feed.high_water == 4
    finally:
        catalog.close()


def test_an_id_committed_after_a_higher_one_is_read_as_a_gap(hive: HiveSchema) -> None:
    """The metastore hands out ids in blocks and commits concurrent additions in any order."""
    feed = PartitionFeed(clock=Clock())
    catalog = catalog_on(hive, feed)
    try:
        checks = [event("2026-11-22", "0"), event("2026-11-22", "1")]
        assert set(ask(catalog, checks).values()) == {False}
        hive.add(DB, "events", "ds=2026-11-22/hr=1", 12)  # id 11 handed out, not committed yet
        assert [ask(catalog, checks)[c] for c in checks] == [False, True]
        assert feed.high_water == 12 and sorted(feed.gaps) == list(range(1, 12))
        hive.add(DB, "events", "ds=2026-11-22/hr=0", 11)
        assert [ask(catalog, checks)[c] for c in checks] == [True, True]
        assert 11 not in feed.gaps
    finally:
        catalog.close()


def test_a_gap_is_given_up_after_its_seconds_and_the_verify_finds_what_it_missed(hive: HiveSchema) -> None:
    clock = Clock()
    feed = PartitionFeed(gap_seconds=60, verify_seconds=600, clock=clock)
    catalog = catalog_on(hive, feed)
    try:
        check = event("2026-11-22", "0")
        hive.add(DB, "events", "ds=2026-11-22/hr=1", 5)
        assert ask(catalog, [check])[check] is False
        clock.advance(61)
        assert ask(catalog, [check])[check] is False
        assert not feed.gaps  # ids 1-4 given up
        hive.add(DB, "events", "ds=2026-11-22/hr=0", 3)  # a transaction longer than gap_seconds
        assert ask(catalog, [check])[check] is False  # missed by the feed...
        clock.advance(600)
        assert ask(catalog, [check])[check] is True  # ...found by the verify
        assert feed.verifies == 1
    finally:
        catalog.close()


def test_a_dropped_partition_counts_until_the_verify_and_the_lookup_mode_sees_it_at_once(hive: HiveSchema) -> None:
    clock = Clock()
    feed = PartitionFeed(verify_seconds=300, clock=clock)
    following, looking_up = catalog_on(hive, feed), catalog_on(hive, None)
    try:
        check = log("2026-11-24")
        hive.add(DB, "logs", "ds=2026-11-24", 1)
        assert ask(following, [check])[check] is True and ask(looking_up, [check])[check] is True
        hive.drop(DB, "logs", "ds=2026-11-24")
        assert ask(looking_up, [check])[check] is False
        assert ask(following, [check])[check] is True
        clock.advance(300)
        assert ask(following, [check])[check] is False
    finally:
        following.close()
        looking_up.close()


def test_ids_handed_out_before_the_process_started_are_read_from_below_the_highest(hive: HiveSchema) -> None:
    hive.add(DB, "logs", "ds=2026-11-22", 50)
    feed = PartitionFeed(baseline_span=20, clock=Clock())
    catalog = catalog_on(hive, feed)
    try:
        check = log("2026-11-23")
        assert ask(catalog, [check])[check] is False
        assert feed.high_water == 50 and sorted(feed.gaps) == list(range(31, 50))
        hive.add(DB, "logs", "ds=2026-11-23", 40)
        assert ask(catalog, [check])[check] is True
    finally:
        catalog.close()


def test_too_many_ids_skipped_at_once_means_a_verify_not_a_miss(hive: HiveSchema) -> None:
    feed = PartitionFeed(max_gaps=10, baseline_span=0, clock=Clock())
    catalog = catalog_on(hive, feed)
    try:
        check = log("2026-11-22")
        assert ask(catalog, [check])[check] is False
        hive.add(DB, "logs", "ds=2026-11-24", 1_000)
        assert ask(catalog, [check])[check] is False
        assert feed.verifies == 0 and not feed.gaps and feed.high_water == 1_000  # the verify: at the next round
        hive.add(DB, "logs", "ds=2026-11-22", 500)  # skipped by the feed, looked up after the verify
        assert ask(catalog, [check])[check] is True
        assert feed.verifies == 1
    finally:
        catalog.close()


@pytest.mark.parametrize("following", [True, False], ids=["feed", "lookup"])
def test_a_partial_check_naming_every_column_is_answered_by_the_partitions_name(
    hive: HiveSchema, following: bool
) -> None:
    """Airflow's HivePartitionSensor with its filter ``ds='X'`` on a table partitioned by ``ds`` only is the partial
    check {ds: X}: the partition it waits for is named ``ds=X``, with no ``/`` after the value."""
    hive.add(DB, "logs", "ds=2026-11-22", 1)
    hive.add(DB, "events", "ds=2026-11-22/hr=1", 2)
    catalog = catalog_on(hive, PartitionFeed(clock=Clock()) if following else None)
    partial_log = PartitionCheck(DB, "logs", (("ds", "2026-11-22"),), False)
    arrives = PartitionCheck(DB, "logs", (("ds", "2026-11-23"),), False)
    expected = {
        partial_log: True,
        arrives: False,
        PartitionCheck(DB, "logs", (("ds", "2026-11-2"),), False): False,  # the start of a value is not the value
        PartitionCheck(DB, "events", (("ds", "2026-11-22"), ("hr", "01")), False): True,  # stored as hr=1
        PartitionCheck(DB, "events", (("ds", "2026-11-22"), ("hr", "10")), False): False,
    }
    try:
        assert ask(catalog, list(expected)) == expected
        hive.add(DB, "logs", "ds=2026-11-23", 3)
        assert ask(catalog, [partial_log, arrives]) == {partial_log: True, arrives: True}  # the feed delivers it
        listed = BatchChecker(lister=catalog).list_partitions(DB, "events", {"ds": "2026-11-22", "hr": "1"})
        assert listed == [{"ds": "2026-11-22", "hr": "1"}]  # a narrowing that gives every column
    finally:
        catalog.close()


@pytest.mark.parametrize("following", [True, False], ids=["feed", "lookup"])
@pytest.mark.parametrize("server", SERVERS)
def test_on_hive_3_only_the_hive_catalogs_databases_answer(server: str, following: bool) -> None:
    """Hive 3+ keys DBS by (NAME, CTLG_NAME), and HDP 3 has a ``hive`` and a ``spark`` catalog, each with a
    ``default`` database: a partition of spark's default.t must not answer a check on default.t (the thrift
    backend reads the hive catalog alone), nor spark's table lend default.t its columns."""
    with hive_database(server, catalogs=True) as hive:
        hive.create_table("default", "t", {"ds": "string"}, catalog="spark")
        hive.create_table("default", "t", {"ds": "string"})
        hive.create_table("default", "ev", {"ds": "string", "hr": "int"}, catalog="spark")
        hive.create_table("default", "ev", {"ds": "string", "hr": "int"})
        hive.create_table("default", "only_in_spark", {"ds": "string"}, catalog="spark")
        hive.add("default", "t", "ds=2026-11-22", 1, catalog="spark")
        hive.add("default", "ev", "ds=2026-11-22/hr=1", 2, catalog="spark")
        hive.add("default", "only_in_spark", "ds=2026-11-22", 3, catalog="spark")
        catalog = catalog_on(hive, PartitionFeed(clock=Clock()) if following else None)
        on_t = PartitionCheck("default", "t", (("ds", "2026-11-22"),), True)
        later = PartitionCheck("default", "t", (("ds", "2026-11-23"),), True)
        checks = [
            on_t,
            later,
            PartitionCheck("default", "ev", (("ds", "2026-11-22"),), False),  # listed by its prefix
            PartitionCheck("default", "ev", (("ds", "2026-11-22"), ("hr", "1")), True),
            PartitionCheck("default", "only_in_spark", (("ds", "2026-11-22"),), True),  # no such table in hive
        ]
        try:
            assert ask(catalog, checks) == {c: False for c in checks}
            hive.add("default", "t", "ds=2026-11-23", 4, catalog="spark")  # the feed reads it: not hive's
            assert ask(catalog, [on_t, later]) == {on_t: False, later: False}
            hive.add("default", "t", "ds=2026-11-23", 5)
            assert ask(catalog, [on_t, later]) == {on_t: False, later: True}
            assert catalog.types.cached("default", "only_in_spark") is None
            assert catalog.catalogs is True
        finally:
            catalog.close()


ALL_CHECKS = (
    [event(ds, hr) for ds in DAYS for hr in HOURS]
    + [day(ds) for ds in DAYS]
    + [log(ds) for ds in DAYS]
    + [PartitionCheck(DB, "logs", (("ds", ds),), False) for ds in DAYS]  # partial, giving every column
)
PARTITIONS = [("events", f"ds={ds}/hr={hr}") for ds in DAYS for hr in HOURS] + [("logs", f"ds={ds}") for ds in DAYS]


class FeedMachine(RuleBasedStateMachine):
    """Ids are handed out in blocks, as DataNucleus does, to two metastore instances; each commits its additions
    with the ids of its block in any order, or leaves ids unused. Gaps are kept longer than a verify interval, so
    the only answers allowed to differ from the database are a partition dropped since the last verify (still
    present)."""

    hive: HiveSchema
    rounds = 0  # rounds checked, over every example

    @initialize()
    def start(self) -> None:
        self.hive.clear_partitions()
        self.clock = Clock()
        self.feed = PartitionFeed(gap_seconds=10_000, verify_seconds=100, baseline_span=1_000, clock=self.clock)
        self.catalog = catalog_on(self.hive, self.feed)
        self.next_block = 1
        self.blocks: list[list[int]] = [[], []]  # ids each instance holds
        self.present: dict[tuple[str, str], int] = {}
        self.dropped_since_verify: set[tuple[str, str]] = set()

    def teardown(self) -> None:
        if hasattr(self, "catalog"):
            self.catalog.close()

    @rule(instance=st.integers(0, 1), size=st.integers(1, 5))
    def allocate_block(self, instance: int, size: int) -> None:
        self.blocks[instance].extend(range(self.next_block, self.next_block + size))
        self.next_block += size

    @precondition(lambda self: any(self.blocks) and len(self.present) < len(PARTITIONS))
    @rule(data=st.data())
    def add(self, data: st.DataObject) -> None:
        instance = data.draw(st.sampled_from([i for i, b in enumerate(self.blocks) if b]))
        part_id = data.draw(st.sampled_from(self.blocks[instance]))  # any of its block: commits race
        table, name = data.draw(st.sampled_from([p for p in PARTITIONS if p not in self.present]))
        self.blocks[instance].remove(part_id)
        self.hive.add(DB, table, name, part_id)
        self.present[(table, name)] = part_id
        self.dropped_since_verify.discard((table, name))

    @precondition(lambda self: any(self.blocks))
    @rule(instance=st.integers(0, 1))
    def restart_instance(self, instance: int) -> None:
        self.blocks[instance] = []  # the ids it held are never used

    @precondition(lambda self: bool(self.present))
    @rule(data=st.data())
    def drop(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.present)))
        self.hive.drop(DB, *key)
        del self.present[key]
        self.dropped_since_verify.add(key)

    @rule(seconds=st.sampled_from([1, 30, 100]))
    def tick(self, seconds: int) -> None:
        self.clock.advance(seconds)

    @rule(asked=st.lists(st.sampled_from(ALL_CHECKS), min_size=1, max_size=8, unique=True))
    def round(self, asked: list[PartitionCheck]) -> None:
        verifies = self.feed.verifies
        answers = ask(self.catalog, asked)
        FeedMachine.rounds += 1
        if self.feed.verifies != verifies:
            self.dropped_since_verify.clear()
        for check in asked:
            truth = self.truth(check)
            if answers[check] != truth:
                assert answers[check] is True and self.stale(check), (check, answers[check], self.present)

    def truth(self, check: PartitionCheck) -> bool:
        return any(self.matches(check, key) for key in self.present)

    def stale(self, check: PartitionCheck) -> bool:
        return any(self.matches(check, key) for key in self.dropped_since_verify)

    @staticmethod
    def matches(check: PartitionCheck, key: tuple[str, str]) -> bool:
        table, name = key
        pairs = dict(p.split("=") for p in name.split("/"))
        spec = dict(check.spec)
        if "hr" in spec:
            spec["hr"] = str(int(spec["hr"]))
        if check.exact and set(spec) != set(pairs):
            return False
        return table == check.table and all(pairs.get(k) == v for k, v in spec.items())

    @invariant()
    def gaps_are_below_the_mark(self) -> None:
        if hasattr(self, "feed") and self.feed.high_water is not None:
            assert all(i <= self.feed.high_water for i in self.feed.gaps)


def test_the_feed_answers_as_the_database_through_every_interleaving(hive: HiveSchema) -> None:
    FeedMachine.hive, FeedMachine.rounds = hive, 0
    FeedMachine.TestCase.settings = settings(
        max_examples=60, stateful_step_count=40, deadline=None, suppress_health_check=list(HealthCheck)
    )
    FeedMachine.TestCase().runTest()
    assert FeedMachine.rounds >= 60 * 40 // 10, f"only {FeedMachine.rounds} rounds ran"
