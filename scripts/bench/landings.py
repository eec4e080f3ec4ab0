"""Landings benchmark: what publishing landings costs the metastore at ``--tables`` watched tables (1,000), with
nothing landing and with ``--rate`` landings a second (10), and how soon a landing is posted (landed → posted p50
and p95), side by side for the ways a worker can learn of landings, in one run:

- ``per table (before)``: the publisher as it was before the change record: every cycle (``[landings] interval``,
  2 s) reads each watched table's columns and lists it, through the metastore database (``metastore_db``);
- ``thrift per table``: every cycle lists each table through the metastore service's thrift API (its column
  types cached), ``[catalog] parallelism`` at a time: what the ``thrift`` backend does;
- ``change record``: ``metastore_db`` following the metastore's change record (``FollowingChanges``), one
  statement per cycle for every table, every ``change_record_interval`` (0.5 s);
- each of the first and last again ``+ signal``: a landing signal for the table right after its partition
  committed (what `smartsensor signal` or the signal hook sends), running a cycle over that table at once, as a
  worker's wake-up thread does.

Everything real but Airflow: a Hive metastore service (its JVM, started here) on a database of its own on the
bench's PostgreSQL, where the tables are created and the partitions land (``add_partitions``, as a pipeline
commits); the publisher (``LandingPublisher``) with its outbox on PostgreSQL. Airflow's API is a recorder in this
process (``RecordingAirflow``): it takes each post at once, so "posted" is when the publisher posted, and the
figures are smartsensor's part (Airflow's own is measured by tests/airflow/test_landings_in_airflow.py). Metastore
calls and outbox statements are counted in code (the publisher's ``CycleReport.catalog_calls``; the engine's
statement count).

    .venv/bin/python -m scripts.bench.landings --postgres                  # 1,000 tables, 20 s idle, 30 s at 10/s
    .venv/bin/python -m scripts.bench.landings --postgres --tables 100 --idle 5 --landing 10   # a quick look
"""

from __future__ import annotations

import argparse
import os
import queue
import random
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Sequence

from sqlalchemy import Engine, delete

from scripts.bench import metastore_db as bench_metastore
from scripts.harness.databases import drop_database, new_database, on_a_database
from scripts.harness.hive_tables import Metastore
from smartsensor.adapters.catalog.metastore_db import MetastoreDbCatalog
from smartsensor.adapters.catalog.partition_feed import PartitionFeed
from smartsensor.adapters.catalog.table_listings import FollowingChanges, ListingInBatches
from smartsensor.adapters.catalog.thrift_catalog import ThriftCatalog
from smartsensor.adapters.periodic import PeriodicJobs
from smartsensor.adapters.sql.engine import init_db, make_engine, statement_count
from smartsensor.adapters.sql.landings import SqlOutboxStore
from smartsensor.config import Config, load_config
from smartsensor.domain.landings import EventLookup, HiveAsset, PostOutcome
from smartsensor.hive_filter.names import TableName
from smartsensor.ports import TableListings
from smartsensor.schema.models import asset_watch, landing_outbox
from smartsensor.sensors.errors import CheckError
from smartsensor.service.landings import CycleReport, LandingPublisher

DB = "landings_bench"
PREFIX = "hive://bench:10000/"
STRATEGIES = ("per table (before)", "per table (before) + signal", "thrift per table", "change record",
              "change record + signal")  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=1000, help="Watched tables (default 1,000).")
    parser.add_argument("--idle", type=float, default=20.0, help="Seconds with nothing landing (default 20).")
    parser.add_argument("--landing", type=float, default=30.0, help="Seconds of landings (default 30).")
    parser.add_argument("--rate", type=float, default=10.0, help="Landings a second meanwhile (default 10).")
    parser.add_argument(
        "--strategies", default=",".join(STRATEGIES), help="Comma-separated, of: " + ", ".join(STRATEGIES)
    )
    parser.add_argument("--seed", type=int, default=7, help="Which tables the landings hit (default 7).")
    parser.add_argument("--postgres", action="store_true", help="A throwaway PostgreSQL (the default anyway).")
    parser.add_argument("--db-url", default=None, help="This PostgreSQL database for the outbox instead.")
    args = parser.parse_args(argv)
    unknown = [s for s in args.strategies.split(",") if s not in STRATEGIES]
    if unknown:
        parser.error(f"unknown strategies {unknown}: choose among {', '.join(STRATEGIES)}")
    return args


class RecordingAirflow:
    """Airflow's asset API as the publisher sees it, in this process: the watched tables, and each post taken at
    once, with when (``time.monotonic``)."""

    def __init__(self, tables: list[str]) -> None:
        self.assets = [HiveAsset(i + 1, f"{PREFIX}{DB}/{t}", DB, t) for i, t in enumerate(tables)]
        self.posted: dict[tuple[int, str], float] = {}
        self.lock = threading.Lock()

    def consumed_hive_assets(self, uri_prefix: str) -> list[HiveAsset]:
        return list(self.assets)

    def paused_dags(self) -> set[str]:
        return set()

    def post_event(self, asset_id: int, partition_key: str, extra: dict[str, Any]) -> PostOutcome:
        with self.lock:
            self.posted.setdefault((asset_id, partition_key), time.monotonic())
            return PostOutcome("delivered", "", len(self.posted))

    def find_events(self, asset_id: int, since: datetime, until: datetime | None, marks: dict[str, Any]) -> EventLookup:
        return EventLookup(True, ())


