"""The metastore-database backend following the metastore's PARTITIONS by id (``[catalog] metastore_db_feed``), on
a Hive-shaped database on the test PostgreSQL and MariaDB servers: a partition is looked up once, then followed;
ids committed out of order are read as gaps; drops are seen at the next verify. The stateful test drives the
real backend and a real database through every interleaving of additions (in and out of id order), drops,
id blocks given up, rounds and the clock, and after each round compares every answer with the database."""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from sqlalchemy import create_engine

from smartsensor.adapters.catalog import metastore_db
from smartsensor.adapters.catalog.batch import BatchChecker
from smartsensor.adapters.catalog.metastore_db import MetastoreDbCatalog
from smartsensor.adapters.catalog.partition_feed import PartitionFeed
from smartsensor.adapters.catalog.table_listings import FollowingChanges
from smartsensor.adapters.sql.engine import normalize_url
from smartsensor.hive_filter.names import TableName
from smartsensor.sensors.checks import PartitionCheck
from tests.support import tier
from tests.support.hive_schema import HiveSchema
from tests.support.mysql import drop_mysql_database, needs_test_mysql, new_mysql_database
from tests.support.pg import drop_pg_database, needs_test_pg, new_pg_database

DB = "feed_db"
DAYS = ("2026-11-22", "2026-11-23", "2026-11-24")
HOURS = ("0", "1", "10")


SERVERS = [pytest.param("postgresql", marks=needs_test_pg), pytest.param("mysql", marks=needs_test_mysql)]


@contextlib.contextmanager
def hive_database(server: str, catalogs: bool = False, sequence: bool = True) -> Iterator[HiveSchema]:
    """An empty Hive-shaped metastore database on a new database of the test ``server`` (Hive 3's DBS with
    ``catalogs``; no SEQUENCE_TABLE without ``sequence``), dropped afterwards."""
    if server == "mysql":
        name, url = new_mysql_database()
        drop = drop_mysql_database
    else:
        name, url = new_pg_database()
        drop = drop_pg_database
    engine = create_engine(normalize_url(url))
    try:
        schema = HiveSchema(engine, catalogs, sequence)
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
        assert catalog.sequence is True and feed.sequence is None  # SEQUENCE_TABLE, without MPartition's row yet
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


def test_an_id_of_a_block_used_long_after_higher_ones_is_seen_the_round_after_it_commits(hive: HiveSchema) -> None:
    """An idle metastore instance keeps its DataNucleus block of ids: it may use one of them hours after the other
    instances' higher ids committed. No time gives it up (the full look-ups are kept out of the way here)."""
    clock = Clock()
    feed = PartitionFeed(verify_seconds=1e9, clock=clock)
    catalog = catalog_on(hive, feed)
    try:
        check = event("2026-11-22", "0")
        hive.add(DB, "events", "ds=2026-11-22/hr=1", 15)  # instance B's block 11-20; instance A holds 1-10
        assert ask(catalog, [check])[check] is False
        for hours in range(1, 4):
            clock.advance(3600)
            hive.add(DB, "logs", f"ds=2026-11-2{hours}", 15 + hours)  # B goes on
            assert ask(catalog, [check])[check] is False
        hive.add(DB, "events", "ds=2026-11-22/hr=0", 3)  # A's block, three hours later
        assert ask(catalog, [check])[check] is True
        assert feed.verifies == 0 and 3 not in feed.gaps
    finally:
        catalog.close()


def test_ids_handed_out_again_after_a_failover_are_seen_at_once(hive: HiveSchema) -> None:
    """A failover to a replica that lagged loses the last commits, the id sequence with them: the metastore hands
    those ids out again, at or below the feed's mark."""
    feed = PartitionFeed(verify_seconds=1e9, clock=Clock())
    catalog = catalog_on(hive, feed)
    try:
        lost, reused = log("2026-11-23"), log("2026-11-24")
        hive.add(DB, "logs", "ds=2026-11-22", 1)
        assert ask(catalog, [lost, reused]) == {lost: False, reused: False}
        hive.add(DB, "logs", "ds=2026-11-23", 2)
        assert ask(catalog, [lost, reused]) == {lost: True, reused: False}
        sent = catalog.statements
        hive.drop(DB, "logs", "ds=2026-11-23")  # the failover: id 2's commit is lost...
        hive.add(DB, "logs", "ds=2026-11-24", 2)  # ...and id 2 handed out again
        assert ask(catalog, [lost, reused])[reused] is True
        assert feed.resets == 1 and catalog.statements - sent == 2  # the round's statement, run again
    finally:
        catalog.close()


