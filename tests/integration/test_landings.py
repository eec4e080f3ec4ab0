"""The landing publisher's outbox on SQLite and PostgreSQL (its migration 0008 is in test_schema.py): each landing
enqueued once whoever sees it, claims that two workers cannot both end, a worker's side job over the ranges it
holds, and a stateful model (hypothesis) of two workers driving the real ``LandingPublisher`` and outbox through
every interleaving of landings, enqueues, claims, posts that succeed, fail, time out before or after Airflow took
them or are refused, stalls that move leases, crashes, and the metastore database down or failed over to a replica
that lags, checking after every step that no landing is lost and none is delivered twice unnoticed.

Airflow's side is ``AirflowDouble``: the assets DAGs are scheduled on and the events it took, per asset and key,
with the failure each post meets. The catalog is a dict of partition names per table.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections import Counter
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from sqlalchemy import Engine, select

from smartsensor.adapters.airflow_assets import AirflowApiError
from smartsensor.adapters.catalog.backends import landing_listings
from smartsensor.adapters.sql import landings as landing_sql
from smartsensor.adapters.sql.engine import init_db, make_engine
from smartsensor.adapters.sql.landings import SqlOutboxStore
from smartsensor.adapters.sql.status_store import SqlStatusReads
from smartsensor.api.metrics import render_metrics
from smartsensor.config import Config
from smartsensor.domain import clock
from smartsensor.domain.landings import (
    BASELINE,
    DELIVERED,
    LANDING_ID,
    PENDING,
    REJECTED,
    SENDING,
    EventLookup,
    HiveAsset,
    PostOutcome,
    partition_key,
)
from smartsensor.hive_filter.names import TableName
from smartsensor.schema.models import landing_outbox as LO
from smartsensor.sensors.errors import CheckError, TransientCheckError
from smartsensor.service.landings import EVER, CycleReport, LandingPublisher
from smartsensor.service.status import collect_landings, collect_status, landing_problems, landings_lines
from smartsensor.service.status_report import StatusReport
from tests.support.catalog_doubles import Clock
from tests.support.common import SHARD_LIMIT, T0, make_cfg
from tests.support.hive_schema import HiveSchema
from tests.support.model import run_model
from tests.support.pg import PrivateServer, drop_pg_database, needs_test_pg, new_pg_database, pg_engine

PREFIX = "hive://meta:10000/"
CONSUMED = {"db.a": 1, "db.b": 2}  # tables DAGs are scheduled on → their asset ids
UNCONSUMED = {"db.c": 3}  # an asset nobody is scheduled on: never published


class Frozen(Exception):
    """The worker froze (or was killed) right after Airflow took its post: the answer is never read (``freeze``)."""

    def __init__(self, event_id: int) -> None:
        super().__init__(event_id)
        self.event_id = event_id


class AirflowDouble:
    """Airflow's API as the publisher sees it: the watched assets, and every event it took by (asset, key), and by
    landing (its ``extra``), each at the time of ``clock``. ``mode`` is what the next posts and look-ups meet:
    ``ok``; ``down`` (refused, nothing taken); ``timeout_after`` (taken, then the answer lost); ``timeout_before``
    (lost on the way); ``reject`` (a 422); ``freeze`` (taken, and the poster never reads the answer: ``Frozen``
    raised through it). A look-up fails but with ``ok``, ``reject`` and ``freeze``; with ``lookups_down`` too."""

    def __init__(self, clock: Callable[[], datetime] = lambda: T0) -> None:
        self.mode = "ok"
        self.clock = clock
        self.events: Counter[tuple[int, str]] = Counter()
        self.extras: list[dict[str, Any]] = []
        self.taken: list[tuple[int, dict[str, Any], datetime]] = []  # (event id, extra, when) of every event taken
        self.lookups = 0
        self.lookups_down = False
        self.windows: list[tuple[datetime, datetime | None]] = []  # each look-up's (since, until)
        self.after_lookup: Callable[[], None] = lambda: None  # what a look-up leaves behind (time it took, a mode)
        self.assets_down = False
        self.consumed = dict(CONSUMED)  # the tables DAGs are scheduled on now
        self.paused: set[str] = set()  # the consumer DAGs paused (each table's is "consume_<db>_<table>")
        self.dags_forbidden = False  # the user may not read DAGs (or the API has no such listing)

    def by_landing(self) -> Counter[int]:
        """Events per outbox row (the ``smartsensor_landing_id`` of their ``extra``)."""
        return Counter(extra[LANDING_ID] for _, extra, _ in self.taken)

    def consumed_hive_assets(self, uri_prefix: str) -> list[HiveAsset]:
        if self.assets_down:
            raise ConnectionError("Airflow's api-server is down")
        consumed = []
        for t, i in self.consumed.items():
            db, table = t.split(".")
            consumed.append(HiveAsset(i, f"{uri_prefix}{db}/{table}", db, table, (f"consume_{db}_{table}",)))
        return consumed  # the unconsumed asset has no scheduled_dags: Airflow's answer leaves it out here

    def paused_dags(self) -> set[str]:
        if self.assets_down:
            raise ConnectionError("Airflow's api-server is down")
        if self.dags_forbidden:
            raise AirflowApiError("GET /api/v2/dags: HTTP 403: Forbidden")
        return set(self.paused)

    def post_event(self, asset_id: int, partition_key: str, extra: dict[str, Any]) -> PostOutcome:
        if self.mode in ("ok", "timeout_after", "freeze"):
            self.events[(asset_id, partition_key)] += 1
            self.extras.append(extra)
            self.taken.append((len(self.taken) + 1, {**extra, "asset_id": asset_id}, self.clock()))
        if self.mode == "freeze":
            raise Frozen(len(self.taken))
        if self.mode == "ok":
            return PostOutcome("delivered", "", len(self.taken))
        if self.mode == "reject":
            return PostOutcome("rejected", "HTTP 422: invalid")
        if self.mode == "down":
            return PostOutcome("retry", "ConnectError: connection refused")
        return PostOutcome("unknown", "ReadTimeout: read timed out")

    def find_events(self, asset_id: int, since: datetime, until: datetime | None, marks: dict[str, Any]) -> EventLookup:
        self.lookups += 1
        self.windows.append((since, until))
        if self.lookups_down or self.mode not in ("ok", "reject", "freeze"):
            found = EventLookup(False, detail="HTTP 500: Internal Server Error")
        else:
            found = EventLookup(
                True,
                tuple(
                    i
                    for i, extra, at in self.taken
                    if extra["asset_id"] == asset_id
                    and at >= since
                    and (until is None or at <= until)
                    and all(extra.get(k) == v for k, v in marks.items())
                ),
            )
        self.after_lookup()
        return found


LANDINGS_SETTINGS = {
    "smart_sensor__lease_timeout": "30",
    "smart_sensor__heartbeat_interval": "10",
    "landings__retry_base": "1",
    "landings__retry_max": "8",
    "landings__assets_refresh_interval": "60",
    "landings__batch": "3",
    "landings__asset_uri_prefix": PREFIX,
}


def landings_cfg(home: Path, url: str, **overrides: str) -> Config:
    return make_cfg(home, url, **{**LANDINGS_SETTINGS, **overrides})


class CatalogListings:
    """A catalog that lists every table at every call (as the thrift and Spark backends do), by ``names``: a table's
    partition names, None when it is missing; a CheckError it raises is that table's answer. With ``ids`` (a
    table's names → the metastore's id of each), it tells the ids of what it listed, as the change record does."""

    follows_changes = False

    def __init__(
        self,
        names: Callable[[str, str], list[str] | None],
        ids: Callable[[str, str], dict[str, int]] | None = None,
    ) -> None:
        self.names = names
        self.ids = ids
        self.listed_ids: dict[tuple[str, str], dict[str, int]] = {}

    def listings(self, tables: Sequence[TableName]) -> tuple[dict[TableName, Any], int]:
        out: dict[TableName, Any] = {}
        for key in tables:
            db, table = key
            try:
                out[key] = self.names(db, table)
                if self.ids is not None:
                    self.listed_ids[(db, table)] = self.ids(db, table)
            except CheckError as exc:
                out[key] = exc
        return out, len(tables)

    def relist(self) -> None:
        """Every call lists every table."""

    def partition_ids(self, db: str, table: str) -> dict[str, int] | None:
        """The ids of the names last listed (None without ``ids``: a listing cannot tell a partition dropped and
        added again from one kept)."""
        return self.listed_ids.get((db, table)) if self.ids is not None else None


def listing(catalog: dict[str, list[str]]) -> CatalogListings:
    """The catalog's partition names of each table as a publisher lists them (None: the catalog has no such table)."""
    return CatalogListings(lambda db, table: list(catalog[f"{db}.{table}"]) if f"{db}.{table}" in catalog else None)