class ListingAsBefore:
    """The publisher's listing before the change record: each table's columns read, then its names listed, every
    cycle (two calls per table)."""

    follows_changes = False

    def __init__(self, catalog: MetastoreDbCatalog) -> None:
        self.catalog = catalog

    def listings(self, tables: Sequence[TableName]) -> tuple[dict[TableName, Any], int]:
        out: dict[TableName, Any] = {}
        for key in tables:
            db, table = key
            try:
                columns = self.catalog.types.fetch(db, table)
                out[key] = None if columns is None else self.catalog.list_rows(db, table, {}, columns)
            except CheckError as exc:
                out[key] = exc
        return out, 2 * len(tables)

    def relist(self) -> None:
        """Every call lists every table."""

    def partition_ids(self, db: str, table: str) -> None:
        """A listing cannot tell a partition dropped and added again from one kept."""
        return None


@dataclass
class Phase:
    """What one phase cost: cycles, metastore calls, outbox statements, over ``seconds``."""

    seconds: float = 0.0
    cycles: int = 0
    calls: int = 0
    statements: int = 0


@dataclass
class Result:
    strategy: str
    idle: Phase = field(default_factory=Phase)
    landing: Phase = field(default_factory=Phase)
    latencies: list[float] = field(default_factory=list)
    landed: int = 0
    missed: int = 0
    baseline_seconds: float = 0.0