def test_partitions_a_failover_lost_no_longer_count_as_present(hive: HiveSchema) -> None:
    feed = PartitionFeed(verify_seconds=1e9, clock=Clock())
    catalog = catalog_on(hive, feed)
    try:
        kept, lost = event("2026-11-22", "0"), event("2026-11-22", "1")
        day_22 = day("2026-11-22")
        hive.add(DB, "events", "ds=2026-11-22/hr=0", 1)
        assert ask(catalog, [kept, lost, day_22]) == {kept: True, lost: False, day_22: True}
        hive.add(DB, "events", "ds=2026-11-22/hr=1", 2)
        hive.add(DB, "logs", "ds=2026-11-22", 3)
        assert ask(catalog, [kept, lost, day_22]) == {kept: True, lost: True, day_22: True}
        hive.drop(DB, "logs", "ds=2026-11-22")  # a restore to before ids 2 and 3
        hive.drop(DB, "events", "ds=2026-11-22/hr=1")
        assert ask(catalog, [kept, lost, day_22]) == {kept: True, lost: False, day_22: True}
        assert feed.resets == 1
        sent = catalog.statements
        assert ask(catalog, [kept, lost, day_22]) == {kept: True, lost: False, day_22: True}
        assert catalog.statements - sent == 1 and feed.resets == 1  # back to one statement a round
    finally:
        catalog.close()


def test_a_dropped_partition_counts_until_the_verify_and_the_lookup_mode_sees_it_at_once(hive: HiveSchema) -> None:
    clock = Clock()
    feed = PartitionFeed(verify_seconds=300, clock=clock)
    following, looking_up = catalog_on(hive, feed), catalog_on(hive, None)
    try:
        check, newest = log("2026-11-24"), log("2026-11-22")
        hive.add(DB, "logs", "ds=2026-11-24", 1)
        assert ask(following, [check])[check] is True and ask(looking_up, [check])[check] is True
        hive.add(DB, "logs", "ds=2026-11-22", 2)
        assert ask(following, [check, newest]) == {check: True, newest: True}
        hive.drop(DB, "logs", "ds=2026-11-24")
        assert ask(looking_up, [check])[check] is False
        assert ask(following, [check])[check] is True
        clock.advance(300)
        assert ask(following, [check])[check] is False
        hive.drop(DB, "logs", "ds=2026-11-22")  # the newest partition read: its id is a witness, so a reset
        assert ask(following, [newest])[newest] is False and feed.resets == 1
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
        assert feed.verifies == 0 and feed.high_water == 1_000  # the verify: at the next round
        assert feed.gaps == set(range(990, 1_000)) and feed.gaps_given_up == 989  # the 10 highest kept
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


BLOCK = 10  # ids DataNucleus's increment strategy hands an instance at a time
INSTANCES = 3