def publisher(
    engine: Engine,
    cfg: Config,
    airflow: AirflowDouble,
    catalog: dict[str, list[str]],
    owner: str,
    clock: Callable[[], datetime],
) -> LandingPublisher:
    return LandingPublisher(SqlOutboxStore(engine), cfg, airflow, listing(catalog), owner, clock=clock)


def outbox(engine: Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(select(LO).order_by(LO.c.id))]


def test_landings_are_published_once_with_their_key_after_the_baseline(tmp_path: Path, db_url: str) -> None:
    """Two workers over the same tables: what was there at switch-on is the baseline; a landing is enqueued once
    however many workers list it, posted once with its partition key, and `status` shows the backlog while
    Airflow is down and its oldest landing."""
    cfg = landings_cfg(tmp_path, db_url)
    engine = make_engine(db_url)
    init_db(engine)
    clock = Clock(T0)
    airflow = AirflowDouble()
    catalog = {"db.a": ["ds=2026-11-26/hr=00"], "db.b": [], "db.c": ["ds=2026-11-26/hr=00"]}
    everything = [(0, cfg.shard_code_upper_limit)]
    one = publisher(engine, cfg, airflow, catalog, "w1", clock)
    two = publisher(engine, cfg, airflow, catalog, "w2", clock)
    try:
        first = one.cycle(everything)
        assert (first.watched, first.baseline, first.enqueued, first.delivered) == (2, 1, 0, 0)
        catalog["db.a"].append("ds=2026-11-27/hr=00")
        catalog["db.b"].append("ds=2026-11-27/hr=05")
        airflow.mode = "down"
        for worker in (one, two):
            worker.enqueue(everything, clock(), CycleReport())
        assert sorted(r["partition_name"] for r in outbox(engine) if r["state"] == PENDING) == [
            "ds=2026-11-27/hr=00",
            "ds=2026-11-27/hr=05",
        ]
        clock.advance(5)
        failed = two.cycle(everything)
        assert failed.retried == 2 and len(failed.errors) == 2
        status = collect_landings(SqlStatusReads(engine), clock(), SHARD_LIMIT)
        assert (status.backlog, status.oldest_age, status.watched_tables) == (2, 5.0, 2)
        assert any("backlog 2, the oldest landed 5 s ago" in line for line in landings_lines(status))
        assert any(f"({T0.replace(tzinfo=None).isoformat()})" in line for line in landings_lines(status))  # naive UTC
        shown = status_with_landings(tmp_path, db_url, engine, clock())
        assert shown.as_json()["landings"]["backlog"] == 2
        metrics = render_metrics(shown).decode()
        assert "smartsensor_landings_backlog 2.0" in metrics and 'smartsensor_landings{state="pending"} 2.0' in metrics
        assert "smartsensor_landings_oldest_undelivered_seconds 5.0" in metrics
        airflow.mode = "ok"
        clock.advance(2)  # past the first backoff (1 s, less jitter)
        done = one.cycle(everything)
        assert done.delivered == 2
        assert airflow.events == Counter({(1, "2026-11-27|00"): 1, (2, "2026-11-27|05"): 1})
        assert {e["hive_partition"] for e in airflow.extras} == {"ds=2026-11-27/hr=00", "ds=2026-11-27/hr=05"}
        assert {e["landed_at"] for e in airflow.extras} == {T0.strftime("%Y-%m-%dT%H:%M:%SZ")}  # one offset: Z
        assert two.cycle(everything).claimed == 0 and sum(airflow.events.values()) == 2
        status = collect_landings(SqlStatusReads(engine), clock(), SHARD_LIMIT)
        assert (status.backlog, status.duplicates, status.unknown_outcomes) == (0, 0, 0)
        assert status.by_state == {BASELINE: 1, DELIVERED: 2}
    finally:
        engine.dispose()


def status_with_landings(tmp_path: Path, db_url: str, engine: Engine, now: datetime, **overrides: str) -> StatusReport:
    """`status` as a host with ``[landings] publish`` on reports it (the publisher's settings need not work here)."""
    cfg = make_cfg(
        tmp_path / "status-home",
        db_url,
        **overrides,
        landings__publish="true",
        landings__airflow_url="http://airflow:8080",
        landings__airflow_username="smartsensor",
        landings__airflow_password_file=str(tmp_path / "unused"),
        landings__asset_uri_prefix=PREFIX,
    )
    return collect_status(SqlStatusReads(engine), cfg, now)


@contextmanager
def one_worker(
    tmp_path: Path, db_url: str, **overrides: str
) -> Iterator[tuple[Engine, Clock, AirflowDouble, dict[str, list[str]], list[tuple[int, int]], LandingPublisher]]:
    """A fresh outbox with one worker holding every range over tables db.a and db.b, empty; the engine disposed
    after."""
    cfg = landings_cfg(tmp_path, db_url, **overrides)
    engine = make_engine(db_url)
    init_db(engine)
    clock = Clock(T0)
    airflow = AirflowDouble(clock)
    catalog: dict[str, list[str]] = {"db.a": [], "db.b": []}
    try:
        yield (
            engine,
            clock,
            airflow,
            catalog,
            [(0, cfg.shard_code_upper_limit)],
            publisher(engine, cfg, airflow, catalog, "w1", clock),
        )
    finally:
        engine.dispose()


def test_a_claim_is_ended_only_by_its_holder_and_a_late_post_is_counted(tmp_path: Path, db_url: str) -> None:
    with one_worker(tmp_path, db_url) as (engine, clock, airflow, catalog, ranges, one):
        one.cycle(ranges)
        catalog["db.a"].append("ds=1")
        one.enqueue(ranges, clock(), CycleReport())
        first = landing_sql.claim_landings(engine, ranges, "w1", "t1", clock(), clock() + timedelta(seconds=30), 5)
        assert [r.partition_key for r in first] == ["1"]
        assert landing_sql.claim_landings(engine, ranges, "w2", "t2", clock(), clock() + timedelta(seconds=30), 5) == []
        assert landing_sql.begin_post(engine, first[0].id, "t1", clock(), clock() + timedelta(seconds=30))
        clock.advance(31)  # w1 stalls past its claim, mid-post
        second = landing_sql.claim_landings(engine, ranges, "w2", "t2", clock(), clock() + timedelta(seconds=30), 5)
        assert [r.id for r in second] == [first[0].id] and second[0].attempts == 2
        assert not landing_sql.end_failed(engine, first[0].id, "t1", clock(), clock(), "late", unknown=False)
        until = clock() + timedelta(seconds=10)
        # w1's post landed late: the row is delivered at once, though w2 holds it; w2 then does not post it
        assert not landing_sql.end_delivered(engine, first[0].id, "t1", clock(), 1)
        (row,) = outbox(engine)
        assert (row["state"], row["posts"], row["claim_token"], row["unknown_since"]) == (DELIVERED, 1, None, None)
        assert not landing_sql.begin_post(engine, second[0].id, "t2", clock(), until)
        assert landing_sql.claim_landings(engine, ranges, "w3", "t3", clock() + timedelta(days=1), until, 5) == []
        assert not landing_sql.end_delivered(engine, second[0].id, "t2", clock(), 2)  # had w2 posted anyway
        (row,) = outbox(engine)
        assert (row["state"], row["posts"], row["unknown_outcomes"], row["event_id"]) == (DELIVERED, 2, 1, 1)
        status = collect_landings(SqlStatusReads(engine), clock(), SHARD_LIMIT)
        assert (status.duplicates, status.unknown_outcomes, status.unresolved) == (1, 1, 0)


def test_tables_stay_watched_however_long_airflow_cannot_be_asked(tmp_path: Path, db_url: str) -> None:
    """Airflow (its api-server or database) down for longer than the watches' staleness (three refreshes): a landing
    meanwhile is still enqueued, by the worker that refreshed before and by one restarted during the outage, and
    published once Airflow is back. A table Airflow stops listing once it answers again goes stale as before."""
    with one_worker(tmp_path, db_url) as (engine, clock, airflow, catalog, ranges, one):
        one.cycle(ranges)
        airflow.assets_down, airflow.mode = True, "down"
        clock.advance(10 * 60)  # ten refresh intervals without an answer
        catalog["db.a"].append("ds=1")
        assert one.cycle(ranges).enqueued == 1
        restarted = publisher(engine, one.cfg, airflow, catalog, "w1-restarted", clock)
        catalog["db.b"].append("ds=2")
        assert restarted.cycle(ranges).enqueued == 1  # before any refresh of its own worked
        airflow.assets_down, airflow.mode = False, "ok"
        clock.advance(60)
        assert restarted.cycle(ranges).delivered == 2
        assert airflow.events == Counter({(1, "1"): 1, (2, "2"): 1})
        del airflow.consumed["db.b"]  # its last consumer DAG is gone: Airflow answers without it from now on
        for _ in range(4):
            restarted.cycle(ranges)
            clock.advance(60)
        catalog["db.b"].append("ds=3")
        assert restarted.cycle(ranges).enqueued == 0 and restarted.watched == {("db", "a")}


