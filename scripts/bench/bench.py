"""Benchmark: the same workload checked five ways, side by side, in one run.

Workloads (``--scale`` shrinks them):
  W1  10,000 task instances over 1,000 distinct partitions in 20 tables
  W2 100,000 task instances over 10,000 distinct partitions in 100 tables
  W3 1,000,000 task instances over 100,000 distinct partitions in 1,000 tables, 8 shards (meant for --postgres)

Strategies (every one but classic, fleet and triggerer runs the product's round in this process: each range's index
built once, timed apart as at a worker's first round or a takeover, then one round with every check due):
  classic   one process per task poking on its own. A sample of real `run-task` processes is run;
            per-task cost is EXTRAPOLATED to the workload (marked "extrap." in the table).
  per-hash  Airflow's smart-sensor algorithm: one check per distinct hash per round (Spark catalog).
  batched   ours: one catalog call per table per round, through Spark (SHOW PARTITIONS).
  incremental      ours through the metastore's thrift API (no JVM; catalog_backend = thrift), then a quiet round
                   (nothing due) and a reconciliation.
  thrift-parallel  that round with [catalog] parallelism tables listed at once (--catalog-parallelism, default 4).
  metastore-db     that round reading the metastore's own PostgreSQL tables (catalog_backend = metastore_db), one
                   statement per round, following its feed (the default: partitions looked up once, then the ones
                   added since read); its cold round (a process's first, or a verify) timed apart. Only when the
                   metastore service keeps its tables on PostgreSQL.
  metastore-db-lookup  the same with [catalog] metastore_db_feed = false: every due partition looked up each round.
  fleet     ours as deployed: --fleet-processes real `worker --once` processes (thrift), each owning an equal
            share of the shard ranges, started together; the slowest one's (cold, first) round.
  triggerer what Airflow users run today, SIMULATED: one asyncio coroutine per task, each its own metastore
            call per poke (Airflow's triggerer does not deduplicate). See scripts/bench/catalog.py.
Also: the peak RSS of a real `worker --once` process on each backend (its JVM included), the metastore's own
floor per listing, measured in the same run, the metastore's load per round (its calls or statements, and with
PostgreSQL the time its database spent, from pg_stat_statements: scripts/bench/metastore_load.py), and with several
workloads growth tables (time per task and per table; the catalog term per strategy).

Everything runs against a real Hive metastore service (thrift, started here) and a real metadata
DB (SQLite by default, ``--db-url`` for Postgres). The service keeps its own tables in a database of the metadata
DB's PostgreSQL server when there is one, else in embedded Derby (``--metastore``; scripts/bench/metastore_db.py).
Counters (catalog calls, DB statements) come from
the code; times are wall-clock on a shared machine, so compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

from scripts.bench import (
    catalog as bench_catalog,
    metastore_db as bench_metastore,
    sql as bench_sql,
    tables as bench_tables,
    workload as bench_workload,
)
from scripts.bench.measures import ALL_STRATEGIES, IN_PROCESS, Measure, console
from scripts.bench.metastore_load import MetastoreLoad, RecordingMetastoreDbCatalog
from scripts.bench.workload import partition_of
from scripts.harness.databases import drop_database, new_database
from scripts.harness.usage import tree_peak_rss_mb
from scripts.harness.waiting import NotReached, wait_until
from smartsensor.adapters.catalog.batch import BatchChecker
from smartsensor.adapters.catalog.metastore_db import MetastoreDbCatalog
from smartsensor.adapters.catalog.partition_feed import PartitionFeed
from smartsensor.adapters.catalog.thrift_catalog import ThriftCatalog
from smartsensor.adapters.lifecycle import StopRequest
from smartsensor.adapters.process import smartsensor_command
from smartsensor.adapters.sql.engine import init_db, make_engine
from smartsensor.adapters.sql.registration_store import SqlRegistrationStore
from smartsensor.config import load_config
from smartsensor.domain.keys import TaskKey
from smartsensor.domain.states import State
from smartsensor.hive_filter.names import TableName
from smartsensor.ports import CheckAnswerer
from smartsensor.roots.worker import range_rounds
from smartsensor.sensors import NamedHivePartitionSensor
from smartsensor.sensors.checks import Check
from smartsensor.sensors.errors import CheckError
from smartsensor.service.round.range_rounds import RangeRounds, run_round
from smartsensor.service.round.report import RoundResult
from smartsensor.standalone.registration import register, registered_states

DAY = datetime(2026, 11, 22, tzinfo=timezone.utc)
WORKLOADS = {"W1": (10_000, 1_000, 20), "W2": (100_000, 10_000, 100), "W3": (1_000_000, 100_000, 1_000)}


def sizes(name: str, scale: float) -> tuple[int, int, int]:
    tasks, parts, tables = WORKLOADS[name]
    tables = max(2, round(tables * scale**0.5))
    parts = max(tables, round(parts * scale))
    tasks = max(parts, round(tasks * scale))
    return tasks, parts, tables


def db_name(workload: str) -> str:
    return f"bench_{workload.lower()}"


def shard_workers(engine: Any, cfg: Any, shards: int) -> list[RangeRounds]:
    """Fresh workers over ``shards`` equal ranges, their indexes not built yet."""
    limit = cfg.shard_code_upper_limit
    bounds = [i * limit // shards for i in range(shards + 1)]
    return [range_rounds(engine, cfg, bounds[i], bounds[i + 1], record_rounds=False) for i in range(shards)]


def build_index(workers: list[RangeRounds]) -> float:
    """Build each range's index from the database, as a worker does at its first round or a takeover; the seconds
    it took, timed apart from the round that follows."""
    started = time.perf_counter()
    for w in workers:
        w.load_index()
    return round(time.perf_counter() - started, 4)


def indexed_round(
    workers: list[RangeRounds],
    answerer: Callable[[], CheckAnswerer],
    lister: ThriftCatalog | MetastoreDbCatalog | None = None,
    quiet: bool = False,
) -> Measure:
    """Ours as it runs now, answered by ``answerer`` (through ``lister``, if given: thrift, with its parallelism,
    or the metastore's database): the index built (``build_index``), then one round with every check due, then
    (``quiet``) a quiet round (nothing due: most of a worker's rounds) and a reconciliation."""
    build_s = build_index(workers)
    sent = getattr(lister, "statements", 0)
    r = run_round(workers, answerer)
    extra: dict[str, Any] = {
        "index_build_seconds": build_s,
        "write_seconds": r.write_seconds,
        "checks": r.distinct_checks,
        "due": r.groups_due,
        "finish_wall_seconds": r.finish_seconds,  # with_load reports it, the quiet round's included
    }
    if isinstance(lister, MetastoreDbCatalog):  # its own count of what it sent, beside the checker's
        extra["metastore_statements"] = lister.statements - sent
    elif lister is not None:
        extra["parallelism"] = lister.parallelism
    if quiet:
        quiet_round = run_round(workers, answerer)
        statements, started = store_statements(workers), time.perf_counter()
        for w in workers:  # what a quiet round adds every reconcile_interval: the rows changed since the last one
            w.reconcile()
        extra["finish_wall_seconds"] += quiet_round.finish_seconds
        extra.update(
            quiet_round_seconds=quiet_round.seconds,
            quiet_round_statements=quiet_round.db_statements,
            quiet_round_due=quiet_round.groups_due,
            reconcile_seconds=round(time.perf_counter() - started, 4),
            reconcile_statements=store_statements(workers) - statements,
        )
    return round_measure(r, extra)


def round_measure(r: RoundResult, extra: dict[str, Any]) -> Measure:
    """A run_round's counters as the bench's Measure."""
    return Measure(
        r.catalog_calls,
        r.db_statements,
        r.seconds,
        r.catalog_seconds,
        sum(r.marked.values()),
        schema_calls=r.schema_calls,
        extra=extra,
    )


def lister_round(
    workers: list[RangeRounds], lister: ThriftCatalog | MetastoreDbCatalog, quiet: bool = False
) -> Measure:
    """``indexed_round`` with every check answered through ``lister``."""
    return indexed_round(workers, lambda: BatchChecker(lister=lister), lister, quiet)


def profile_round(engine: Any, cfg: Any, lister: ThriftCatalog | MetastoreDbCatalog, shards: int) -> dict[str, Any]:
    """The same all-due round again under cProfile (from the same reset state and a fresh index), its top functions
    by cumulative and own time, and EXPLAIN ANALYZE of the metastore-db statement it sent (``--profile``)."""
    import cProfile
    import io
    import pstats

    reset(engine)
    workers = shard_workers(engine, cfg, shards)
    build_index(workers)
    profiler = cProfile.Profile()
    profiler.enable()
    r = run_round(workers, lambda: BatchChecker(lister=lister))
    profiler.disable()
    out: dict[str, Any] = {"seconds": r.seconds, "catalog_seconds": r.catalog_seconds, "marked": sum(r.marked.values())}
    for key in ("cumulative", "tottime"):
        buf = io.StringIO()
        pstats.Stats(profiler, stream=buf).strip_dirs().sort_stats(key).print_stats(22)
        out[key] = "ncalls" + buf.getvalue().split("ncalls", 1)[-1].rstrip()
    if isinstance(lister, RecordingMetastoreDbCatalog):
        out["explain"] = lister.explain_last()
    return out


def store_statements(workers: list[RangeRounds]) -> int:
    return workers[0].store.statements() if workers else 0


def raw_update_floor(engine: Any, repeats: int = 2) -> dict[str, Any]:
    """PostgreSQL's own floor for the landing round's marking: the fastest plain UPDATE … WHERE hashcode = ANY(…)
    of the same rows (those the last landing round marked), each from the same reset state."""
    with engine.connect() as conn:
        hashes = bench_sql.landed_hashcodes_for_benchmark(conn)
    best, rows = None, 0
    for _ in range(repeats):
        reset(engine)
        started = time.perf_counter()
        with engine.begin() as conn:
            rows = bench_sql.raw_mark_for_benchmark(conn, hashes, datetime.now(timezone.utc))
        took = time.perf_counter() - started
        best = took if best is None else min(best, took)
    return {
        "seconds": round(best or 0.0, 3),
        "rows": rows,
        "us_per_row": round(1e6 * (best or 0.0) / rows, 1) if rows else None,
    }


class PerHashChecker:
    """Airflow's smart-sensor algorithm as a ``ports.CheckAnswerer``: each distinct check answered by a catalog call
    of its own, through Spark (one per distinct hash: the workload's sensors wait for one partition each)."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.catalog_calls, self.schema_calls, self.fs_calls, self.catalog_seconds = 0, 0, 0, 0.0

    def check_all(self, checks: Iterable[Check]) -> dict[Check, bool | CheckError]:
        answers: dict[Check, bool | CheckError] = {}
        for check in dict.fromkeys(checks):
            checker = BatchChecker(self.spark)
            answers.update(checker.check_all([check]))
            self.catalog_calls += checker.catalog_calls
            self.schema_calls += checker.schema_calls
            self.fs_calls += checker.fs_calls
            self.catalog_seconds += checker.catalog_seconds
        return answers


def per_hash_round(workers: list[RangeRounds], spark: Any) -> Measure:
    """Airflow's algorithm on the same phases (the index built first, timed apart): the product's round, each
    distinct hash checked on its own (``PerHashChecker``)."""
    build_s = build_index(workers)
    return round_measure(run_round(workers, lambda: PerHashChecker(spark)), {"index_build_seconds": build_s})


def reset(engine: Any) -> None:
    """Every task waiting again, and (PostgreSQL) the planner's statistics brought up to date: after a reset of every
    row they still describe the rows before it (e.g. all pending, after the insert), which no steady state has."""
    with engine.begin() as conn:
        bench_sql.reset_to_waiting_for_benchmark(conn, datetime.now(timezone.utc))
        bench_sql.analyze_for_benchmark(conn)


@dataclass
class Listers:
    """The catalog clients of one bench run, shared by every workload: thrift (one connection at a time, the
    process's default), thrift with --catalog-parallelism, and the metastore's database when it is PostgreSQL;
    and the probe of that database's own load."""

    thrift: ThriftCatalog
    parallel: ThriftCatalog
    db: RecordingMetastoreDbCatalog | None  # following the feed, as the product does by default
    db_lookup: RecordingMetastoreDbCatalog | None  # [catalog] metastore_db_feed = false
    load: MetastoreLoad
    skipped: dict[str, str] = field(default_factory=dict)

    def close(self) -> None:
        for lister in (self.thrift, self.parallel, self.db, self.db_lookup, self.load):
            if lister is not None:
                lister.close()


def strategies(
    engine: Any,
    cfg: Any,
    cfg_path: Path,
    spark: Any,
    listers: Listers,
    env: dict[str, str],
    args: argparse.Namespace,
) -> dict[str, Callable[[list[RangeRounds]], Measure]]:
    """Each strategy as one round over fresh workers (classic is sampled separately)."""
    timeout, triggerer_sample, limit = (
        cfg.settings.smart_sensor.metastore_timeout,
        args.triggerer_sample,
        cfg.shard_code_upper_limit,
    )
    catalog = listers.thrift
    out: dict[str, Callable[[list[RangeRounds]], Measure]] = {
        "per-hash": lambda w: per_hash_round(w, spark),
        "batched": lambda w: indexed_round(w, lambda: BatchChecker(spark)),
        "incremental": lambda w: lister_round(w, catalog, quiet=True),
        "thrift-parallel": lambda w: lister_round(w, listers.parallel),
        "fleet": lambda w: Measure(**bench_catalog.fleet_round(cfg_path, env, args.fleet_processes, limit)),
        "triggerer": lambda w: Measure(
            **bench_catalog.triggerer_round(engine, cfg.metastore_uris, timeout, triggerer_sample, env)
        ),
    }
    if listers.db is not None:
        db_lister = listers.db
        out["metastore-db"] = lambda w: feed_round(w, db_lister)
    if listers.db_lookup is not None:
        lookup_lister = listers.db_lookup
        out["metastore-db-lookup"] = lambda w: lister_round(w, lookup_lister)
    return out


def feed_round(workers: list[RangeRounds], lister: MetastoreDbCatalog) -> Measure:
    """metastore-db following its feed: a steady-state round (its cold round ran before: ``cold_round``)."""
    m = lister_round(workers, lister)
    if lister.feed is not None:
        m.extra["feed"] = {"high_water": lister.feed.high_water, "gaps": len(lister.feed.gaps)}
    return m


def cold_round(engine: Any, cfg: Any, lister: MetastoreDbCatalog, shards: int) -> dict[str, Any]:
    """The first round of a process following the feed over this workload (and what each verify costs): every due
    check looked up, on fresh workers. Timed apart, not a strategy; the caller resets the tasks after it."""
    m = lister_round(shard_workers(engine, cfg, shards), lister)
    return {"seconds": m.wall, "catalog_seconds": m.catalog_seconds, "statements": m.extra["metastore_statements"]}


def warm_types(spark: Any, listers: Listers, db: str, tables: int) -> None:
    """Read the partition column types of every table a backend's per-process cache lacks (never read, or past
    TYPES_TTL_SECONDS): a worker does this once per table and then every TYPES_TTL_SECONDS, so the measured rounds
    are steady-state rounds. Called before each strategy's round, as a W3 strategy can outlast the TTL."""
    keys = [TableName(db, partition_of(t, tables)[0]) for t in range(tables)]
    for checker in (BatchChecker(spark), BatchChecker(lister=listers.thrift)):
        for key in keys:
            if checker.types.cached(*key) is None:
                checker.types.fetch(*key)
    for lister in (listers.parallel, listers.db, listers.db_lookup):
        if lister is not None:  # a BatchLister: every missing table in one go
            missing = [key for key in keys if lister.types.cached(*key) is None]
            if missing:
                lister.fetch_types(missing)


def measure_strategies(
    engine: Any,
    cfg: Any,
    cfg_path: Path,
    spark: Any,
    db: str,
    shards: int,
    landed: list[int],
    tables: int,
    listers: Listers,
    env: dict[str, str],
    args: argparse.Namespace,
) -> dict[str, tuple[Measure, Measure]]:
    """(waiting round, landing round) per strategy, each from the same DB state, fresh workers (all due), with the
    metastore database's own load over each (``extra['metastore_db']``). One planning pass first warms the
    per-process cache of rebuilt sensors, as any round after a worker's first finds it, so no strategy pays for it
    alone. Right after the first in-process landing round, the same rows are marked again the plainest way:
    PostgreSQL's floor for that marking (``extra['raw_floor']`` of every in-process strategy's landing round)."""
    waiting = {}
    every = strategies(engine, cfg, cfg_path, spark, listers, env, args)
    chosen = {n: every[n] for n in ALL_STRATEGIES if n in every and n in args.strategies}
    reset(engine)
    for w in shard_workers(engine, cfg, shards):
        w.plan_round()
    warm_types(spark, listers, db, tables)
    cold = None
    if "metastore-db" in chosen and listers.db is not None:  # the feed's first look at this workload, timed apart
        reset(engine)
        cold = cold_round(engine, cfg, listers.db, shards)
        console.print(f"  metastore-db: cold round (a process's first, or a verify) {cold['seconds']:.2f} s")
    for name, fn in chosen.items():
        reset(engine)
        warm_types(spark, listers, db, tables)
        waiting[name] = with_load(listers.load, fn, shard_workers(engine, cfg, shards))
        if name == "metastore-db" and cold is not None:
            waiting[name].extra["cold_round"] = cold
        console.print(f"  {name}: waiting round {waiting[name].wall:.2f} s, {waiting[name].catalog_calls:,.0f} calls")
        if args.profile and name == "metastore-db":
            warm_types(spark, listers, db, tables)
            waiting[name].extra["profile"] = profile_round(engine, cfg, listers.db, shards)  # type: ignore[arg-type]
    # set-up, not measured: several tables at once (thrift-parallel's connections), as several pipelines commit
    landing_s = bench_workload.land(listers.parallel, db, landed, tables, threads=listers.parallel.parallelism)
    console.print(f"  landed {len(landed):,} partitions in {landing_s:.1f} s ({listers.parallel.parallelism} at once)")
    warm_types(spark, listers, db, tables)
    out, floor = {}, None
    for name, fn in chosen.items():
        reset(engine)
        warm_types(spark, listers, db, tables)
        out[name] = (waiting[name], with_load(listers.load, fn, shard_workers(engine, cfg, shards)))
        console.print(f"  {name}: landing round {out[name][1].wall:.2f} s, {out[name][1].marked:,} marked")
        if name in IN_PROCESS:  # the same rows again, the plainest way, right after
            floor = floor or raw_update_floor(engine)
            out[name][1].extra["raw_floor"] = floor
        if args.profile and name == "metastore-db":
            warm_types(spark, listers, db, tables)
            out[name][1].extra["profile"] = profile_round(engine, cfg, listers.db, shards)  # type: ignore[arg-type]
    return out


def with_load(load: MetastoreLoad, fn: Callable[[list[RangeRounds]], Measure], workers: list[RangeRounds]) -> Measure:
    """``fn``'s round, with the metastore's own work meanwhile (nothing else asks it then) and the wall time of its
    rounds' finish step (``RoundResult.finish_seconds``: each range decided, written and its index updated,
    ``[smart_sensor] write_threads`` ranges at once; 0 for a strategy that does not run the product's round). A
    round's ``write_seconds`` sums the ranges' writes, which overlap, so it is not the landing round's marking part."""
    before = load.snapshot()
    m = fn(workers)
    finish = m.extra.pop("finish_wall_seconds", 0.0)
    m.extra["metastore_db"] = load.delta(before, load.snapshot())
    m.extra["finish_wall_seconds"] = round(finish, 3)
    return m


def classic_sample(engine: Any, cfg_path: Path, env: dict[str, str], sample: int) -> Measure:
    """Run `sample` real run-task processes on the first landed tasks (in key order), each given back to the
    scheduler by hand first (`set-state … scheduled`, as a user would); return per-task averages (catalog calls
    per poke)."""
    keys: list[TaskKey] = []
    for dag_id in bench_workload.DAG_IDS:
        states = registered_states(SqlRegistrationStore(engine), dag_id, DAY)
        keys += [TaskKey(dag_id, t, DAY) for t in sorted(states) if states[t] == State.SUCCESS][: sample - len(keys)]
        if len(keys) == sample:
            break
    for key in keys:
        bench_catalog.run_sampled(
            cli(cfg_path, "set-state", *key_args(key), State.SCHEDULED.value), env, "set-state", 300
        )
    walls, rss, calls, pokes = [], [], [], []
    for key in keys:
        run = bench_catalog.run_sampled(
            cli(cfg_path, "run-task", *key_args(key), "--json"),
            env,
            "run-task",
            300,
        )
        walls.append(run.seconds)
        result = json.loads(run.stdout.strip().splitlines()[-1])
        # per poke: a loaded machine can make a try's first poke outlast poke_timeout and poke again
        calls.append(result["catalog_calls"] / max(1, result["pokes"]))
        pokes.append(result["pokes"])
        rss.append(run.peak_rss_mb)
    return Measure(
        statistics.mean(calls),
        2,
        statistics.mean(walls),
        0.0,
        len(keys),
        True,
        {"process_peak_rss_mb": max(rss), "sample": len(keys), "pokes": pokes},
    )


def cli(cfg_path: Path, *args: str) -> list[str]:
    """A `smartsensor` command on the bench's configuration."""
    return smartsensor_command("--config", str(cfg_path), *args)


def key_args(key: TaskKey) -> tuple[str, str, str]:
    """A task instance as the CLI names it: DAG_ID TASK_ID EXECUTION_DATE (a day)."""
    return key.dag_id, key.task_id, key.execution_date.strftime("%Y-%m-%d")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def measure_latency(engine: Any, cfg: Any, spark: Any, db: str, samples: int, poll_interval: float) -> dict[str, Any]:
    """Landing → success with the real leased worker loop running over the whole workload.

    Probe tasks wait on their own partitions of table t000: "sig" ones poke every 600 s, so only the
    landing signal makes them fast; "poll" ones poke every ``poll_interval`` s and get no signal.
    """
    import threading

    from smartsensor.adapters.sql.signals import SqlLandingSignals
    from smartsensor.roots.worker import leased_ranges, worker_loop
    from smartsensor.service.signals import send_signal

    probes = [
        NamedHivePartitionSensor(
            task_id=f"{kind}{i}", partition_names=[f"{db}.t000/ds={kind}{i}"], poke_interval=interval, timeout=3600
        )
        for kind, interval in (("sig", 600.0), ("poll", poll_interval))
        for i in range(samples)
    ]
    store = SqlRegistrationStore(engine)
    register(store, [("latency_probe", sensor) for sensor in probes], DAY, cfg)  # as `submit` does
    rounds: list[RoundResult] = []
    stop = StopRequest()
    served = leased_ranges(engine, cfg, spark_provider=lambda: spark)
    thread = threading.Thread(
        target=worker_loop(engine, cfg, served, 1.0, False, rounds.append, wake_ups=True, stop=stop).start,
        daemon=True,
    )
    thread.start()

    def wait_success(task_id: str, timeout: float = 600) -> float:
        try:
            return wait_until(
                lambda: registered_states(store, "latency_probe", DAY).get(task_id) == State.SUCCESS, timeout, 0.01
            )
        except NotReached:
            raise SystemExit(f"latency probe {task_id} did not succeed within {timeout} s") from None

    out: dict[str, Any] = {"poll_interval": poll_interval}
    try:
        while not any(r.loaded for r in rounds):
            time.sleep(0.1)
        for kind in ("sig", "poll"):
            lat = []
            for i in range(samples):
                spark.sql(f"ALTER TABLE {db}.t000 ADD IF NOT EXISTS PARTITION (ds='{kind}{i}')")  # generated value
                if kind == "sig":
                    send_signal(SqlLandingSignals(engine), f"{db}.t000/ds={kind}{i}")
                lat.append(wait_success(f"{kind}{i}"))
            out["signal" if kind == "sig" else "no_signal"] = {
                "p50": round(statistics.median(lat), 3),
                "p95": round(_percentile(lat, 0.95), 3),
                "samples": [round(x, 3) for x in lat],
            }
        busy = [r.seconds for r in rounds if r.loaded]
        out["round_seconds_median"] = round(statistics.median(busy), 3) if busy else None
    finally:
        stop.request()
        thread.join(timeout=120)
    return out


def run_workload(
    name: str,
    args: argparse.Namespace,
    spark: Any,
    engine: Any,
    cfg: Any,
    cfg_path: Path,
    env: dict[str, str],
    listers: Listers,
    measure_rss: bool = True,
) -> dict[str, Any]:
    """One workload: set up, every strategy measured, the metastore floor, the workers' peak RSS (``measure_rss``),
    the latency and the classic sample."""
    tasks, parts, tables = sizes(name, args.scale)
    console.print(f"[bold]{name}[/bold]: {tasks:,} tasks over {parts:,} partitions in {tables} tables")
    with engine.begin() as conn:
        bench_sql.delete_all_tasks_for_benchmark(conn)
    db = db_name(name)
    shards = args.shards or (8 if name == "W3" else 4)
    setup_s = bench_workload.create_workload(spark, listers.thrift, engine, cfg, db, tasks, parts, tables, DAY)
    console.print(f"  set up in {setup_s:.1f} s")
    every = max(1, round(1 / args.land_share))  # by date, so that every table gets its share of landings
    landed = [p for p in range(parts) if (p // tables) % every == 0]
    results = measure_strategies(engine, cfg, cfg_path, spark, db, shards, landed, tables, listers, env, args)
    floor = bench_catalog.metastore_floor(cfg.metastore_uris, db, [partition_of(t, tables)[0] for t in range(tables)])
    workers_rss = {}
    for backend in ("spark", "thrift") if measure_rss else ():
        reset(engine)
        workers_rss[backend] = bench_catalog.worker_peak_rss(cfg_path, env, backend, cfg.shard_code_upper_limit)
    latency = (
        measure_latency(engine, cfg, spark, db, args.latency_samples, args.latency_poll_interval)
        if args.latency_samples
        else {}
    )
    common = {
        "workload": name,
        "tasks": tasks,
        "partitions": parts,
        "tables": tables,
        "landed_partitions": len(landed),
        "setup_seconds": round(setup_s, 2),
        "shards": shards,
        "latency": latency,
        "metastore_floor_seconds": round(floor, 5),
        "worker_rss": workers_rss,
    }
    if "classic" not in args.strategies:
        return {
            **common,
            "classic_sample": {},
            "results": {k: [vars(w), vars(ld)] for k, (w, ld) in results.items()},
            "_measures": results,
        }
    classic = classic_sample(engine, cfg_path, env, args.classic_sample)
    # Classic, per poke interval: every waiting task pokes (1 catalog call: one table each) and reads its
    # own state (1 statement); a landing task also writes its end state (1 more). Its liveness heartbeat
    # (1 write per [scheduler] task_heartbeat_interval) is left out: the comparison favours classic.
    classic_wait = Measure(tasks * classic.catalog_calls, tasks * 1, classic.wall, 0, 0, True)
    classic_land = Measure(
        len(landed) * (tasks // parts) * classic.catalog_calls,
        len(landed) * (tasks // parts) * 2,
        classic.wall,
        0,
        len(landed) * (tasks // parts),
        True,
    )
    results["classic"] = (classic_wait, classic_land)
    return {
        **common,
        "classic_sample": classic.extra,
        "results": {k: [vars(w), vars(ld)] for k, (w, ld) in results.items()},
        "_measures": results,
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workload",
        default="W1,W2",
        type=lambda v: [x.strip().upper() for x in v.split(",")],
        help="Comma list of W1, W2, W3 (default W1,W2; 'both' = W1,W2).",
    )
    parser.add_argument("--scale", type=float, default=1.0, help="Shrink the workloads (e.g. 0.01).")
    parser.add_argument("--shards", type=int, default=None, help="Shard ranges (default 4; 8 for W3).")
    parser.add_argument("--land-share", type=float, default=0.5, help="Share of partitions landed mid-run.")
    parser.add_argument("--classic-sample", type=int, default=3, help="Real run-task processes to time.")
    parser.add_argument(
        "--strategies",
        default=",".join(ALL_STRATEGIES),
        type=lambda v: [x.strip() for x in v.split(",") if x.strip()],
        help=f"Comma list of {', '.join(ALL_STRATEGIES)} (batched is always included; metastore-db only when "
        "the metastore service keeps its tables on PostgreSQL).",
    )
    parser.add_argument(
        "--catalog-parallelism",
        type=int,
        default=4,
        help="Tables the thrift-parallel strategy lists at once, each on its own connection ([catalog] parallelism).",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="Also run metastore-db's rounds once more under cProfile, and EXPLAIN ANALYZE its statement; printed.",
    )
    parser.add_argument(
        "--triggerer-sample",
        type=int,
        default=5_000,
        help="Most tasks the simulated triggerer really pokes per round; beyond, extrapolated.",
    )
    parser.add_argument(
        "--fleet-processes",
        type=int,
        default=os.cpu_count() or 2,
        help="Worker processes of the fleet strategy, each owning an equal share of the shards "
        "(default: this machine's cores).",
    )
    parser.add_argument("--latency-samples", type=int, default=5, help="Landings timed per latency row (0: skip).")
    parser.add_argument(
        "--worker-rss-once",
        action="store_true",
        help="Measure the workers' peak RSS (a real `worker --once` on Spark and on thrift) on the first workload "
        "only: the Spark one starts a JVM, the costliest part of a small workload.",
    )
    parser.add_argument(
        "--latency-poll-interval",
        type=float,
        default=5.0,
        help="poke_interval of the probe tasks timed without a signal.",
    )
    parser.add_argument("--db-url", default=None, help="Metadata DB (default: SQLite in the bench home).")
    parser.add_argument(
        "--metastore",
        default="auto",
        choices=bench_metastore.CHOICES,
        help="Where the metastore service keeps its tables: postgresql (a database of its own on the --db-url "
        "server), derby, or auto (default): postgresql when --db-url is PostgreSQL.",
    )
    parser.add_argument("--home", default=None, help="Working folder (default: a temp folder).")
    parser.add_argument("--json", dest="json_out", default=None, help="Write the results here.")
    args = parser.parse_args()
    if args.workload == ["BOTH"]:
        args.workload = ["W1", "W2"]
    if not set(args.workload) <= set(WORKLOADS):
        parser.error(f"--workload: a comma list of {', '.join(WORKLOADS)}")
    if (
        not 0 < args.land_share <= 1
        or args.scale <= 0
        or (args.shards is not None and args.shards < 1)
        or args.triggerer_sample < 1
        or args.catalog_parallelism < 1
    ):
        parser.error(
            "--land-share in (0, 1], --scale > 0, --shards >= 1, --triggerer-sample >= 1, --catalog-parallelism >= 1"
        )
    unknown = set(args.strategies) - set(ALL_STRATEGIES)
    if unknown:
        parser.error(f"unknown strategies {sorted(unknown)}")
    if "batched" not in args.strategies:
        args.strategies.append("batched")
    try:
        args.metastore_kind, args.metastore_why = bench_metastore.choose(
            args.metastore, args.db_url or "sqlite:///bench.db"
        )
    except ValueError as exc:
        parser.error(str(exc))
    return args


def make_listers(
    cfg: Any, metastore_db: tuple[str, str] | None, service_pid: int | None, args: argparse.Namespace
) -> Listers:
    """The run's catalog clients; metastore-db and the metastore database's load only on PostgreSQL (skips said)."""
    timeout = cfg.settings.smart_sensor.metastore_timeout
    listers = Listers(
        thrift=ThriftCatalog(cfg.metastore_uris, timeout),
        parallel=ThriftCatalog(cfg.metastore_uris, timeout, parallelism=args.catalog_parallelism),
        # verify never falls due inside a run: the cold round, timed apart, is what a verify costs
        db=RecordingMetastoreDbCatalog.open(metastore_db[1], 30, PartitionFeed(verify_seconds=1e9))
        if metastore_db and "metastore-db" in args.strategies
        else None,
        # opened (and its types warmed) only when measured
        db_lookup=RecordingMetastoreDbCatalog.open(metastore_db[1], 30)
        if metastore_db and "metastore-db-lookup" in args.strategies
        else None,
        load=MetastoreLoad(metastore_db[1] if metastore_db else None, service_pid),
    )
    listers.skipped.update(skipped_strategies(args.strategies, metastore_db is not None, args.metastore_why))
    print_skipped(listers.skipped, listers.load.unavailable)
    return listers


def skipped_strategies(chosen: Iterable[str], metastore_on_postgresql: bool, metastore_why: str) -> dict[str, str]:
    """The strategies asked for that this run cannot measure, and why: metastore-db and metastore-db-lookup read the
    metastore's tables on PostgreSQL, so a service on Derby (``metastore_why``: bench_metastore.choose's reason)
    skips them."""
    if metastore_on_postgresql:
        return {}
    return {
        name: f"the metastore service keeps its tables in Derby ({metastore_why}); {name} reads them on "
        "PostgreSQL only: ./scripts/bench.sh --postgres, or --db-url postgresql://… --metastore postgresql"
        for name in ("metastore-db", "metastore-db-lookup")
        if name in chosen
    }


def print_skipped(skipped: dict[str, str], load_unavailable: str | None) -> None:
    """Say what the run leaves out, never silently: each skipped strategy and why, and why the metastore database's
    load is not measured."""
    for name, why in skipped.items():
        console.print(f"[bold]{name}: skipped[/bold]: {why}")
    if load_unavailable:
        console.print(f"metastore database load: not measured: {load_unavailable}")


def main() -> int:
    args = parse_args()
    home = Path(args.home or tempfile.mkdtemp(prefix="smartsensor-bench-"))
    home.mkdir(parents=True, exist_ok=True)
    db_url = args.db_url or f"sqlite:///{home}/bench.db"
    metastore_db = new_database(db_url, "bench_metastore") if args.metastore_kind == "postgresql" else None
    cfg_path = bench_metastore.write_config(home, db_url, metastore_db[1] if metastore_db else None)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SMARTSENSOR")}
    env.update(SMARTSENSOR_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1")
    os.environ.update(SMARTSENSOR_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1")
    cfg = load_config(str(cfg_path))
    from smartsensor.adapters import metastore_service
    from smartsensor.adapters.spark import get_spark

    reports: list[dict[str, Any]] = []
    listers: Listers | None = None
    try:
        started = time.perf_counter()
        metastore_st = metastore_service.start(cfg)
        metastore_pid = metastore_st.pid
        console.print(
            f"metastore service: {args.metastore_kind} ({args.metastore_why}), {metastore_st.database}; started in "
            f"{time.perf_counter() - started:.1f} s" + (", its schema created first" if metastore_db else "")
        )
        engine = make_engine(cfg.sql_alchemy_conn)
        init_db(engine)
        spark = get_spark(cfg)
        listers = make_listers(cfg, metastore_db, metastore_pid, args)
        for i, name in enumerate(args.workload):
            measure_rss = i == 0 or not args.worker_rss_once
            reports.append(run_workload(name, args, spark, engine, cfg, cfg_path, env, listers, measure_rss))
            reports[-1]["metastore_peak_rss_mb"] = round(tree_peak_rss_mb(metastore_pid), 1) if metastore_pid else None
            bench_tables.print_table(reports[-1])
            bench_tables.print_index(reports[-1])
            bench_tables.print_metastore_load(reports[-1], listers.skipped, listers.load.unavailable)
            bench_tables.print_profiles(reports[-1])
            console.print(
                f"metastore service (JVM) peak RSS so far: {reports[-1]['metastore_peak_rss_mb']} MB; "
                f"this bench process: {tree_peak_rss_mb(os.getpid()):.0f} MB (Spark JVM and "
                f"its children included)"
            )
    finally:
        if listers is not None:
            listers.close()
        metastore_service.stop(cfg)
        if metastore_db:
            drop_database(db_url, metastore_db[0])
    bench_tables.print_over_workloads(reports)
    out = [{k: v for k, v in r.items() if not k.startswith("_")} for r in reports]
    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(
            json.dumps(
                {
                    "db": make_engine(db_url).dialect.name,
                    "metastore": args.metastore_kind,
                    "scale": args.scale,
                    "catalog_parallelism": args.catalog_parallelism,
                    "skipped": listers.skipped if listers else {},
                    "metastore_db_load_unmeasured": None if listers is None else listers.load.unavailable,
                    "workloads": out,
                },
                indent=2,
            )
        )
        console.print(f"results written to {args.json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