class FeedMachine(RuleBasedStateMachine):
    """Three metastore instances take ids from one sequence in DataNucleus blocks of 10 (SEQUENCE_TABLE's row, its
    NEXT_VAL advanced by a block at each allocation, created at the first) and use each block in order for as long
    as they run; an addition takes its id, then commits or rolls back, in any order and at any
    later time (an instance left idle uses its block hours later). Instances restart (their blocks thrown away),
    and the database fails over, losing its last commits, the sequence's included, so that ids come back. The
    clock runs far past any time limit and the full look-ups never come by time: after every step a round over
    every check must answer as the database does, except for a partition a user dropped since the last verify
    (still present until then)."""

    hive: HiveSchema
    rounds = 0  # rounds checked, over every example
    resets = 0  # resets seen, over every example

    @initialize()
    def start(self) -> None:
        self.hive.clear_partitions()
        self.clock = Clock()
        self.feed = PartitionFeed(verify_seconds=1e9, clock=self.clock)
        self.catalog = catalog_on(self.hive, self.feed)
        # The landing publisher's view: a catalog of its own, read through the change record (FollowingChanges)
        self.changes = FollowingChanges(catalog_on(self.hive, PartitionFeed(verify_seconds=1e9, clock=self.clock)))
        self.view: dict[str, set[str]] = {}  # table → the names the publisher holds (replaced when returned)
        self.next_val = 1  # the sequence's next block (DataNucleus's SEQUENCE_TABLE), in the database
        self.blocks: list[list[int]] = [[] for _ in range(INSTANCES)]  # ids each instance still holds, in order
        self.open: list[dict[int, tuple[str, str]]] = [{} for _ in range(INSTANCES)]  # its uncommitted additions
        self.log: list[tuple[str, Any]] = []  # what the database committed, in order (a failover loses a tail)
        self.dropped_since_verify: set[tuple[str, str]] = set()
        self.verifies = 0

    def teardown(self) -> None:
        if hasattr(self, "catalog"):
            FeedMachine.resets += self.feed.resets
            self.catalog.close()
            self.changes.catalog.close()

    def present(self) -> dict[tuple[str, str], int]:
        """The database's partitions, read from it: the truth."""
        with self.hive.engine.connect() as conn:
            rows = conn.execute(
                self.hive._sql(
                    'SELECT t."TBL_NAME", p."PART_NAME", p."PART_ID" FROM "PARTITIONS" p '
                    'JOIN "TBLS" t ON t."TBL_ID" = p."TBL_ID"'
                )
            )
            return {(table, name): part_id for table, name, part_id in rows}

    @rule(instance=st.integers(0, INSTANCES - 1), data=st.data())
    def begin_addition(self, instance: int, data: st.DataObject) -> None:
        """The instance takes the next id of its block (a new block when it has none) for a partition."""
        taken = {key for additions in self.open for key in additions.values()}
        free = [p for p in PARTITIONS if p not in taken]
        if not free:
            return
        if not self.blocks[instance]:
            self.blocks[instance] = list(range(self.next_val, self.next_val + BLOCK))
            self.next_val += BLOCK
            self.hive.set_sequence(self.next_val)
            self.log.append(("block", BLOCK))
        self.open[instance][self.blocks[instance].pop(0)] = data.draw(st.sampled_from(free))

    @precondition(lambda self: any(self.open))
    @rule(data=st.data(), commit=st.booleans())
    def end_addition(self, data: st.DataObject, commit: bool) -> None:
        """One open addition commits (unless its id or name is in the database now: it fails) or rolls back."""
        instance = data.draw(st.sampled_from([i for i, additions in enumerate(self.open) if additions]))
        part_id = data.draw(st.sampled_from(sorted(self.open[instance])))
        table, name = self.open[instance].pop(part_id)
        present = self.present()
        if commit and (table, name) not in present and part_id not in present.values():
            self.hive.add(DB, table, name, part_id)
            self.log.append(("add", (table, name, part_id)))
            self.dropped_since_verify.discard((table, name))

    @precondition(lambda self: any(self.blocks) or any(self.open))
    @rule(instance=st.integers(0, INSTANCES - 1))
    def restart_instance(self, instance: int) -> None:
        self.blocks[instance], self.open[instance] = [], {}  # its ids are never used

    @rule(data=st.data())
    def drop(self, data: st.DataObject) -> None:
        present = self.present()
        if not present:
            return
        key = data.draw(st.sampled_from(sorted(present)))
        self.hive.drop(DB, *key)
        self.log.append(("drop", (*key, present[key])))
        self.dropped_since_verify.add(key)

    @precondition(lambda self: bool(self.log))
    @rule(data=st.data())
    def fail_over(self, data: st.DataObject) -> None:
        """The database loses its last commits, the sequence's advances among them (the instances keep the blocks
        they hold; a loss of the first allocation loses the sequence's row)."""
        next_val = self.next_val
        for kind, what in reversed(self.log[len(self.log) - data.draw(st.integers(1, min(6, len(self.log)))) :]):
            self.log.pop()
            if kind == "block":
                self.next_val -= what
            elif kind == "add":
                self.hive.drop(DB, what[0], what[1])
            else:
                self.hive.add(DB, *what)
        if self.next_val != next_val:
            self.hive.set_sequence(self.next_val if self.next_val > 1 else None)

    @rule(seconds=st.sampled_from([1, 30, 700, 5_000]))
    def tick(self, seconds: int) -> None:
        self.clock.advance(seconds)

    @invariant()
    def answers_as_the_database(self) -> None:
        if not hasattr(self, "feed"):
            return
        sent, resets, first = self.catalog.statements, self.feed.resets, self.feed.high_water is None
        answers = ask(self.catalog, ALL_CHECKS)
        FeedMachine.rounds += 1
        # One statement a round (the column types too at the first), one more in a round that finds a reset.
        assert self.catalog.statements - sent == 1 + first + (self.feed.resets - resets)
        if self.feed.verifies != self.verifies:
            self.verifies = self.feed.verifies
            self.dropped_since_verify.clear()
        present = self.present()
        for check in ALL_CHECKS:
            truth = any(self.matches(check, key) for key in present)
            if answers[check] != truth:
                stale = any(self.matches(check, key) for key in self.dropped_since_verify)
                assert answers[check] is True and stale, (check, answers[check], present, self.log)
        assert self.feed.gaps_given_up == 0
        assert self.feed.high_water is not None and all(i <= self.feed.high_water for i in self.feed.gaps)

    @invariant()
    def the_change_record_misses_no_landing(self) -> None:
        """The publisher's view through the change record holds every partition the database has, after one
        statement per call (two at the first, with the column types; one more when it finds a reset); a table is
        returned only when its names changed."""
        if not hasattr(self, "changes"):
            return
        catalog = self.changes.catalog
        assert catalog.feed is not None
        sent, resets, verifies, first = catalog.statements, catalog.feed.resets, catalog.feed.verifies, not self.view
        listed, calls = self.changes.listings([TableName(DB, "events"), TableName(DB, "logs")])
        assert calls == catalog.statements - sent == 1 + first + (catalog.feed.resets - resets)
        read_again = first or catalog.feed.resets != resets or catalog.feed.verifies != verifies
        for (_, table), names in listed.items():
            assert isinstance(names, list), names
            assert read_again or set(names) != self.view.get(table), (table, "returned unchanged")
            self.view[table] = set(names)
        if first:
            assert set(listed) == {(DB, "events"), (DB, "logs")}
        for table, name in self.present():
            assert name in self.view.get(table, set()), (table, name, self.view, self.log)

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