def test_a_late_post_that_reached_airflow_is_never_posted_again(tmp_path: Path, db_url: str) -> None:
    """A worker's 2xx that arrives after its claim lapsed: a row nobody took over since is delivered at once; a row
    whose new holder then fails is delivered, not put back to pending (posting again would start a second run)."""
    with one_worker(tmp_path, db_url) as (engine, clock, airflow, catalog, ranges, one):
        one.cycle(ranges)
        catalog["db.a"] += ["ds=1", "ds=2"]
        one.enqueue(ranges, clock(), CycleReport())
        claim = landing_sql.claim_landings(engine, ranges, "w1", "t1", clock(), clock() + timedelta(seconds=30), 5)
        assert [r.partition_key for r in claim] == ["1", "2"]
        for row in claim:  # w1 posts both
            assert landing_sql.begin_post(engine, row.id, "t1", clock(), clock() + timedelta(seconds=30))
        clock.advance(31)  # w1 stalls past its claims; w2 takes the second row over, and its post fails
        (second,) = landing_sql.claim_landings(engine, ranges, "w2", "t2", clock(), clock() + timedelta(seconds=30), 1)
        assert second.partition_key == "1"
        later = clock() + timedelta(seconds=5)
        assert landing_sql.end_failed(engine, second.id, "t2", clock(), later, "refused", unknown=False)
        assert (outbox(engine)[0]["state"], outbox(engine)[0]["posts"]) == (PENDING, 0)
        # w1 wakes up: both its posts had reached Airflow; the first row is pending again, the second still claimed
        assert not landing_sql.end_delivered(engine, claim[0].id, "t1", clock(), 11)
        clock.advance(6)
        (third,) = landing_sql.claim_landings(engine, ranges, "w2", "t3", clock(), clock() + timedelta(seconds=30), 5)
        assert third.partition_key == "2"  # the first row is delivered: nothing to claim there
        assert not landing_sql.end_delivered(engine, claim[1].id, "t1", clock(), 12)  # settles it, held by t3
        assert not landing_sql.end_failed(engine, third.id, "t3", clock(), clock(), "timed out", unknown=True)
        rows = outbox(engine)
        assert [(r["state"], r["posts"], r["event_id"]) for r in rows] == [(DELIVERED, 1, 11), (DELIVERED, 1, 12)]
        assert all(r["delivered_at"] is not None and r["claim_token"] is None for r in rows)
        assert one.cycle(ranges).claimed == 0
        status = collect_landings(SqlStatusReads(engine), clock(), SHARD_LIMIT)
        assert (status.backlog, status.duplicates, status.unknown_outcomes) == (0, 0, 2)  # two takeovers


def test_a_worker_killed_mid_post_is_looked_up_never_posted_again(tmp_path: Path, db_url: str) -> None:
    """Issue 54: Airflow took the post, the worker died before reading the answer (the row left ``sending``). The
    worker that claims it once the claim lapsed asks Airflow first: it holds the event, so the row is delivered
    and nothing is posted. While Airflow cannot answer (a 500) the row waits, named in `status` with since when,
    and past ``unknown_outcome_patience`` called unknowable, still not posted. A post that never reached Airflow
    is found absent and posted, once."""
    with one_worker(tmp_path, db_url, landings__unknown_outcome_patience="60") as (
        engine,
        clock,
        airflow,
        catalog,
        ranges,
        one,
    ):
        one.cycle(ranges)
        catalog["db.a"] += ["ds=1"]
        airflow.mode = "freeze"  # Airflow commits the event; the worker is killed before it reads the answer
        assert one.cycle(ranges).delivered == 0
        (row,) = outbox(engine)
        assert (row["state"], row["unknown_since"]) == (SENDING, None) and airflow.by_landing() == {row["id"]: 1}
        airflow.mode, airflow.lookups_down = "ok", True
        clock.advance(31)  # the claim lapses
        two = publisher(engine, one.cfg, airflow, catalog, "w2", clock)
        waited = two.cycle(ranges)
        assert (waited.claimed, waited.unanswered, waited.delivered) == (1, 1, 0), waited
        (row,) = outbox(engine)
        assert (row["state"], row["unknown_outcomes"], row["unknown_since"]) == (PENDING, 1, T0)  # since its post
        status = collect_landings(SqlStatusReads(engine), clock(), SHARD_LIMIT, patience=60)
        assert status.unresolved == 1 and not status.unresolved_landings[0].unknowable
        (shown,) = [line for line in landings_lines(status) if line.startswith("  landing ")]
        assert f"landing {row['id']} db.a ds=1: outcome unknown since" in shown and "asking Airflow" in shown, shown
        assert "HTTP 500" in shown
        for _ in range(5):  # Airflow cannot answer for longer than the patience: still not posted
            clock.advance(20)
            two.cycle(ranges)
        assert airflow.by_landing() == {row["id"]: 1} and outbox(engine)[0]["state"] == PENDING
        status = collect_landings(SqlStatusReads(engine), clock(), SHARD_LIMIT, patience=60)
        assert status.unresolved_landings[0].unknowable
        assert any("UNKNOWABLE so far" in line for line in landings_lines(status))
        report = status_with_landings(tmp_path, db_url, engine, clock(), landings__unknown_outcome_patience="60")
        assert [p for p in report.problems if p.startswith(f"landing {row['id']} (db.a ds=1) of unknown outcome")]
        assert report.as_json()["landings"]["unresolved_landings"][0]["landing_id"] == row["id"]
        assert "smartsensor_landings_unresolved 1.0" in render_metrics(report).decode()
        airflow.lookups_down = False
        clock.advance(20)
        found = two.cycle(ranges)
        assert airflow.windows[-1] == (T0 - timedelta(seconds=30 + 300), T0 + timedelta(seconds=30 + 10 + 300))
        assert (found.found, found.delivered) == (1, 0), found
        (row,) = outbox(engine)
        assert (row["state"], row["posts"], row["event_id"], row["unknown_since"]) == (DELIVERED, 0, 1, None)
        assert airflow.by_landing() == {row["id"]: 1}
        assert collect_landings(SqlStatusReads(engine), clock(), SHARD_LIMIT).unresolved == 0
        # killed as its post began, before it left: Airflow holds nothing, so the next claimant posts it, once
        catalog["db.a"] += ["ds=2"]
        one.enqueue(ranges, clock(), CycleReport())
        claimed = landing_sql.claim_landings(engine, ranges, "w1", "t9", clock(), clock() + timedelta(seconds=30), 5)
        assert [c.partition_key for c in claimed] == ["2"]
        assert landing_sql.begin_post(engine, claimed[0].id, "t9", clock(), clock() + timedelta(seconds=30))
        clock.advance(31)
        asked = airflow.lookups
        assert two.cycle(ranges).delivered == 1 and airflow.lookups == asked + 1
        assert sorted(airflow.by_landing().values()) == [1, 1]
        # issue 67, defect 7: killed after claiming, before any post began: claimed again, nothing to look up
        catalog["db.a"] += ["ds=3"]
        one.enqueue(ranges, clock(), CycleReport())
        claimed = landing_sql.claim_landings(engine, ranges, "w1", "t10", clock(), clock() + timedelta(seconds=30), 5)
        assert [c.partition_key for c in claimed] == ["3"]
        clock.advance(31)
        asked = airflow.lookups
        assert two.cycle(ranges).delivered == 1 and airflow.lookups == asked
        assert outbox(engine)[-1]["unknown_outcomes"] == 0
        assert sorted(airflow.by_landing().values()) == [1, 1, 1]


