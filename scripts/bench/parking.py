"""Parking benchmark (issue 55): what a parked sensor try costs Airflow, and how fast its end can go through
Airflow's public REST API, per Airflow version, side by side in one run.

A parked try is a task in a pool with 0 slots: Airflow's scheduler makes it ``scheduled`` once its upstream tasks
are done and never queues it (it leaves pools without open slots out when it picks tasks to queue), so it takes no
worker and no trigger. Whoever knows the answer ends it with the REST API: ``PATCH …/taskInstances/{task_id}``
with ``new_state`` (``success``, ``failed``, ``skipped``). This bench measures that machinery alone, with
smartsensor's drop-in sensors as the parked tasks (``smartsensor_start_from_trigger=False``, so that their
serialized DAG is the one production parses); no smartsensor service runs.

Per version (a real Airflow: scheduler, triggerer, 3.x's dag-processor and api-server, 2.x's webserver for
``/api/v1``; LocalExecutor; Airflow's database on the throwaway PostgreSQL), ``--dags`` DAGs of ``--sensors``
sensors each, downstream of one short task that runs on a worker (a sensor with upstream tasks parks once they are
done):

- *parked*: seconds from the runs' creation to every sensor ``scheduled``; then, over ``--hold`` seconds, the
  triggers created, the sensors' worker tries, the runs' states (none may fail: the scheduler's deadlock check),
  the scheduler's CPU against the same span before the runs, and each component's resident memory growth per
  1,000 parked sensors;
- *ending*, each strategy on runs of its own (a new logical date): the REST requests, tasks ended per second,
  request p50 / p95, the REST server's CPU seconds per 1,000 tasks, and until every run is ``success``:
  ``one at a time`` (a PATCH per task, in turn), ``N in flight`` (``--concurrency`` at once), and on 3.x
  ``bulk per run`` (``PATCH …/dagRuns/{run}/taskInstances`` with every task of the run in one body). The parked
  tasks are found as the service would find them: listed by pool and state through the REST API.

    .venv/bin/python -m scripts.bench.parking                               # 300 sensors, 3.3.2 and 2.10.5
    .venv/bin/python -m scripts.bench.parking --dags 30 --versions 3.3.2    # 3,000
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any, Callable

import httpx

from scripts.airflow.stack import AirflowStack, Processes, StackError
from scripts.harness.databases import drop_database, new_database, under_throwaway_pg
from scripts.harness.usage import group_usage

POOL = "smartsensor_parked"
VENVS = Path(os.environ.get("SMARTSENSOR_AIRFLOW_VENVS", Path.home() / ".cache" / "smartsensor"))
PAGE = 100  # task instances per listing request (2.10's and 3.x's default maximum page is 100)
FIRST_DAY = date(2026, 10, 1)

DAG_FILE = """
from datetime import datetime

from airflow import DAG

try:
    from airflow.providers.standard.operators.bash import BashOperator
except ImportError:
    from airflow.operators.bash import BashOperator
from smartsensor_airflow.sensors import HivePartitionSensor, NamedHivePartitionSensor

for d in range(@DAGS@):
    with DAG(f"parking_{d}", start_date=datetime(2026, 1, 1), schedule=None, catchup=False, max_active_tasks=64):
        start = BashOperator(task_id="start", bash_command="true")
        for i in range(@SENSORS@):
            options = dict(pool="@POOL@", smartsensor_start_from_trigger=False, poke_interval=30, timeout=900)
            if i % 2:
                start >> NamedHivePartitionSensor(
                    task_id=f"named_{i}", partition_names=["bench.events/ds={{ ds }}"], retries=2, **options
                )
            else:
                start >> HivePartitionSensor(
                    task_id=f"filter_{i}", table="clicks", schema="bench", partition="ds='{{ ds }}'", **options
                )