def test_the_feed_answers_as_the_database_through_every_interleaving(hive: HiveSchema) -> None:
    FeedMachine.hive, FeedMachine.rounds, FeedMachine.resets = hive, 0, 0
    FeedMachine.TestCase.settings = settings(  # the same examples every run, unless SMARTSENSOR_MODEL_RANDOM is set
        max_examples=tier.examples(30, 60),
        stateful_step_count=40,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=os.environ.get("SMARTSENSOR_MODEL_RANDOM") is None,
    )
    FeedMachine.TestCase().runTest()
    assert FeedMachine.rounds >= tier.examples(30, 60) * 40 // 2, f"only {FeedMachine.rounds} rounds ran"
    assert FeedMachine.resets > 0, "no example went back"


class _Draws:
    """The values a state machine's rule draws, in order (a replayed example)."""

    def __init__(self, *values: Any) -> None:
        self.values = list(values)

    def draw(self, strategy: Any) -> Any:
        return self.values.pop(0)


def test_an_id_handed_out_again_after_a_sequence_only_loss_is_seen_at_once(hive: HiveSchema) -> None:
    """Two failovers each lose only a block's allocation (no partition), so a third instance is handed ids 1-10
    again; id 1 was read (ds=2026-11-22/hr=0) and dropped since, and now holds another partition. Every witness
    survived; the feed reads the metastore's id sequence (DataNucleus's SEQUENCE_TABLE) with each statement, finds
    it went back (a reset) and reads the ids handed out twice by id from then on (found by the state machine,
    2026-11-28, when a failover lost no witness and the feed missed the id until the verify)."""
    FeedMachine.hive = hive
    machine = FeedMachine.__new__(FeedMachine)
    machine.start()
    steps: list[tuple[str, dict[str, Any]]] = [
        ("begin_addition", {"instance": 2, "data": _Draws(("events", "ds=2026-11-22/hr=0"))}),
        ("begin_addition", {"instance": 2, "data": _Draws(("events", "ds=2026-11-22/hr=1"))}),
        ("fail_over", {"data": _Draws(1)}),
        ("begin_addition", {"instance": 1, "data": _Draws(("events", "ds=2026-11-22/hr=10"))}),
        ("begin_addition", {"instance": 1, "data": _Draws(("events", "ds=2026-11-23/hr=0"))}),
        ("fail_over", {"data": _Draws(1)}),
        ("begin_addition", {"instance": 2, "data": _Draws(("events", "ds=2026-11-23/hr=1"))}),
        ("end_addition", {"commit": True, "data": _Draws(1, 2)}),
        ("tick", {"seconds": 5000}),
        ("end_addition", {"commit": True, "data": _Draws(2, 2)}),
        ("restart_instance", {"instance": 1}),
        ("end_addition", {"commit": True, "data": _Draws(2, 1)}),
        ("end_addition", {"commit": True, "data": _Draws(2, 3)}),
        ("drop", {"data": _Draws(("events", "ds=2026-11-22/hr=0"))}),
        ("drop", {"data": _Draws(("events", "ds=2026-11-23/hr=0"))}),
        ("begin_addition", {"instance": 0, "data": _Draws(("events", "ds=2026-11-22/hr=1"))}),
        ("end_addition", {"commit": True, "data": _Draws(0, 1)}),
    ]
    try:
        for name, args in steps:
            getattr(machine, name)(**args)
            machine.answers_as_the_database()
        assert machine.feed.resets == 2 and 1 in machine.feed.reissued  # the two failovers; id 1 handed out twice
    finally:
        machine.teardown()