def test_a_late_2xx_after_two_claims_lapsed_is_never_followed_by_a_third_post(tmp_path: Path, db_url: str) -> None:
    """Issue 54's review: w1 posts and stalls, w2 takes the row over, w1's 2xx is counted, w2 dies, w3 comes. The
    late 2xx settles the row delivered though w2 holds it: w2 (had it lived) would not post it, and w3 claims
    nothing. One event."""
    with one_worker(tmp_path, db_url) as (engine, clock, airflow, catalog, ranges, one):
        one.cycle(ranges)
        catalog["db.a"] += ["ds=1"]
        one.enqueue(ranges, clock(), CycleReport())
        (mine,) = landing_sql.claim_landings(engine, ranges, "w1", "t1", clock(), clock() + timedelta(seconds=30), 5)
        airflow.mode = "freeze"
        try:
            one._attempt(mine, CONSUMED["db.a"], CycleReport())
            raise AssertionError("the post did not go out")
        except Frozen as frozen:
            event = frozen.event_id
        airflow.mode = "ok"
        clock.advance(31)  # w1 stalls past its claim; w2 takes the row over
        two = publisher(engine, one.cfg, airflow, catalog, "w2", clock)
        (theirs,) = landing_sql.claim_landings(engine, ranges, "w2", "t2", clock(), clock() + timedelta(seconds=30), 5)
        assert theirs.unknown_outcomes == 1
        one.end_attempt(mine, PostOutcome("delivered", "", event), CycleReport())  # w1 wakes: its 2xx, counted
        (row,) = outbox(engine)
        assert (row["state"], row["posts"], row["event_id"], row["claim_token"]) == (DELIVERED, 1, event, None)
        report = CycleReport()
        two._attempt(theirs, CONSUMED["db.a"], report)  # had w2 lived: it does not post
        assert report.lost_claims == 1 and airflow.lookups == 1 and airflow.by_landing() == {row["id"]: 1}
        clock.advance(31)  # w2 dies; w3 comes after its claim lapsed
        three = publisher(engine, one.cfg, airflow, catalog, "w3", clock)
        assert three.cycle(ranges).claimed == 0
        assert (
            airflow.by_landing() == {row["id"]: 1}
            and collect_landings(SqlStatusReads(engine), clock(), SHARD_LIMIT).duplicates == 0
        )


def test_a_cycle_hands_back_what_it_did_not_post_once_airflow_keeps_failing(tmp_path: Path, db_url: str) -> None:
    """Three failed posts in a row end the cycle's batch: the rows it claimed and never posted are pending again at
    once, their attempt not counted, and none of them is an unknown outcome."""
    with one_worker(tmp_path, db_url, landings__batch="5") as (engine, clock, airflow, catalog, ranges, one):
        one.cycle(ranges)
        catalog["db.a"] += [f"ds={day}" for day in range(1, 6)]
        airflow.mode = "down"
        report = one.cycle(ranges)
        assert (report.claimed, report.retried, report.released) == (5, 3, 2), report
        rows = outbox(engine)
        assert sorted((r["state"], r["attempts"], r["last_error"] is not None) for r in rows) == [
            (PENDING, 0, False),
            (PENDING, 0, False),
            (PENDING, 1, True),
            (PENDING, 1, True),
            (PENDING, 1, True),
        ]
        assert all(r["claim_token"] is None and r["unknown_outcomes"] == 0 for r in rows)
        airflow.mode = "ok"
        assert one.cycle(ranges).delivered == 2  # the two handed back are due at once; the others after a backoff
        clock.advance(2)
        assert one.cycle(ranges).delivered == 3
        assert sorted(airflow.events.values()) == [1, 1, 1, 1, 1]


def test_a_slow_look_up_still_posts_its_row_and_holds_up_nothing(tmp_path: Path, db_url: str) -> None:
    """Issue 67, defect 1: a row of unknown outcome whose look-up takes 25 s of a 30 s claim (Airflow slow, 10 pages
    of 10 s would be worse): once Airflow says it holds nothing the row is posted (its claim extended as the post
    begins), and the rows claimed with it are posted in the same cycle. Before, the row was handed back unposted
    every cycle, and every other row of the worker's ranges with it."""
    with one_worker(tmp_path, db_url) as (engine, clock, airflow, catalog, ranges, one):
        one.cycle(ranges)
        catalog["db.a"] += ["ds=1"]
        airflow.mode = "timeout_before"  # lost on the way: of unknown outcome, Airflow holds nothing
        assert one.cycle(ranges).retried == 1
        catalog["db.a"] += ["ds=2", "ds=3"]
        one.enqueue(ranges, clock(), CycleReport())
        airflow.mode = "ok"
        airflow.after_lookup = lambda: clock.advance(25)
        clock.advance(2)
        report = one.cycle(ranges)
        assert (report.claimed, report.delivered, report.released, report.lost_claims) == (3, 3, 0, 0), report
        assert airflow.lookups == 1 and sorted(airflow.by_landing().values()) == [1, 1, 1]
        assert all(r["state"] == DELIVERED and r["post_started_at"] is None for r in outbox(engine)[-3:])


def test_an_outcome_known_since_is_not_looked_up_again(tmp_path: Path, db_url: str) -> None:
    """Issue 67, defect 2: a look-up found nothing, the post that followed failed in a way Airflow did not take (a
    503): nothing is unknown any more, so the next attempt posts with no look-up, and `status` does not list it as
    unresolved meanwhile. A look-up's window ends a claim and a request after the outcome became unknown."""
    with one_worker(tmp_path, db_url) as (engine, clock, airflow, catalog, ranges, one):
        one.cycle(ranges)
        catalog["db.a"] += ["ds=1"]
        airflow.mode = "timeout_before"
        one.cycle(ranges)
        (row,) = outbox(engine)
        assert row["unknown_since"] == T0
        airflow.mode = "ok"
        airflow.after_lookup = lambda: setattr(airflow, "mode", "down")  # found nothing; then the post meets a 503
        clock.advance(2)
        assert one.cycle(ranges).retried == 1 and airflow.lookups == 1
        assert airflow.windows == [(T0 - timedelta(seconds=30 + 300), T0 + timedelta(seconds=30 + 10 + 300))]
        (row,) = outbox(engine)
        assert (row["state"], row["unknown_since"], row["unknown_outcomes"]) == (PENDING, None, 1)
        assert collect_landings(SqlStatusReads(engine), clock(), SHARD_LIMIT).unresolved == 0
        airflow.after_lookup, airflow.mode = (lambda: None), "ok"
        clock.advance(4)
        assert one.cycle(ranges).delivered == 1 and airflow.lookups == 1  # posted, not looked up
        assert airflow.by_landing() == {row["id"]: 1}


def test_reshard_moves_the_watched_tables_with_their_landings(tmp_path: Path, db_url: str) -> None:
    """Issue 67, defect 4: after ``shard_code_upper_limit`` is lowered (the documented procedure), `db reshard`
    moves each watched table and its outbox rows below the new limit, where a worker's ranges find them; before,
    only the tasks moved and a table could fall in no range, its landings never published."""
    with one_worker(tmp_path, db_url) as (engine, clock, airflow, catalog, ranges, one):
        one.cycle(ranges)
        catalog["db.a"] += ["ds=1"]
        airflow.mode = "down"
        one.cycle(ranges)  # enqueued, not delivered
        limit = 10
        cfg = landings_cfg(tmp_path / "lower", db_url, smart_sensor__shard_code_upper_limit=str(limit))
        smaller = publisher(engine, cfg, airflow, catalog, "w2", clock)
        assert all(w.shardcode >= limit for w in SqlOutboxStore(engine).read_watches([(0, 10**9)], EVER)), (
            "pick tables whose shardcodes are above the lower limit"
        )
        airflow.mode = "ok"
        clock.advance(60)
        assert smaller.cycle([(0, limit)]).delivered == 0  # nothing in its ranges
        orphaned = collect_landings(SqlStatusReads(engine), clock(), limit)
        assert orphaned.orphaned_tables == {"db.a": 1, "db.b": 0}
        assert any("db.a has a shardcode no range serves" in p for p in landing_problems(orphaned))
        assert landing_sql.reshard_watches(engine, limit) == 2
        assert collect_landings(SqlStatusReads(engine), clock(), limit).orphaned_tables == {}
        assert landing_sql.reshard_watches(engine, limit) == 0  # idempotent
        catalog["db.b"] += ["ds=2"]
        report = smaller.cycle([(0, limit)])
        assert (report.watched, report.delivered) == (2, 2), report
        assert all(r["shardcode"] < limit for r in outbox(engine))
        assert sorted(airflow.by_landing().values()) == [1, 1]


