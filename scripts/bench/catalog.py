"""The catalog side of scripts/bench/bench.py: a simulation of Airflow's triggerer
(one coroutine per task, each its own metastore call per poke), the metastore's own floor per listing, and
the peak RSS of a real worker process (JVM included) on each backend."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts.bench import sql as bench_sql
from scripts.harness.usage import command_name, tree, tree_peak_rss_mb
from smartsensor.adapters.catalog.thrift_catalog import ThriftCatalog
from smartsensor.adapters.process import smartsensor_command

TRIGGERER_THREADS = 6  # asyncio's default executor on 2 cores: min(32, cpus + 4); Airflow's sync hooks run there


def waiting_partitions(engine: Any) -> list[tuple[str, str, str]]:
    """(db, table, ds) of every waiting task: what each deferred trigger would be polling for."""
    out = []
    with engine.connect() as conn:
        for attr_dict in bench_sql.waiting_attr_dicts_for_benchmark(conn):
            name = json.loads(attr_dict)["partition_names"][0]
            table, spec = name.split("/", 1)
            db, tbl = table.split(".")
            out.append((db, tbl, spec.split("=", 1)[1]))
    return out


def triggerer_round(
    engine: Any, uris: list[tuple[str, int]], timeout: float, sample: int, env: dict[str, str]
) -> dict[str, Any]:
    """The simulated triggerer (``simulate_triggerer``) in a process of its own, so its peak RSS is its own.
    Over ``sample`` waiting tasks at most (a fixed random choice): with more, the round's seconds and marked
    count are scaled up to all tasks and flagged as extrapolated (the 6-thread executor is saturated, so
    time grows linearly with the number of pokes). Calls per round = waiting tasks, by construction."""
    partitions = waiting_partitions(engine)
    chosen = partitions if len(partitions) <= sample else random.Random(0).sample(partitions, sample)
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump({"uris": uris, "timeout": timeout, "partitions": chosen}, f)
        f.flush()
        run = run_sampled([sys.executable, "-m", "scripts.bench.catalog", f.name], env, "the simulated triggerer", 3600)
    got = json.loads(run.stdout.strip().splitlines()[-1])
    scale = len(partitions) / max(1, len(chosen))
    return {
        "catalog_calls": len(partitions),
        "db_statements": 0,
        "wall": got["wall"] * scale,
        "catalog_seconds": got["wall"] * scale,
        "marked": round(got["landed"] * scale),
        "schema_calls": 0,
        "extrapolated": scale > 1,
        "extra": {"peak_rss_mb": round(run.peak_rss_mb, 1), "sample": len(chosen), "tasks": len(partitions)},
    }


def simulate_triggerer(
    uris: list[tuple[str, int]], timeout: float, partitions: list[tuple[str, str, str]]
) -> dict[str, Any]:
    """A faithful simulation of Airflow's triggerer, not Airflow itself: one coroutine per waiting task, each
    opening its own metastore connection and asking for its own partition (as the Hive hook's
    check_for_named_partition does), no dedup and no batching; sync thrift calls run in the event loop's
    executor. DB writes (Airflow's trigger events) are not counted."""

    def poke(db: str, table: str, ds: str) -> bool:
        catalog = ThriftCatalog(uris, timeout, pool_size=1)  # the hook opens a client per poke
        try:
            return bool(catalog.call("poking", "get_partition_names_ps", db, table, [ds], -1))
        finally:
            catalog.close()

    async def all_triggers() -> list[bool]:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(TRIGGERER_THREADS))
        return await asyncio.gather(*(asyncio.to_thread(poke, *p) for p in partitions))

    started = time.perf_counter()
    landed = asyncio.run(all_triggers())
    return {"wall": time.perf_counter() - started, "landed": sum(landed), "calls": len(partitions)}


def worker_once(cfg_path: Path, shard_min: int, shard_max: int) -> list[str]:
    """The command of one real pinned `smartsensor worker --once --json` over [shard_min, shard_max)."""
    return smartsensor_command(
        "--config",
        str(cfg_path),
        "worker",
        "--once",
        "--json",
        "--shard-min",
        str(shard_min),
        "--shard-max",
        str(shard_max),
    )