def test_a_sequence_that_goes_back_alone_is_a_reset_and_its_ids_are_read_again(hive: HiveSchema) -> None:
    """A failover that loses the sequence's advance and no partition: the witnesses all survive, the sequence read
    with the round's statement is below the value read before. The ids from there up are read by id in every round
    from then on: a partition the feed read, dropped, then added again with the same id is seen at once."""
    feed = PartitionFeed(verify_seconds=1e9, clock=Clock())
    catalog = catalog_on(hive, feed)
    try:
        first, again = log("2026-11-22"), log("2026-11-23")
        hive.set_sequence(11)  # instance A's block 1-10
        hive.add(DB, "logs", "ds=2026-11-22", 1)
        assert ask(catalog, [first, again]) == {first: True, again: False}
        assert feed.sequence == 11 and not feed.reissued
        hive.set_sequence(21)  # instance B's block 11-20...
        assert ask(catalog, [first, again]) == {first: True, again: False} and feed.sequence == 21
        sent = catalog.statements
        hive.set_sequence(11)  # ...whose allocation a failover lost, alone
        assert ask(catalog, [first, again]) == {first: True, again: False}
        assert feed.resets == 1 and catalog.statements - sent == 2 and sorted(feed.reissued) == list(range(11, 21))
        hive.add(DB, "logs", "ds=2026-11-23", 12)  # B uses its block (the allocation lost)
        assert ask(catalog, [first, again]) == {first: True, again: True}
        hive.add(DB, "logs", "ds=2026-11-21", 13)  # the newest read: the witness
        assert ask(catalog, [first, again]) == {first: True, again: True} and set(feed.witnesses) == {13}
        hive.drop(DB, "logs", "ds=2026-11-23")
        hive.set_sequence(21)  # C is handed 11-20 again
        hive.add(DB, "logs", "ds=2026-11-24", 12)  # and id 12 holds another partition now
        sent = catalog.statements
        newer = log("2026-11-24")
        assert ask(catalog, [newer])[newer] is True
        assert catalog.statements - sent == 1 and feed.resets == 1  # read by id, no reset
    finally:
        catalog.close()