def test_a_key_no_mapper_could_read_is_refused_and_shown_with_why(tmp_path: Path, db_url: str) -> None:
    """Issue 67, defect 9: ``region=eu|us/ds=1`` would be three fields for two columns (Airflow would take the event
    and start no run): refused for good, never posted, and `status` names it with the reason."""
    with one_worker(tmp_path, db_url) as (engine, clock, airflow, catalog, ranges, one):
        one.cycle(ranges)
        catalog["db.a"] += ["region=eu|us/ds=1", "region=eu/ds=1"]
        report = one.cycle(ranges)
        assert (report.rejected, report.delivered) == (1, 1), report
        assert airflow.events == Counter({(1, "eu|1"): 1})
        status = collect_landings(SqlStatusReads(engine), clock(), SHARD_LIMIT)
        (refused,) = status.rejected_landings
        assert (refused.table, refused.partition) == ("db.a", "region=eu|us/ds=1") and "delimiter" in str(refused.why)
        assert any(
            line.startswith(f"  landing {refused.landing_id} db.a region=eu|us/ds=1: ")
            for line in landings_lines(status)
        )
        report_json = status_with_landings(tmp_path, db_url, engine, clock()).as_json()
        assert report_json["landings"]["rejected_landings"][0]["partition"] == "region=eu|us/ds=1"


def test_a_table_whose_consumer_is_paused_is_named_in_status(tmp_path: Path, db_url: str) -> None:
    """Issue 67, defect 8: Airflow takes an event for a paused consumer and queues no run of it, now or once it is
    unpaused (its own rule: smartsensor publishes as usual); `status` names the tables whose consumers are paused
    at Airflow's last listing, until they are unpaused."""
    with one_worker(tmp_path, db_url) as (engine, clock, airflow, catalog, ranges, one):
        one.cycle(ranges)
        assert collect_landings(SqlStatusReads(engine), clock(), SHARD_LIMIT).paused_consumers == {}
        airflow.paused = {"consume_db_a", "some_other_dag"}
        clock.advance(61)  # the next refresh of Airflow's assets
        catalog["db.a"] += ["ds=1"]
        assert one.cycle(ranges).delivered == 1  # published all the same: the event is Airflow's to keep
        status = collect_landings(SqlStatusReads(engine), clock(), SHARD_LIMIT)
        assert status.paused_consumers == {"db.a": "consume_db_a"}
        assert any("db.a: consumers paused in Airflow: consume_db_a" in line for line in landings_lines(status))
        airflow.paused = set()
        clock.advance(61)
        one.cycle(ranges)
        assert collect_landings(SqlStatusReads(engine), clock(), SHARD_LIMIT).paused_consumers == {}