def fleet_round(cfg_path: Path, env: dict[str, str], processes: int, limit: int) -> dict[str, Any]:
    """One round of a fleet: ``processes`` real `smartsensor worker --once` processes on the thrift backend,
    each owning an equal contiguous share of the shard ranges, started together (as leased workers on their
    hosts would run). A first round in a fresh process: sensors are rebuilt, types read. ``wall`` is the
    slowest process's round (``catalog_seconds`` its catalog time); the process wall time, per-process and
    summed peak RSS go in ``extra``."""
    bounds = [i * limit // processes for i in range(processes + 1)]
    cmds = [worker_once(cfg_path, bounds[i], bounds[i + 1]) for i in range(processes)]
    runs, wall = run_sampled_many(
        cmds, dict(env, SMARTSENSOR__SMART_SENSOR__CATALOG_BACKEND="thrift"), "fleet worker --once", 3600
    )
    rounds = [json.loads(r.stdout.strip().splitlines()[-1]) for r in runs]
    slowest = max(rounds, key=lambda r: r["seconds"])
    return {
        "catalog_calls": sum(r["catalog_calls"] for r in rounds),
        "db_statements": sum(r["db_statements"] for r in rounds),
        "wall": slowest["seconds"],
        "catalog_seconds": slowest["catalog_seconds"],
        "marked": sum(sum(r.get("marked", {}).values()) for r in rounds),
        "schema_calls": sum(r["schema_calls"] for r in rounds),
        "extra": {
            "processes": processes,
            "process_wall_seconds": round(wall, 2),
            "loaded": sum(r["loaded"] for r in rounds),
            "peak_rss_mb_max": round(max(r.peak_rss_mb for r in runs), 1),
            "peak_rss_mb_sum": round(sum(r.peak_rss_mb for r in runs), 1),
            "jvm": any(r.jvm for r in runs),
        },
    }


def metastore_floor(uris: list[tuple[str, int]], db: str, tables: list[str], reps: int = 3) -> float:
    """Median over tables of the fastest full listing (get_partition_names) on one warm connection: the
    metastore's own time per listing plus one loopback round trip."""
    catalog = ThriftCatalog(uris, 30.0, pool_size=1)
    best = []
    try:
        for table in tables:
            times = []
            for _ in range(reps):
                started = time.perf_counter()
                catalog.call("floor", "get_partition_names", db, table, -1)
                times.append(time.perf_counter() - started)
            best.append(min(times))
    finally:
        catalog.close()
    return statistics.median(best)


@dataclass
class Sampled:
    """A finished subprocess with the peak RSS of it and its children, sampled every 0.1 s."""

    stdout: str
    seconds: float
    peak_rss_mb: float
    jvm: bool


def run_sampled(cmd: list[str], env: dict[str, str], what: str, limit_s: float) -> Sampled:
    """Run ``cmd`` to its end, sampling the peak RSS of its process tree; exits the benchmark with its
    stderr if it fails or overruns."""
    return run_sampled_many([cmd], env, what, limit_s)[0][0]


def run_sampled_many(
    cmds: list[list[str]], env: dict[str, str], what: str, limit_s: float
) -> tuple[list[Sampled], float]:
    """Start every command at once and run them to their end, sampling each one's process tree every 0.1 s
    (a JVM is not our child, so VmHWM of the tree is read while it runs). Returns the runs and the wall
    time until the last ended; exits the benchmark with a stderr if one fails or they overrun."""
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        files = [
            (stack.enter_context(tempfile.TemporaryFile("w+")), stack.enter_context(tempfile.TemporaryFile("w+")))
            for _ in cmds
        ]
        procs = [
            subprocess.Popen(cmd, env=env, stdout=o, stderr=e, text=True)
            for cmd, (o, e) in zip(cmds, files, strict=False)
        ]
        peak, java, ended = [0.0] * len(procs), [False] * len(procs), [0.0] * len(procs)
        try:
            while any(p.poll() is None for p in procs):
                for i, p in enumerate(procs):
                    if p.poll() is None:
                        peak[i] = max(peak[i], tree_peak_rss_mb(p.pid))
                        java[i] = java[i] or any(command_name(c) == "java" for c in tree(p.pid))
                        ended[i] = time.perf_counter() - started
                if time.perf_counter() - started > limit_s:
                    raise SystemExit(f"{what} did not finish within {limit_s:g} s")
                time.sleep(0.1)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        wall = time.perf_counter() - started
        runs = []
        for p, (o, e), pk, jv, sec in zip(procs, files, peak, java, ended, strict=False):
            o.seek(0)
            e.seek(0)
            if p.returncode != 0:
                raise SystemExit(f"{what} failed ({p.returncode}): {e.read().strip()[-800:]}")
            runs.append(Sampled(o.read(), sec, pk, jv))
    return runs, wall


def worker_peak_rss(cfg_path: Path, env: dict[str, str], backend: str, limit: int) -> dict[str, Any]:
    """One real `smartsensor worker --once` over every shard on ``backend``: its peak RSS with every child
    (a JVM included), and whether a JVM ran."""
    run = run_sampled(
        worker_once(cfg_path, 0, limit),
        dict(env, SMARTSENSOR__SMART_SENSOR__CATALOG_BACKEND=backend),
        f"worker --once ({backend})",
        600,
    )
    last = json.loads(run.stdout.strip().splitlines()[-1])
    return {
        "peak_rss_mb": round(run.peak_rss_mb, 1),
        "jvm": run.jvm,
        "seconds": round(run.seconds, 2),
        "round_seconds": last.get("seconds"),
        "marked": sum(last.get("marked", {}).values()),
    }


if __name__ == "__main__":  # the simulated triggerer's own process: python -m scripts.bench.catalog SPEC.json
    spec = json.loads(Path(sys.argv[1]).read_text())
    print(
        json.dumps(
            simulate_triggerer(
                [tuple(u) for u in spec["uris"]], spec["timeout"], [tuple(p) for p in spec["partitions"]]
            )
        )
    )