class Bench:
    """The metastore service with ``tables`` tables of one partition each, and the outbox's database."""

    def __init__(self, cfg: Config, engine: Engine, metastore_db_url: str, tables: int) -> None:
        self.cfg, self.engine, self.metastore_db_url = cfg, engine, metastore_db_url
        self.tables = [f"t{i:04d}" for i in range(tables)]
        self.metastore = Metastore(cfg, DB)
        self.next_day = 1

    def create_tables(self) -> float:
        """The watched tables, one partition each (d0000), as a pipeline's first commit leaves them; seconds."""
        started = time.perf_counter()
        self.metastore.create_tables(self.tables)
        for name in self.tables:
            self.metastore.land(name, "d0000")
        return time.perf_counter() - started

    def listings(self, strategy: str) -> tuple[TableListings, Callable[[], None]]:
        """A fresh client of the strategy's backend (a worker's, just started), and how to close it."""
        if strategy.startswith("per table"):
            catalog = MetastoreDbCatalog.from_url(self.metastore_db_url, 10.0, PartitionFeed())
            return ListingAsBefore(catalog), catalog.close
        if strategy.startswith("thrift"):
            thrift = ThriftCatalog.from_config(self.cfg)
            return ListingInBatches(thrift), thrift.close
        catalog = MetastoreDbCatalog.from_url(self.metastore_db_url, 10.0, PartitionFeed())
        return FollowingChanges(catalog), catalog.close

    def reset_outbox(self) -> None:
        with self.engine.begin() as conn:
            conn.execute(delete(landing_outbox))
            conn.execute(delete(asset_watch))

    def run(self, strategy: str, args: argparse.Namespace) -> Result:
        self.reset_outbox()
        result = Result(strategy)
        airflow = RecordingAirflow(self.tables)
        listings, close = self.listings(strategy)
        publisher = LandingPublisher(SqlOutboxStore(self.engine), self.cfg, airflow, listings, "bench")
        ranges = [(0, self.cfg.shard_code_upper_limit)]
        lock = threading.Lock()
        reports: list[CycleReport] = []

        def cycle(only: set[TableName] | None = None) -> None:
            with lock:
                reports.append(publisher.cycle(ranges, only))

        started = time.perf_counter()
        cycle()  # the baseline: every table's partition present
        result.baseline_seconds = time.perf_counter() - started
        jobs = PeriodicJobs("landings-bench")
        jobs.every("landings", publisher.interval, cycle)
        signals: queue.Queue[tuple[str, str] | None] = queue.Queue()
        woken = threading.Thread(target=self._wake_ups, args=(signals, cycle), daemon=True)
        if strategy.endswith("signal"):
            woken.start()
        jobs.start()
        try:
            result.idle = self._phase(reports, args.idle, lambda: None)
            landed: dict[tuple[int, str], float] = {}
            rng = random.Random(args.seed)

            def landings() -> None:
                self._land_at(args.rate, args.landing, rng, landed, signals if strategy.endswith("signal") else None)

            result.landing = self._phase(reports, args.landing, landings)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and any(k not in airflow.posted for k in landed):
                time.sleep(0.1)
        finally:
            jobs.stop(timeout=60)
            signals.put(None)
            close()
        result.landed = len(landed)
        result.missed = sum(1 for k in landed if k not in airflow.posted)
        result.latencies = sorted(airflow.posted[k] - at for k, at in landed.items() if k in airflow.posted)
        return result

    def _phase(self, reports: list[CycleReport], seconds: float, work: Callable[[], None]) -> Phase:
        first, statements, started = len(reports), statement_count(self.engine), time.monotonic()
        work()
        while time.monotonic() - started < seconds:
            time.sleep(0.05)
        done = reports[first:]
        return Phase(
            time.monotonic() - started,
            len(done),
            sum(r.catalog_calls for r in done),
            statement_count(self.engine) - statements,
        )

    def _land_at(
        self,
        rate: float,
        seconds: float,
        rng: random.Random,
        landed: dict[tuple[int, str], float],
        signals: queue.Queue[tuple[str, str] | None] | None,
    ) -> None:
        """``rate`` landings a second for ``seconds``, each on a table drawn at random, a new day each."""
        started = time.monotonic()
        count = int(rate * seconds)
        for i in range(count):
            time.sleep(max(0.0, started + i / rate - time.monotonic()))
            index = rng.randrange(len(self.tables))
            ds = f"d{self.next_day:04d}"
            self.next_day += 1
            self.metastore.land(self.tables[index], ds)
            landed[(index + 1, ds)] = time.monotonic()
            if signals is not None:
                signals.put((DB, self.tables[index]))

    @staticmethod
    def _wake_ups(signals: queue.Queue[tuple[str, str] | None], cycle: Callable[[set[tuple[str, str]]], None]) -> None:
        """A worker's wake-up thread: a cycle over the tables signalled since the last one."""
        while True:
            first = signals.get()
            if first is None:
                return
            named = {first}
            while not signals.empty():
                more = signals.get_nowait()
                if more is None:
                    return
                named.add(more)
            cycle(named)


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def print_table(results: list[Result], args: argparse.Namespace) -> None:
    """The side-by-side table: per minute, idle and while landing; landed → posted; each idle rate against the
    first strategy's."""
    print(f"\n{args.tables:,} watched tables; idle {args.idle:g} s, then {args.rate:g}/s for {args.landing:g} s\n")
    print(
        "| strategy | metastore calls/min, idle (vs first) | calls/min, landing | outbox statements/min, idle "
        "| cycles/min, idle | landed → posted p50 / p95 s | posted | baseline s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    base = 60 * results[0].idle.calls / results[0].idle.seconds if results else 0.0
    for r in results:
        idle = 60 * r.idle.calls / r.idle.seconds
        cells = [
            r.strategy,
            f"{idle:,.0f}" + (f" ({idle / base:.4f}x)" if base else ""),
            f"{60 * r.landing.calls / r.landing.seconds:,.0f}",
            f"{60 * r.idle.statements / r.idle.seconds:,.0f}",
            f"{60 * r.idle.cycles / r.idle.seconds:,.0f}",
            f"{_percentile(r.latencies, 0.5):.2f} / {_percentile(r.latencies, 0.95):.2f}",
            f"{r.landed - r.missed:,} of {r.landed:,}",
            f"{r.baseline_seconds:.1f}",
        ]
        print("| " + " | ".join(cells) + " |")
    means = [f"{r.strategy} {statistics.mean(r.latencies):.2f} s" for r in results if r.latencies]
    if means:
        print("\nmean landed → posted: " + ", ".join(means))


def run(db_url: str, args: argparse.Namespace) -> int:
    if not bench_metastore.is_postgresql(db_url):
        print("the landings bench needs PostgreSQL (--postgres, or --db-url of a PostgreSQL database)")
        return 2
    home = Path(tempfile.mkdtemp(prefix="smartsensor-landings-bench-"))
    metastore = new_database(db_url, "landings_metastore")
    more = f"[landings]\nasset_uri_prefix = {PREFIX}\nbatch = 1000\n"
    cfg_path = bench_metastore.write_config(home, db_url, metastore[1], more)
    os.environ.update(SMARTSENSOR_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1")
    cfg = load_config(str(cfg_path))
    from smartsensor.adapters import metastore_service

    engine = make_engine(db_url)
    init_db(engine)
    results: list[Result] = []
    try:
        started = time.perf_counter()
        metastore_service.start(cfg, die_with_parent=True)
        print(f"metastore service on PostgreSQL started in {time.perf_counter() - started:.1f} s")
        bench = Bench(cfg, engine, metastore[1], args.tables)
        print(f"{args.tables:,} tables created, one partition each, in {bench.create_tables():.1f} s")
        for strategy in args.strategies.split(","):
            result = bench.run(strategy, args)
            print(
                f"{strategy}: {result.idle.calls:,} calls idle ({result.idle.cycles} cycles), {result.landing.calls:,} "
                f"landing; p95 {_percentile(result.latencies, 0.95):.2f} s; {result.missed} not posted"
            )
            results.append(result)
        bench.metastore.close()
    finally:
        metastore_service.stop(cfg)
        engine.dispose()
        drop_database(db_url, metastore[0])
    print_table(results, args)
    return 0 if all(r.missed == 0 for r in results) else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    args.postgres = True  # the metastore database and the outbox: PostgreSQL, as in production
    return on_a_database(argv, args, "scripts.bench.landings", run)


if __name__ == "__main__":
    sys.exit(main())