"""


@dataclass
class Parked:
    """What the parked sensors cost one Airflow."""

    version: str
    sensors: int
    to_parked: float = 0.0  # runs created → every sensor scheduled, s
    triggers: int = 0
    worker_tries: int = 0
    failed_runs: int = 0
    scheduler_cpu_idle: float = 0.0  # CPU s per s, the --hold seconds before the runs
    scheduler_cpu_parked: float = 0.0  # and the --hold seconds while every sensor is parked
    rss_growth: dict[str, float] = field(default_factory=dict)  # component → MB per 1,000 parked sensors


@dataclass
class Ending:
    """How one strategy ended the parked sensors of its runs."""

    version: str
    strategy: str
    tasks: int
    requests: int = 0
    list_requests: int = 0
    seconds: float = 0.0  # first PATCH → last answer
    latencies: list[float] = field(default_factory=list)
    api_cpu: float = 0.0
    runs_done: float = 0.0  # first PATCH → every run success
    errors: list[str] = field(default_factory=list)


def sensors_in(stack: AirflowStack, run_ids: list[str]) -> dict[str, int]:
    """State → count of the parked sensors (every task but ``start``) of ``run_ids``."""
    rows = stack.rows(
        "SELECT coalesce(state, 'none'), count(*) FROM task_instance WHERE run_id IN :runs AND task_id <> 'start' "
        "AND dag_id LIKE 'parking_%' GROUP BY 1",
        expanding=["runs"],
        runs=run_ids,
    )
    return {state: int(n) for state, n in rows}


def all_parked(stack: AirflowStack, run_ids: list[str], n: int) -> bool:
    """Whether the ``n`` sensors of ``run_ids`` are all ``scheduled``."""
    return sensors_in(stack, run_ids).get("scheduled") == n


def runs_succeeded(stack: AirflowStack, run_ids: list[str]) -> bool:
    """Whether every run of ``run_ids`` is ``success``."""
    states = stack.rows("SELECT state FROM dag_run WHERE run_id IN :runs", expanding=["runs"], runs=run_ids)
    return len(states) == len(run_ids) and all(state == "success" for (state,) in states)


def list_parked(stack: AirflowStack, client: httpx.Client) -> tuple[list[dict[str, Any]], int]:
    """Every task instance ``scheduled`` in POOL, listed through the REST API as the service would; and the
    requests it took."""
    found: list[dict[str, Any]] = []
    requests = 0
    while True:
        if stack.major >= 3:
            response = client.get(
                "/api/v2/dags/~/dagRuns/~/taskInstances",
                params={"pool": POOL, "state": "scheduled", "limit": PAGE, "offset": len(found)},
            )
        else:
            body = {"pool": [POOL], "state": ["scheduled"], "page_limit": PAGE, "page_offset": len(found)}
            response = client.post("/api/v1/dags/~/dagRuns/~/taskInstances/list", json=body)
        requests += 1
        response.raise_for_status()
        page = response.json()["task_instances"]
        found += page
        if len(page) < PAGE:
            return found, requests


def patch_one(stack: AirflowStack, client: httpx.Client, ti: dict[str, Any]) -> float:
    """End one parked try as a success; the request's seconds."""
    run_id = ti["dag_run_id"]
    path = f"/dags/{ti['dag_id']}/dagRuns/{run_id}/taskInstances/{ti['task_id']}"
    started = time.monotonic()
    if stack.major >= 3:
        response = client.patch(f"/api/v2{path}", json={"new_state": "success", "note": "bench: landed"})
    else:
        response = client.patch(f"/api/v1{path}", json={"dry_run": False, "new_state": "success"})
    response.raise_for_status()
    return time.monotonic() - started


def patch_bulk(client: httpx.Client, run: tuple[str, str], tis: list[dict[str, Any]]) -> float:
    """End every parked try of one run in one bulk request (3.x); its seconds."""
    entities = [{"task_id": ti["task_id"], "new_state": "success", "note": "bench: landed"} for ti in tis]
    started = time.monotonic()
    response = client.patch(
        f"/api/v2/dags/{run[0]}/dagRuns/{run[1]}/taskInstances",
        json={"actions": [{"action": "update", "entities": entities}]},
    )
    response.raise_for_status()
    failed = response.json().get("update", {}).get("errors") or []
    if failed:
        raise StackError(f"bulk PATCH of {run}: {failed[:3]}")
    return time.monotonic() - started