@pytest.mark.parametrize("server", SERVERS)
def test_a_metastore_without_the_sequence_table_is_followed_without_its_check(server: str) -> None:
    """A metastore database without SEQUENCE_TABLE (DataNucleus creates it at the first write where the schema did
    not): no error, no sequence read; the table is looked for again later, and its row read once it is there."""
    with hive_database(server, sequence=False) as hive:
        hive.create_table(DB, "logs", {"ds": "string"})
        feed = PartitionFeed(verify_seconds=1e9, clock=Clock())
        catalog = catalog_on(hive, feed)
        check = log("2026-11-22")
        try:
            assert ask(catalog, [check])[check] is False
            hive.add(DB, "logs", "ds=2026-11-22", 1)
            assert ask(catalog, [check])[check] is True
            assert catalog.sequence is False and feed.sequence is None and feed.resets == 0
            with hive.engine.begin() as conn:  # the metastore's first write creates it
                conn.execute(
                    hive._sql(
                        'CREATE TABLE "SEQUENCE_TABLE" ("SEQUENCE_NAME" varchar(255) PRIMARY KEY, '
                        '"NEXT_VAL" bigint NOT NULL)'
                    )
                )
            hive.sequence = True
            hive.set_sequence(11)
            assert ask(catalog, [check])[check] is True and catalog.sequence is False  # not looked for again yet
            catalog._probed_at -= metastore_db.SEQUENCE_PROBE_SECONDS
            assert ask(catalog, [check])[check] is True
            assert catalog.sequence is True and feed.sequence == 11 and feed.resets == 0
        finally:
            catalog.close()


def test_a_partition_of_old_back_at_a_reissued_id_leaves_the_witnesses_that_see_a_later_loss(hive: HiveSchema) -> None:
    """A reissued id read again holds what it held before it was dropped: a failover lost the drop alone. The feed
    counts it as a witness beside the others, not in their place, so the next failover, which loses the newest
    partition read (id 4, a gap, read after id 12), is still a reset (found by the state machine's random run)."""
    FeedMachine.hive = hive
    machine = FeedMachine.__new__(FeedMachine)
    machine.start()
    hr0, hr1, hr10 = (
        ("events", "ds=2026-11-22/hr=0"),
        ("events", "ds=2026-11-22/hr=1"),
        ("events", "ds=2026-11-22/hr=10"),
    )
    steps: list[tuple[str, dict[str, Any]]] = [
        ("begin_addition", {"instance": 0, "data": _Draws(hr0)}),
        ("fail_over", {"data": _Draws(1)}),
        ("end_addition", {"commit": False, "data": _Draws(0, 1)}),
        ("begin_addition", {"instance": 2, "data": _Draws(hr0)}),
        ("begin_addition", {"instance": 1, "data": _Draws(hr1)}),
        ("begin_addition", {"instance": 1, "data": _Draws(hr10)}),
        ("fail_over", {"data": _Draws(1)}),  # the sequence goes back from 21 to 11: ids 11-20 reissued
        ("begin_addition", {"instance": 0, "data": _Draws(("events", "ds=2026-11-23/hr=0"))}),
        ("end_addition", {"commit": True, "data": _Draws(0, 2)}),
        ("end_addition", {"commit": True, "data": _Draws(1, 11)}),
        ("fail_over", {"data": _Draws(3)}),
        ("end_addition", {"commit": False, "data": _Draws(2, 1)}),
        ("begin_addition", {"instance": 0, "data": _Draws(("events", "ds=2026-11-24/hr=0"))}),
        ("begin_addition", {"instance": 2, "data": _Draws(("logs", "ds=2026-11-24"))}),
        ("end_addition", {"commit": True, "data": _Draws(1, 12)}),
        ("end_addition", {"commit": False, "data": _Draws(2, 2)}),
        ("begin_addition", {"instance": 1, "data": _Draws(hr1)}),
        ("begin_addition", {"instance": 0, "data": _Draws(hr0)}),
        ("end_addition", {"commit": True, "data": _Draws(0, 4)}),  # id 4, a gap: the witness
        ("drop", {"data": _Draws(hr10)}),  # id 12
        ("fail_over", {"data": _Draws(1)}),  # loses the drop alone: id 12 holds hr=10 again
        ("begin_addition", {"instance": 1, "data": _Draws(("logs", "ds=2026-11-23"))}),
        ("fail_over", {"data": _Draws(1)}),  # loses id 4
    ]
    try:
        for name, args in steps:
            getattr(machine, name)(**args)
            machine.answers_as_the_database()
        assert machine.feed.resets == 4 and set(machine.feed.witnesses) == {12}
    finally:
        machine.teardown()