def test_an_airflow_that_will_not_list_its_dags_still_gets_every_landing(
    tmp_path: Path, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The paused DAGs are for `status` only: an Airflow user without read on DAGs (403), or an API without the
    listing, leaves every table watched and published, said once in the log. (Before: reading Airflow's assets
    failed as a whole, and no table was watched at all.)"""
    with one_worker(tmp_path, db_url) as (engine, clock, airflow, catalog, ranges, one):
        airflow.dags_forbidden = True
        with caplog.at_level(logging.WARNING):
            one.cycle(ranges)
            catalog["db.a"] += ["ds=1"]
            assert one.cycle(ranges).delivered == 1
        assert airflow.events == Counter({(1, "1"): 1})
        said = [r.getMessage() for r in caplog.records if "paused DAGs" in r.getMessage()]
        assert len(said) == 1 and "403" in said[0], said
        assert collect_landings(SqlStatusReads(engine), clock(), SHARD_LIMIT).paused_consumers == {}


def test_two_events_found_for_one_landing_are_a_duplicate_counted(tmp_path: Path, db_url: str) -> None:
    """Issue 67, defect 10: a look-up that finds two events for a row counts one duplicate."""
    with one_worker(tmp_path, db_url) as (engine, clock, airflow, catalog, ranges, one):
        one.cycle(ranges)
        catalog["db.a"] += ["ds=1"]
        one.enqueue(ranges, clock(), CycleReport())
        (row,) = landing_sql.claim_landings(engine, ranges, "w1", "t1", clock(), clock() + timedelta(seconds=30), 5)
        assert landing_sql.end_found(engine, row.id, "t1", clock(), 7, events=2)
        assert collect_landings(SqlStatusReads(engine), clock(), SHARD_LIMIT).duplicates == 1


# -- the stateful model ------------------------------------------------------------------------------------

WORKERS = ("w1", "w2")
MODES = ("ok", "down", "timeout_after", "timeout_before", "reject")
RECREATED = ("db.a",)  # [landings] publish_recreated in the model


class OutboxModel(RuleBasedStateMachine):
    """Two workers over one outbox (``machine_for`` binds the database and the config)."""

    engine: Engine
    cfg: Config
    steps = 0
    republished = 0  # landings of a partition added again, over every example

    @property
    def halves(self) -> list[tuple[int, int]]:
        limit = self.cfg.shard_code_upper_limit
        return [(0, limit // 2), (limit // 2, limit)]

    @property
    def claim_seconds(self) -> float:
        return self.cfg.settings.smart_sensor.lease_timeout

    def __init__(self) -> None:
        super().__init__()
        with self.engine.begin() as conn:
            conn.execute(LO.delete())
            conn.execute(landing_sql.AW.delete())
        self.clock = Clock(T0)
        self.airflow = AirflowDouble(self.clock)
        self.catalog: dict[str, list[str]] = {"db.a": ["ds=0"], "db.b": [], "db.c": ["ds=0"]}
        # The metastore's id of each partition (a partition dropped and added again gets the next one), and how
        # often each was re-created: db.a's re-creations are published again (RECREATED), the others' never.
        self.ids: dict[str, dict[str, int]] = {"db.a": {"ds=0": 1}, "db.b": {}, "db.c": {"ds=0": 2}}
        self.history: dict[tuple[str, str], list[int]] = {("db.a", "ds=0"): [1], ("db.c", "ds=0"): [2]}  # its ids
        self.next_id = 3
        self.recreations: Counter[tuple[str, str]] = Counter()
        self.replica_ids: dict[str, dict[str, int]] = {}
        # What the workers' listings read: the metastore database itself, nothing (it is down), or a replica
        # promoted by a failover that lags (behind: the newer half of each table's partitions, all of db.b and the
        # latest re-creations are missing from it, and so are the landings while it serves) until it is whole again
        # (up).
        self.metastore = "up"
        self.replica: dict[str, list[str]] = {}
        self.owner: dict[tuple[int, int], str] = {self.halves[0]: "w1", self.halves[1]: "w2"}
        self.workers = {w: self._new(w) for w in WORKERS}
        self.in_flight: dict[str, list[landing_sql.ClaimedLanding]] = {w: [] for w in WORKERS}
        # posts Airflow took whose answer the worker has not read yet (it froze right after sending), with the id
        self.unread: dict[str, list[tuple[landing_sql.ClaimedLanding, int]]] = {w: [] for w in WORKERS}
        self.workers["w1"].refresh_watches(self.clock())

    def _new(self, worker: str) -> LandingPublisher:
        def names(db: str, table: str) -> list[str] | None:
            if self.metastore == "down":
                raise TransientCheckError("the metastore database is unreachable")
            listed = listing(self.replica if self.metastore == "behind" else self.catalog)
            return listed.names(db, table)

        def ids(db: str, table: str) -> dict[str, int]:
            return dict((self.replica_ids if self.metastore == "behind" else self.ids).get(f"{db}.{table}", {}))

        listings = CatalogListings(names, ids)
        return LandingPublisher(SqlOutboxStore(self.engine), self.cfg, self.airflow, listings, worker, clock=self.clock)

    def ranges(self, worker: str) -> list[tuple[int, int]]:
        return [r for r, w in self.owner.items() if w == worker]

    @rule(table=st.sampled_from(sorted(CONSUMED) + sorted(UNCONSUMED)), day=st.integers(1, 6))
    def land(self, table: str, day: int) -> None:
        """A partition lands, and each worker lists the watched tables of the ranges it holds."""
        name = f"ds={day}"
        if name not in self.catalog[table]:
            self.catalog[table].append(name)
            self.ids[table][name] = self.next_id
            self.history[(table, name)] = [self.next_id]
            self.next_id += 1
        for worker in WORKERS:
            self.workers[worker].enqueue(self.ranges(worker), self.clock(), CycleReport())

    @rule(table=st.sampled_from(sorted(CONSUMED) + sorted(UNCONSUMED)), data=st.data(), lower=st.booleans())
    def recreate(self, table: str, data: st.DataObject, lower: bool) -> None:
        """A partition is dropped and added again, and each worker lists. The metastore instance that adds it gives
        it the next id of its block, or (``lower``, issue 67 defect 3) another instance gives it an id below every
        one it had: each instance hands ids out from a block of its own."""
        if not self.catalog[table]:
            return
        name = data.draw(st.sampled_from(self.catalog[table]))
        new_id = -self.next_id if lower else self.next_id  # below every id handed out so far
        self.ids[table][name] = new_id
        self.history[(table, name)].append(new_id)
        self.next_id += 1
        self.recreations[(table, name)] += 1
        for worker in WORKERS:
            self.workers[worker].enqueue(self.ranges(worker), self.clock(), CycleReport())

    @rule(data=st.data())
    def claim(self, data: st.DataObject) -> None:
        worker = data.draw(st.sampled_from([w for w in WORKERS if self.ranges(w)]))
        now = self.clock()
        until = now + timedelta(seconds=self.claim_seconds)
        token = f"{worker}-{self.steps}"
        got = landing_sql.claim_landings(self.engine, self.ranges(worker), worker, token, now, until, 2)
        self.in_flight[worker] += got

    @precondition(lambda self: any(self.in_flight.values()))
    @rule(mode=st.sampled_from(MODES), data=st.data())
    def post(self, mode: str, data: st.DataObject) -> None:
        """A worker holding claimed rows posts one (perhaps after its claim lapsed) and ends it as it went."""
        worker = data.draw(st.sampled_from([w for w in WORKERS if self.in_flight[w]]))
        row = self.in_flight[worker].pop(data.draw(st.integers(0, len(self.in_flight[worker]) - 1)))
        self.airflow.mode = mode
        asset = CONSUMED[row.uri[len(PREFIX) :].replace("/", ".")]
        self.workers[worker]._attempt(row, asset, CycleReport())
        self.airflow.mode = "ok"

    @precondition(lambda self: any(self.in_flight.values()))
    @rule(data=st.data())
    def post_and_freeze(self, data: st.DataObject) -> None:
        """Issue 54: a worker posts one of its rows (looking it up first if its outcome is unknown), Airflow
        commits the event, and the worker freezes before it reads the answer: it is killed (``crash``) or reads
        the 2xx late (``read_late_answer``), perhaps after its claim lapsed and another worker took the row over."""
        worker = data.draw(st.sampled_from([w for w in WORKERS if self.in_flight[w]]))
        row = self.in_flight[worker].pop(data.draw(st.integers(0, len(self.in_flight[worker]) - 1)))
        self.airflow.mode = "freeze"
        asset = CONSUMED[row.uri[len(PREFIX) :].replace("/", ".")]
        try:
            self.workers[worker]._attempt(row, asset, CycleReport())
        except Frozen as frozen:
            self.unread[worker].append((row, frozen.event_id))
        finally:
            self.airflow.mode = "ok"

    @precondition(lambda self: any(self.unread.values()))
    @rule(data=st.data())
    def read_late_answer(self, data: st.DataObject) -> None:
        """A frozen worker wakes and reads its 2xx (its claim may have lapsed, the row taken over meanwhile)."""
        worker = data.draw(st.sampled_from([w for w in WORKERS if self.unread[w]]))
        row, event_id = self.unread[worker].pop(data.draw(st.integers(0, len(self.unread[worker]) - 1)))
        self.workers[worker].end_attempt(row, PostOutcome("delivered", "", event_id), CycleReport())

    @rule(down=st.booleans())
    def airflow_lookups(self, down: bool) -> None:
        """Airflow's event listing fails (3.3.2's 500 while a run is queued, an outage) or works again."""
        self.airflow.lookups_down = down

    @rule(worker=st.sampled_from(WORKERS), down=st.booleans())
    def cycle(self, worker: str, down: bool) -> None:
        """A whole cycle, Airflow up or down (its assets too)."""
        self.airflow.mode = "down" if down else "ok"
        self.airflow.assets_down = down
        self.workers[worker].cycle(self.ranges(worker))
        self.airflow.mode, self.airflow.assets_down = "ok", False

    @rule(state=st.sampled_from(["up", "down", "behind"]))
    def metastore_fails_over(self, state: str) -> None:
        """The metastore database goes down, or a replica that lags takes over (a table it has not heard of yet
        lists as missing), or it is whole again."""
        if state == "behind" and self.metastore != "behind":
            self.replica = {t: names[: (len(names) + 1) // 2] for t, names in self.catalog.items() if t != "db.b"}
            # the replica lags behind: a re-created partition has the id it had before there
            self.replica_ids = {
                t: {n: self.history[(t, n)][-2 if len(self.history[(t, n)]) > 1 else -1] for n in names}
                for t, names in self.replica.items()
            }
        self.metastore = state

    @rule(worker=st.sampled_from(WORKERS))
    def crash(self, worker: str) -> None:
        """The worker dies mid-publish (``kill -9``), perhaps with posts Airflow took whose answer it never read:
        its claims stay until they lapse; it restarts with no memory."""
        self.in_flight[worker] = []
        self.unread[worker] = []
        self.workers[worker] = self._new(worker)

    @rule(worker=st.sampled_from(WORKERS))
    def stall(self, worker: str) -> None:
        """The worker stalls past its claims and leases (a long GC pause, a partition): the other worker takes
        its ranges; what it had in flight it may still post when it wakes."""
        self.clock.advance(self.claim_seconds + 1)
        other = "w2" if worker == "w1" else "w1"
        self.owner = {r: other if w == worker else w for r, w in self.owner.items()}

    @rule(seconds=st.sampled_from([0.5, 3.0]))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @invariant()
    def nothing_lost_nothing_twice_unnoticed(self) -> None:
        type(self).steps += 1
        rows = outbox(self.engine)
        by_landing = self.airflow.by_landing()
        twice = {landing: n for landing, n in by_landing.items() if n > 1}
        assert not twice, twice  # each landing has at most one event in Airflow
        landings = Counter((r["uri"], r["partition_name"], r["generation"]) for r in rows)
        assert all(n == 1 for n in landings.values()), landings  # each landing once in the outbox
        generations: dict[tuple[str, str], set[int]] = {}
        for r in rows:
            generations.setdefault((r["uri"], r["partition_name"]), set()).add(r["generation"])
        for (uri, name), found in generations.items():
            table = uri[len(PREFIX) :].replace("/", ".")
            assert found == set(range(len(found))), (uri, name, found)  # one after another, from 0
            chosen = table in RECREATED
            assert len(found) - 1 <= (self.recreations[(table, name)] if chosen else 0), (table, name, found)
        for r in rows:
            table = r["uri"][len(PREFIX) :].replace("/", ".")
            assert table in CONSUMED, r  # no row for a table nobody consumes
            assert r["partition_name"] in self.catalog[table]  # only what landed
            assert r["partition_key"] == partition_key(r["partition_name"])
            took = by_landing[r["id"]]
            # every post Airflow took is counted (but the one whose answer the row's holder has not read yet)
            in_flight = 1 if r["state"] == SENDING else 0
            assert r["posts"] <= took <= r["posts"] + r["unknown_outcomes"] + in_flight, r
            if r["state"] == BASELINE:
                assert took == 0, r
            if r["state"] == DELIVERED:
                assert took >= 1 and r["claim_token"] is None, r
            if r["state"] == SENDING:
                assert r["claim_token"] and r["claimed_until"], r
            if r["posts"] >= 1:
                assert r["state"] == DELIVERED, r  # a row a 2xx was read for is never claimed or posted again
            if r["state"] == PENDING and took:
                assert r["unknown_outcomes"] >= 1, r  # Airflow holds it: the row knows to ask before it posts
        assert not any(asset == UNCONSUMED["db.c"] for asset, _ in self.airflow.events)

    def teardown(self) -> None:
        """Everything quiet, Airflow up, one worker holding every range: each landing after the baseline is
        delivered (or refused for good) within a bounded number of cycles."""
        self.owner = {r: "w1" for r in self.halves}
        self.metastore = "up"
        self.airflow.lookups_down = False
        drainer = self._new("w1")
        for _ in range(30):
            self.clock.advance(self.claim_seconds + 10)  # past every claim and backoff
            drainer.cycle(self.ranges("w1"))
            if not any(r["state"] in (PENDING, SENDING) for r in outbox(self.engine)):
                break
        rows: dict[tuple[str, str], dict[str, Any]] = {}
        OutboxModel.republished += sum(1 for r in outbox(self.engine) if r["generation"] > 0)
        for r in outbox(self.engine):  # each name's latest landing
            latest = rows.get((r["uri"], r["partition_name"]))
            if latest is None or r["generation"] > latest["generation"]:
                rows[(r["uri"], r["partition_name"])] = r
        for table in CONSUMED:
            uri = PREFIX + table.replace(".", "/")
            for name in self.catalog[table]:
                row = rows.get((uri, name))
                assert row is not None, (table, name)  # every landing reached the outbox
                assert row["state"] in (BASELINE, DELIVERED, REJECTED), row
                if table in RECREATED:  # its latest re-creation reached the outbox too
                    ids = {r["part_id"] for r in outbox(self.engine) if (r["uri"], r["partition_name"]) == (uri, name)}
                    assert self.ids[table][name] in ids, (table, name, ids, self.ids[table])
        self.nothing_lost_nothing_twice_unnoticed()


def machine_for(engine: Engine, cfg: Config) -> type[OutboxModel]:
    return type("Outbox", (OutboxModel,), {"engine": engine, "cfg": cfg})


STEPS = int(os.environ.get("SMARTSENSOR_MODEL_STEPS", "3000"))


def run_machine(engine: Engine, cfg: Config, examples: int, steps: int) -> None:
    assert cfg.settings.landings.publish_recreated == list(RECREATED)
    init_db(engine)
    OutboxModel.republished = 0
    run_model(machine_for(engine, cfg), examples, steps)
    assert OutboxModel.republished > 0, "no example published a partition added again"


def test_no_landing_is_lost_or_published_twice_unnoticed_on_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    engine = make_engine(url)
    try:
        cfg = landings_cfg(tmp_path, url, landings__publish_recreated=",".join(RECREATED))
        run_machine(engine, cfg, examples=max(STEPS // 40, 5), steps=40)
    finally:
        engine.dispose()


@needs_test_pg
def test_no_landing_is_lost_or_published_twice_unnoticed_on_postgresql(tmp_path: Path) -> None:
    with pg_engine() as (engine, url):
        cfg = landings_cfg(tmp_path, url, landings__publish_recreated=",".join(RECREATED))
        run_machine(engine, cfg, examples=max(STEPS // 200, 5), steps=40)


def test_the_outbox_serves_claims_through_its_partial_index(tmp_path: Path) -> None:
    """A claim reads only undelivered rows: on SQLite its candidates come through ``outbox_undelivered``."""
    url = f"sqlite:///{tmp_path / 'plan.db'}"
    engine = make_engine(url)
    init_db(engine)
    try:
        with engine.connect() as conn:
            plan = " ".join(
                str(r)
                for r in conn.exec_driver_sql(
                    "EXPLAIN QUERY PLAN SELECT id FROM landing_outbox WHERE state IN ('pending', 'sending') "
                    "AND shardcode >= 0 AND shardcode < 10 AND next_attempt_at <= ?",
                    (datetime(2026, 11, 27),),
                ).fetchall()
            )
        assert "outbox_undelivered" in plan, plan
    finally:
        engine.dispose()


def test_a_worker_publishes_the_landings_of_the_ranges_its_leases_hold(tmp_path: Path, db_url: str) -> None:
    """A worker runs the publisher over ``LeasedRanges.held_ranges`` (nothing before it holds a lease): its
    ``landings`` side job at once, then a landing signal on a watched table runs a cycle at once, however long
    ``[landings] interval`` is."""
    import threading

    from smartsensor.adapters.periodic import PeriodicJobs
    from smartsensor.adapters.sql.signals import SqlLandingSignals
    from smartsensor.roots.worker import leased_ranges, worker_loop
    from smartsensor.service.signals import send_signal
    from tests.support.common import wait_until

    cfg = make_cfg(tmp_path, db_url, landings__asset_uri_prefix=PREFIX, landings__interval="3600")
    engine = make_engine(db_url)
    init_db(engine)
    airflow = AirflowDouble()
    catalog: dict[str, list[str]] = {"db.a": ["ds=0"], "db.b": []}
    served = leased_ranges(engine, cfg)
    landings = publisher(engine, cfg, airflow, catalog, served.worker_id, clock.now)
    assert served.held_ranges() == [] and landings.cycle(served.held_ranges()).watched == 0
    loop = worker_loop(engine, cfg, served, 60.0, False, lambda _result: None, landings=landings)
    jobs = PeriodicJobs("test")
    loop.side_jobs(jobs)
    assert jobs.jobs()["landings"] == 3600
    worker = threading.Thread(target=loop.start, name="worker")
    worker.start()
    try:
        wait_until(lambda: {r["state"] for r in outbox(engine)} == {BASELINE}, timeout=60)
        assert served.held_ranges() == [(r.lo, r.hi) for r in cfg.resolved_shard_ranges]
        catalog["db.b"].append("ds=1/hr=2")
        send_signal(SqlLandingSignals(engine), "db.b/ds=1/hr=2")
        wait_until(lambda: airflow.events == Counter({(2, "1|2"): 1}), timeout=60)
        wait_until(lambda: [r["state"] for r in outbox(engine)] == [BASELINE, DELIVERED], timeout=60)
    finally:
        loop.stop()
        worker.join(timeout=60)
        engine.dispose()
    assert not worker.is_alive()


# -- the metastore database failing over ---------------------------------------------------------------------


def test_a_failover_of_the_metastore_database_loses_no_landing_and_publishes_none_twice(
    tmp_path: Path, private_pg: PrivateServer
) -> None:
    """The workers list the metastore database itself (catalog_backend = metastore_db) on a server of the test's
    own. Its primary dies with a partition committed that its replica has not received, and the replica is
    promoted at the same address: the cycles while it is down list nothing and lose nothing; the promoted replica
    lacks the partition, so nothing is published for it until the pipeline commits it again; then it and the next
    landing are published once each, and what was published before the failover is not published again."""
    meta_url = private_pg.new_database()
    meta = make_engine(meta_url)
    hive = HiveSchema(meta)
    hive.create_table("db", "a", {"ds": "string"})
    hive.add("db", "a", "ds=0", 1)
    outbox_url = f"sqlite:///{tmp_path / 'outbox.db'}"
    cfg = landings_cfg(
        tmp_path, outbox_url, smart_sensor__catalog_backend="metastore_db", catalog__metastore_db_url=meta_url
    )
    engine = make_engine(outbox_url)
    init_db(engine)
    clock, airflow, ranges = Clock(T0), AirflowDouble(), [(0, cfg.shard_code_upper_limit)]
    worker = LandingPublisher(SqlOutboxStore(engine), cfg, airflow, landing_listings(cfg), "w1", clock=clock)
    data = private_pg.folder / "data"
    replica = private_pg.folder / "replica"

    def cycle() -> CycleReport:
        clock.advance(3)  # past any backoff
        return worker.cycle(ranges)

    try:
        assert cycle().baseline == 1  # ds=0 was there before
        hive.add("db", "a", "ds=1", 2)
        assert cycle().delivered == 1
        meta.dispose()
        private_pg.stop()
        subprocess.run(["cp", "-a", str(data), str(replica)], check=True)  # the replica, as of now
        private_pg.start()
        hive.add("db", "a", "ds=2", 3)  # committed on the primary only
        meta.dispose()
        private_pg.stop()  # the primary dies
        down = [cycle() for _ in range(2)]
        assert all(r.listed == 0 and any("listing db.a" in e for e in r.errors) for r in down), down
        shutil.move(str(data), str(private_pg.folder / "old-primary"))
        shutil.move(str(replica), str(data))
        private_pg.start()  # the replica promoted, at the primary's address
        listed = [cycle() for _ in range(2)]  # the lister's pooled connections went with the old server
        # Read again without an error (one statement: the change record; db.a unchanged, db.b not in this catalog)
        assert not listed[-1].errors and listed[-1].catalog_calls == 1, listed
        assert sum(r.enqueued for r in listed) == 0  # ds=2 is not in the promoted catalog: nothing landed
        hive.add("db", "a", "ds=2", 3)  # the pipeline commits it again
        hive.add("db", "a", "ds=3", 4)
        assert cycle().delivered == 2
        assert cycle().delivered == 0
    finally:
        meta.dispose()
        engine.dispose()
    assert airflow.events == Counter({(1, "1"): 1, (1, "2"): 1, (1, "3"): 1})
    states = {r["partition_name"]: r["state"] for r in outbox(engine)}
    assert states == {"ds=0": BASELINE, "ds=1": DELIVERED, "ds=2": DELIVERED, "ds=3": DELIVERED}, states


# -- the change record: a cost per landing, not per table -----------------------------------------------------


@needs_test_pg
def test_following_the_change_record_costs_one_statement_a_cycle_whatever_the_tables_watched(tmp_path: Path) -> None:
    """On ``metastore_db`` with its feed, a cycle reads what the metastore added since the last one in one statement
    for all 300 watched tables: none listed while nothing lands, only the tables a partition landed on afterwards;
    a watched table missing at first is published from its first partition once it is created."""
    name, meta_url = new_pg_database()
    meta = make_engine(meta_url)
    tables = [f"t{i:03d}" for i in range(300)]
    try:
        hive = HiveSchema(meta)
        for i, table in enumerate(tables):
            hive.create_table("db", table, {"ds": "string"})
            hive.add("db", table, "ds=0", i + 1)
        outbox_url = f"sqlite:///{tmp_path / 'outbox.db'}"
        cfg = landings_cfg(
            tmp_path,
            outbox_url,
            smart_sensor__catalog_backend="metastore_db",
            catalog__metastore_db_url=meta_url,
            landings__batch="50",
        )
        engine = make_engine(outbox_url)
        init_db(engine)
        clock, airflow, ranges = Clock(T0), AirflowDouble(), [(0, cfg.shard_code_upper_limit)]
        airflow.consumed = {f"db.{t}": i + 1 for i, t in enumerate(tables)} | {"db.later": 999}
        worker = LandingPublisher(SqlOutboxStore(engine), cfg, airflow, landing_listings(cfg), "w1", clock=clock)
        assert worker.interval == cfg.settings.landings.change_record_interval == 0.5

        def cycle() -> CycleReport:
            clock.advance(3)
            return worker.cycle(ranges)

        first = cycle()
        assert (first.baseline, first.listed, first.catalog_calls) == (300, 301, 2)  # the column types, the feed
        idle = [cycle() for _ in range(3)]
        assert [(r.catalog_calls, r.listed, r.enqueued, r.errors) for r in idle] == [(1, 0, 0, [])] * 3
        hive.add("db", "t005", "ds=1", 1001)
        hive.add("db", "t250", "ds=1", 1002)
        hive.add("db", "t250", "ds=2", 1003)
        landed = cycle()
        assert (landed.catalog_calls, landed.listed, landed.enqueued, landed.delivered) == (1, 2, 3, 3)
        assert airflow.events == Counter({(6, "1"): 1, (251, "1"): 1, (251, "2"): 1})
        hive.create_table("db", "later", {"ds": "string"})
        hive.add("db", "later", "ds=7", 1004)
        seen = cycle()  # the feed shows the missing table has a partition: its columns are read next
        assert (seen.catalog_calls, seen.listed, seen.enqueued) == (1, 0, 0)
        created = cycle()
        assert (created.catalog_calls, created.listed, created.enqueued, created.delivered) == (2, 1, 1, 1)
        assert airflow.events[(999, "7")] == 1
        assert [(r.catalog_calls, r.listed) for r in (cycle(), cycle())] == [(1, 0), (1, 0)]
        engine.dispose()
    finally:
        meta.dispose()
        drop_pg_database(name)


def test_a_worker_forgets_what_it_knew_of_the_tables_it_no_longer_publishes(tmp_path: Path, db_url: str) -> None:
    """The publisher's memory of the outbox holds the tables of the ranges it holds now: a range handed over, its
    tables' names are forgotten (read again from the outbox if the range comes back)."""
    cfg = landings_cfg(tmp_path, db_url)
    engine = make_engine(db_url)
    init_db(engine)
    clock, airflow = Clock(T0), AirflowDouble()
    worker = publisher(engine, cfg, airflow, {"db.a": ["ds=0"], "db.b": ["ds=1"]}, "w1", clock)
    everything = [(0, cfg.shard_code_upper_limit)]
    assert worker.cycle(everything).baseline == 2
    assert sorted(worker._known) == [f"{PREFIX}db/a", f"{PREFIX}db/b"]
    worker.cycle([])  # every range handed over
    assert worker._known == {}
    clock.advance(3)
    assert worker.cycle(everything).enqueued == 0  # read again from the outbox: nothing new
    engine.dispose()