def end_in_airflow(stack: AirflowStack, ends: list[dict[str, Any]], batch: int, pool: str = POOL) -> dict[str, Any]:
    """End parked tries with the provider's ``end_parked`` in a process of Airflow's own (its venv, its settings), a
    transaction per ``batch`` of ``ends`` (``ParkedEnd``'s fields); what it printed: each batch's ``seconds``, the
    keys ``applied`` and its ``cpu`` seconds."""
    done = subprocess.run(
        [str(stack.venv / "bin" / "python"), str(Path(__file__).with_name("parking_in_airflow.py"))],
        input=json.dumps({"pool": pool, "batch": batch, "ends": ends}),
        capture_output=True,
        text=True,
        env=stack.env,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise StackError(f"ending in Airflow exited {done.returncode}: {done.stderr[-3000:]}")
    return dict(json.loads(done.stdout))


def success_of(ti: dict[str, Any]) -> dict[str, Any]:
    """A parked try listed by the REST API, ended as a success."""
    keys = ("dag_id", "task_id", "map_index", "try_number")
    return {"run_id": ti["dag_run_id"], **{k: ti[k] for k in keys}, "state": "success", "note": "bench: landed"}


def end_all(
    stack: AirflowStack, client: httpx.Client, strategy: str, concurrency: int, tis: list[dict[str, Any]]
) -> tuple[list[float], int]:
    """End ``tis`` by ``strategy`` through the REST API; each request's seconds, and the requests."""
    if strategy == "bulk per run":
        by_run: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for ti in tis:
            by_run.setdefault((ti["dag_id"], ti["dag_run_id"]), []).append(ti)
        return [patch_bulk(client, run, group) for run, group in by_run.items()], len(by_run)
    workers = 1 if strategy == "one at a time" else concurrency
    with ThreadPoolExecutor(max_workers=workers) as pool:
        latencies = list(pool.map(lambda ti: patch_one(stack, client, ti), tis))
    return latencies, len(tis)


def wait_for(stack: AirflowStack, what: str, predicate: Callable[[], bool], timeout: float) -> float:
    """Seconds until ``predicate`` holds (polled every 0.5 s while Airflow's components live)."""
    return stack.wait(what, predicate, timeout, step=0.5)


def bench_version(version: str, admin_url: str, args: argparse.Namespace, work: Path) -> tuple[Parked, list[Ending]]:
    """Start one Airflow, park its sensors, end them by each strategy; what was measured."""
    venv = VENVS / f"airflow-{version}"
    if not (venv / "bin" / "airflow").exists():
        raise SystemExit(f"no Airflow venv at {venv}: build it with scripts/airflow_env.sh (ensure_airflow_venvs)")
    name, url = new_database(admin_url, f"bench_parking_{version.replace('.', '_')}")
    home = work / version
    stack = AirflowStack(
        venv, home / "airflow", Processes(home / "logs"), parallelism=8, db_url=url, rest=True, api_workers=1
    )
    n = args.dags * args.sensors
    dag_ids = [f"parking_{d}" for d in range(args.dags)]
    try:
        print(f"{version}: airflow db migrate …", flush=True)
        stack.migrate()
        source = DAG_FILE.replace("@DAGS@", str(args.dags)).replace("@SENSORS@", str(args.sensors))
        (stack.dags / "parking.py").write_text(source.replace("@POOL@", POOL))
        stack.start()
        stack.wait_healthy(timeout=600)
        stack.wait_parsed(dag_ids, timeout=600)
        stack.api("POST", f"/api/v{2 if stack.major >= 3 else 1}/pools", {"name": POOL, "slots": 0})
        groups = {name[len("airflow-") :]: proc.pid for name, proc in stack.processes.procs.items()}
        client = httpx.Client(base_url=stack.url, headers=stack.auth_headers(), timeout=300)
        parked = Parked(version, n)
        in_airflow = f"in Airflow, {args.batch} a transaction"
        strategies = [in_airflow, "one at a time", f"{args.concurrency} in flight"]
        strategies += ["bulk per run"] if stack.major >= 3 else []
        if args.strategies:  # by the start of their names, the first one run twice (the warm-up measures nothing)
            chosen = [s for s in strategies if any(s.startswith(c.strip()) for c in args.strategies.split(","))]
            strategies = chosen[:1] + chosen
        endings: list[Ending] = []
        day = FIRST_DAY
        for number, strategy in enumerate(strategies):
            # The parked cost is measured on the second round: the first has warmed every component (the DAGs
            # deserialized, the REST server's first requests served), whose memory is not the parked tries'.
            measured = number == 1
            if measured:  # the scheduler's idle cost, over the span the parked one is measured on
                before = {c: group_usage(pid) for c, pid in groups.items()}
                time.sleep(args.hold)
                idle = group_usage(groups["scheduler"]).cpu_seconds - before["scheduler"].cpu_seconds
                parked.scheduler_cpu_idle = idle / args.hold
                before = {c: group_usage(pid) for c, pid in groups.items()}
            triggered = time.monotonic()
            run_ids = stack.trigger_many(dag_ids, day.isoformat())
            print(f"{version}: {strategy}: {len(run_ids)} runs for {day} …", flush=True)
            wait_for(stack, "every sensor parked", functools.partial(all_parked, stack, run_ids, n), 60 + n)
            if measured:
                parked.to_parked = time.monotonic() - triggered
                cpu = group_usage(groups["scheduler"]).cpu_seconds
                time.sleep(args.hold)
                parked.scheduler_cpu_parked = (group_usage(groups["scheduler"]).cpu_seconds - cpu) / args.hold
                after = {c: group_usage(pid) for c, pid in groups.items()}
                parked.rss_growth = {c: (after[c].rss_bytes - before[c].rss_bytes) / 2**20 * 1000 / n for c in groups}
                parked.triggers = int(stack.rows("SELECT count(*) FROM trigger")[0][0])
                parked.failed_runs = sum(1 for s in stack.run_states().values() if s == "failed")
                states = sensors_in(stack, run_ids)
                if states != {"scheduled": n}:
                    raise StackError(f"{version}: parked sensors left 'scheduled' during the hold: {states}")
            warm_up = number == 0 and strategies.count(strategy) > 1
            ending = Ending(version, strategy + (" (warm-up)" if warm_up else ""), n)
            tis, ending.list_requests = list_parked(stack, client)
            tis = [ti for ti in tis if ti["dag_run_id"] in run_ids]
            if len(tis) != n:
                raise StackError(f"{version}: the REST API listed {len(tis)} parked tries of {n}")
            api = stack.processes.procs["airflow-api-server" if stack.major >= 3 else "airflow-webserver"].pid
            cpu = group_usage(api).cpu_seconds
            started = time.monotonic()
            if strategy == in_airflow:
                result = end_in_airflow(stack, [success_of(ti) for ti in tis], args.batch)
                if len(result["applied"]) != n:
                    raise StackError(f"{version}: ending in Airflow applied {len(result['applied'])} of {n}")
                ending.latencies, ending.api_cpu = result["seconds"], result["cpu"]
                ending.requests = len(ending.latencies)
                ending.seconds = sum(ending.latencies)  # not the process's start and Airflow's import
            else:
                ending.latencies, ending.requests = end_all(stack, client, strategy, args.concurrency, tis)
                ending.seconds = time.monotonic() - started
                ending.api_cpu = group_usage(api).cpu_seconds - cpu
            ending.runs_done = ending.seconds + wait_for(
                stack, "every run success", functools.partial(runs_succeeded, stack, run_ids), 120 + n
            )
            endings.append(ending)
            if measured:
                parked.worker_tries = sum(
                    stack.worker_tries(dag_id, run_id, f"{kind}_{i}")
                    for dag_id in dag_ids
                    for run_id in run_ids
                    for i in range(args.sensors)
                    for kind in ("named", "filter")
                )
            day += timedelta(days=1)
        client.close()
        return parked, endings
    finally:
        stack.stop()
        drop_database(admin_url, name)


def p(values: list[float], q: float) -> float:
    """The q-quantile of ``values`` (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def parked_table(rows: list[Parked]) -> str:
    """The parked sensors' cost, a row per version."""
    components = sorted({c for r in rows for c in r.rss_growth})
    head = (
        "| Airflow | sensors | runs → all parked s | triggers | worker tries | failed runs "
        "| scheduler CPU idle / parked " + "".join(f"| {c} MB/1,000 " for c in components) + "|"
    )
    lines = [head, "|" + "---|" * (7 + len(components))]
    for r in rows:
        lines.append(
            f"| {r.version} | {r.sensors:,} | {r.to_parked:.1f} | {r.triggers} | {r.worker_tries} | {r.failed_runs} "
            f"| {r.scheduler_cpu_idle:.0%} / {r.scheduler_cpu_parked:.0%} "
            + "".join(f"| {r.rss_growth.get(c, 0.0):+.1f} " for c in components)
            + "|"
        )
    return "\n".join(lines)


def ending_table(rows: list[Ending]) -> str:
    """How each strategy ended the parked sensors, a row per version and strategy."""
    lines = [
        "| Airflow | strategy | tasks | list requests | requests (transactions) | tasks/s | each p50 / p95 ms "
        "| ending CPU s per 1,000 | first end → every run success s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.version} | {r.strategy} | {r.tasks:,} | {r.list_requests} | {r.requests:,} "
            f"| {r.tasks / r.seconds:.1f} | {p(r.latencies, 0.5) * 1000:.0f} / {p(r.latencies, 0.95) * 1000:.0f} "
            f"| {r.api_cpu * 1000 / r.tasks:.1f} | {r.runs_done:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", default="3.3.2,2.10.5", help="Airflow versions, comma-separated")
    parser.add_argument("--dags", type=int, default=3)
    parser.add_argument("--sensors", type=int, default=100, help="parked sensors per DAG")
    parser.add_argument("--concurrency", type=int, default=8, help="PATCHes in flight for 'N in flight'")
    parser.add_argument(
        "--strategies", default="", help="the ways to end to run, by the start of their names (default: all)"
    )
    parser.add_argument("--batch", type=int, default=500, help="tries a transaction, ending in Airflow")
    parser.add_argument("--hold", type=float, default=20.0, help="seconds the parked cost is measured over")
    args = parser.parse_args(argv)
    admin_url = os.environ.get("SMARTSENSOR_TEST_PG_ADMIN_URL")
    if not admin_url:
        return under_throwaway_pg(argv, "scripts.bench.parking")
    parked: list[Parked] = []
    endings: list[Ending] = []
    with tempfile.TemporaryDirectory(prefix="smartsensor-parking-") as work:
        for version in [v.strip() for v in args.versions.split(",") if v.strip()]:
            one, ends = bench_version(version, admin_url, args, Path(work))
            parked.append(one)
            endings += ends
            print("\n" + parked_table(parked) + "\n\n" + ending_table(endings) + "\n", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
