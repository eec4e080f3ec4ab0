"""The catalog side of scripts/bench.py: our round on the thrift backend, a simulation of Airflow's triggerer
(one coroutine per task, each its own metastore call per poke), the metastore's own floor per listing, and
the peak RSS of a real worker process (JVM included) on each backend."""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from smartsensor.adapters.sql import tasks as task_sql
from smartsensor.domain.states import State
from smartsensor.sensors.batch import BatchChecker
from smartsensor.sensors.thrift_catalog import ThriftCatalog
from smartsensor.service.round import ShardWorker, run_round

TRIGGERER_THREADS = 6  # asyncio's default executor on 2 cores: min(32, cpus + 4); Airflow's sync hooks run there


def thrift_round(workers: list[ShardWorker], catalog: ThriftCatalog) -> dict[str, Any]:
    """Ours, partitions through the process's ThriftCatalog (pool of 2, column types cached)."""
    r = run_round(workers, lambda: BatchChecker(lister=catalog))
    return {"catalog_calls": r.catalog_calls, "db_statements": r.db_statements, "wall": r.seconds,
            "catalog_seconds": r.catalog_seconds, "marked": sum(r.marked.values()), "schema_calls": r.schema_calls}


def waiting_partitions(engine: Any) -> list[tuple[str, str, str]]:
    """(db, table, ds) of every waiting task: what each deferred trigger would be polling for."""
    out = []
    with engine.connect() as conn:
        for t in task_sql.list_tasks(conn):
            if t["state"] in State.SMART_WAITING:
                name = json.loads(t["attr_dict"])["partition_names"][0]
                table, spec = name.split("/", 1)
                db, tbl = table.split(".")
                out.append((db, tbl, spec.split("=", 1)[1]))
    return out


def triggerer_round(engine: Any, uris: list[tuple[str, int]], timeout: float) -> dict[str, Any]:
    """A faithful simulation of Airflow's triggerer, not Airflow itself: one coroutine per waiting task, each
    opening its own metastore connection and asking for its own partition (as the Hive hook's
    check_for_named_partition does), no dedup and no batching; sync thrift calls run in the event loop's
    executor. DB writes (Airflow's trigger events) are not counted."""
    partitions = waiting_partitions(engine)

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
    wall = time.perf_counter() - started
    return {"catalog_calls": len(partitions), "db_statements": 0, "wall": wall, "catalog_seconds": wall,
            "marked": sum(landed), "schema_calls": 0}


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
    """Run ``cmd`` to its end, sampling the peak RSS of its process tree (a JVM is not our child, so VmHWM of
    the tree is read while it runs); exits the benchmark with its stderr if it fails or overruns."""
    started, peak, java = time.perf_counter(), 0.0, False
    with tempfile.TemporaryFile("w+") as out_f, tempfile.TemporaryFile("w+") as err_f:
        proc = subprocess.Popen(cmd, env=env, stdout=out_f, stderr=err_f, text=True)
        while proc.poll() is None:
            peak = max(peak, tree_peak_rss_mb(proc.pid))
            java = java or any(_comm(p) == "java" for p in _tree(proc.pid))
            if time.perf_counter() - started > limit_s:
                proc.kill()
                raise SystemExit(f"{what} did not finish within {limit_s:g} s")
            time.sleep(0.1)
        seconds = time.perf_counter() - started
        out_f.seek(0)
        err_f.seek(0)
        stdout, stderr = out_f.read(), err_f.read()
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed ({proc.returncode}): {stderr.strip()[-800:]}")
    return Sampled(stdout, seconds, peak, java)


def worker_peak_rss(cfg_path: Path, env: dict[str, str], backend: str, limit: int) -> dict[str, Any]:
    """One real `smartsensor worker --once` over every shard on ``backend``: its peak RSS with every child
    (a JVM included), and whether a JVM ran."""
    cmd = [sys.executable, "-m", "smartsensor.cli", "--config", str(cfg_path), "worker", "--once", "--json",
           "--shard-min", "0", "--shard-max", str(limit)]
    run = run_sampled(cmd, dict(env, SMARTSENSOR__SMART_SENSOR__CATALOG_BACKEND=backend),
                      f"worker --once ({backend})", 600)
    last = json.loads(run.stdout.strip().splitlines()[-1])
    return {"peak_rss_mb": round(run.peak_rss_mb, 1), "jvm": run.jvm, "seconds": round(run.seconds, 2),
            "round_seconds": last.get("seconds"), "marked": sum(last.get("marked", {}).values())}


def _tree(pid: int) -> list[int]:
    """A process and its descendants."""
    out, stack = [], [pid]
    while stack:
        p = stack.pop()
        out.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                stack += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def tree_peak_rss_mb(pid: int) -> float:
    """Sum of VmHWM (peak RSS) over a process and its descendants, in MB."""
    total = 0
    for p in _tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024