@needs_test_pg
def test_a_partition_dropped_and_added_again_is_published_again_only_where_chosen(tmp_path: Path) -> None:
    """``[landings] publish_recreated = db.a``: a partition of db.a dropped and added again (another id in the
    metastore) is a new landing, enqueued once by two workers and posted once more with the same key; the same on
    db.b publishes nothing. A row without the metastore's id takes it without a post; a re-creation made while no
    worker ran is found by a worker that starts afresh."""
    name, meta_url = new_pg_database()
    meta = make_engine(meta_url)
    try:
        hive = HiveSchema(meta)
        for table in ("a", "b"):
            hive.create_table("db", table, {"ds": "string"})
        hive.add("db", "a", "ds=0", 1)
        hive.add("db", "b", "ds=0", 2)
        outbox_url = f"sqlite:///{tmp_path / 'outbox.db'}"
        cfg = landings_cfg(
            tmp_path,
            outbox_url,
            smart_sensor__catalog_backend="metastore_db",
            catalog__metastore_db_url=meta_url,
            landings__publish_recreated="db.a",
        )
        engine = make_engine(outbox_url)
        init_db(engine)
        clock, airflow, ranges = Clock(T0), AirflowDouble(), [(0, cfg.shard_code_upper_limit)]
        workers = [
            LandingPublisher(SqlOutboxStore(engine), cfg, airflow, landing_listings(cfg), w, clock=clock) for w in "12"
        ]

        def cycle(worker: LandingPublisher) -> CycleReport:
            clock.advance(3)
            return worker.cycle(ranges)

        assert [cycle(w).baseline for w in workers] == [2, 0]
        hive.add("db", "a", "ds=1", 3)
        hive.add("db", "b", "ds=1", 4)
        assert cycle(workers[0]).delivered == 2
        cycle(workers[1])
        for table, new_id in (("a", 5), ("b", 6)):  # dropped and added again: the metastore gives another id
            hive.drop("db", table, "ds=1")
            hive.add("db", table, "ds=1", new_id)
        hive.drop("db", "a", "ds=0")  # the baseline's partition too
        hive.add("db", "a", "ds=0", 7)
        both = [cycle(w) for w in workers]
        assert [r.recreated for r in both] == [2, 0], both  # the second worker found them enqueued
        for _ in range(2):
            cycle(workers[0])
        assert airflow.events == Counter({(1, "1"): 2, (1, "0"): 1, (2, "1"): 1}), airflow.events
        with engine.connect() as conn:
            rows = conn.execute(
                select(LO.c.partition_name, LO.c.generation, LO.c.part_id, LO.c.state)
                .where(LO.c.uri == f"{PREFIX}db/a")
                .order_by(LO.c.partition_name, LO.c.generation)
            ).all()
        assert [tuple(r) for r in rows] == [
            ("ds=0", 0, 1, BASELINE),
            ("ds=0", 1, 7, DELIVERED),
            ("ds=1", 0, 3, DELIVERED),
            ("ds=1", 1, 5, DELIVERED),
        ], rows
        with engine.begin() as conn:  # as a row enqueued from a listing, or before migration 0011, has no id
            conn.execute(LO.update().where(LO.c.partition_name == "ds=1", LO.c.generation == 1).values(part_id=None))
        restarted = LandingPublisher(SqlOutboxStore(engine), cfg, airflow, landing_listings(cfg), "3", clock=clock)
        first = cycle(restarted)
        assert (first.recreated, first.enqueued) == (0, 0), first  # the id taken, nothing posted
        hive.drop("db", "a", "ds=1")  # while no worker follows the table
        hive.add("db", "a", "ds=1", 8)
        later = LandingPublisher(SqlOutboxStore(engine), cfg, airflow, landing_listings(cfg), "4", clock=clock)
        assert cycle(later).recreated == 1
        cycle(later)
        assert airflow.events[(1, "1")] == 3
        # issue 67, defect 3: added again through another metastore instance, which hands out a lower block of ids
        hive.drop("db", "a", "ds=1")
        hive.add("db", "a", "ds=1", 0)
        other = LandingPublisher(SqlOutboxStore(engine), cfg, airflow, landing_listings(cfg), "5", clock=clock)
        assert cycle(other).recreated == 1
        cycle(other)
        assert airflow.events[(1, "1")] == 4
        # a database that went back shows an id the partition had before: nothing
        hive.drop("db", "a", "ds=1")
        hive.add("db", "a", "ds=1", 8)
        back = LandingPublisher(SqlOutboxStore(engine), cfg, airflow, landing_listings(cfg), "6", clock=clock)
        assert cycle(back).recreated == 0
        cycle(back)
        assert airflow.events[(1, "1")] == 4
        engine.dispose()
    finally:
        meta.dispose()
        drop_pg_database(name)
