"""The main job, end to end on the embedded defaults: SQLite + a local Hive metastore service + local Spark.

Submits the DAG files in scripts/demo/dags (a few hundred sensor tasks over a few dozen partitions),
starts the landing pipeline, N shard workers and the scheduler, shows live progress, and ends with a
summary: tasks by final state, distinct partitions checked, catalog calls made vs what classic poke
mode would have made for the same waits. Exit 0 only if every task whose partition landed succeeded
and every other one ended by its own timeout rules.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from smartsensor.adapters.metastore_service_process import free_port
from smartsensor.adapters.process import smartsensor_command
from smartsensor.config_keys import render_config

ROOT = Path(__file__).resolve().parents[2]
DAGS = ROOT / "scripts" / "demo" / "dags"
DS = "2026-11-22"
WAITING = ("smart_pending", "smart_running", "up_for_retry", "scheduled", "running")
console = Console()


def write_config(home: Path, port: int, workers: int) -> Path:
    """The demo's config: every key commented, as `smartsensor config init` writes it."""
    cfg = home / "airflow.cfg"
    cfg.write_text(
        render_config(
            {
                ("core", "sql_alchemy_conn"): f"sqlite:///{home}/smartsensor.db",
                ("smart_sensor", "shards"): str(max(workers, 4)),
                ("smart_sensor", "poke_interval"): "1",
                ("spark", "warehouse_dir"): f"{home}/warehouse",
                ("spark", "metastore_uris"): f"thrift://127.0.0.1:{port}",
                ("spark", "conf"): "spark.driver.memory=512m",
                ("metastore", "port"): str(port),
                ("scheduler", "parallelism"): "1",
                ("scheduler", "loop_interval"): "1",
            }
        )
    )
    return cfg


class Demo:
    """Owns the processes of one demo run."""

    def __init__(self, home: Path, workers: int) -> None:
        self.home = home
        self.workers = workers
        self.logs = home / "logs"
        self.procs: dict[str, subprocess.Popen] = {}
        self.env = dict(
            os.environ,
            SMARTSENSOR_HOME=str(home),
            SPARK_LOCAL_IP="127.0.0.1",
            SMARTSENSOR_DEMO_WAREHOUSE=str(home / "warehouse"),
        )
        self.env.pop("SMARTSENSOR_CONFIG", None)
        self.env = {k: v for k, v in self.env.items() if not k.startswith("SMARTSENSOR__")}

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(smartsensor_command(*args), env=self.env, capture_output=True, text=True)
        if check and proc.returncode != 0:
            raise SystemExit(f"smartsensor {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
        return proc

    def start(self, name: str, cmd: list[str]) -> None:
        out = open(self.logs / f"{name}.log", "w")
        self.procs[name] = subprocess.Popen(
            cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        self.cli("metastore", "stop", check=False)

    # -- progress ------------------------------------------------------------------------------
    def tasks(self) -> list[dict[str, Any]]:
        return json.loads(self.cli("tasks", "--json").stdout)

    def landed(self) -> tuple[set[str], set[str]]:
        partitions, files = set(), set()
        log = self.logs / "pipeline.log"
        for line in log.read_text().splitlines() if log.exists() else []:
            if line.startswith("landed "):
                partitions.add(line.split(" ", 1)[1].strip())
            elif line.startswith("success-file "):
                files.add(line.split(" ", 1)[1].strip())
        return partitions, files

    def rounds(self) -> list[dict[str, Any]]:
        return worker_rounds(self.logs / "workers.log")


def worker_rounds(log: Path) -> list[dict[str, Any]]:
    """The rounds `smartsensor workers --json` logged so far (one JSON object per line; a line cut short by a
    process still writing it is skipped)."""
    out = []
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        if line.startswith("{") and '"catalog_calls"' in line:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def progress_table(tasks: list[dict[str, Any]], landed: int, rounds: list[dict[str, Any]], elapsed: float) -> Table:
    states = Counter(t["state"] for t in tasks)
    table = Table(title=f"smartsensor demo — {elapsed:5.1f} s", show_header=True)
    table.add_column("state")
    table.add_column("tasks", justify="right")
    for state in (
        "smart_pending",
        "smart_running",
        "scheduled",
        "running",
        "up_for_retry",
        "success",
        "failed",
        "skipped",
    ):
        table.add_row(state, str(states.get(state, 0)))
    table.add_row("[dim]partitions landed[/dim]", str(landed))
    table.add_row("[dim]worker rounds[/dim]", str(len(rounds)))
    table.add_row("[dim]catalog + FS calls[/dim]", str(sum(r["catalog_calls"] + r["fs_calls"] for r in rounds)))
    return table


# -- verification and the classic-mode comparison ---------------------------------------------


def check_landed(task: dict[str, Any], partitions: set[str], files: set[str]) -> bool:
    """Whether this task's check was satisfied by what the pipeline reported landing."""
    attrs = json.loads(task["attr_dict"])
    op = task["operator"]
    if "partition_names" in attrs:
        return all(name in partitions for name in attrs["partition_names"])
    if op == "HivePartitionSensor":
        want = attrs["partition"]
        for name in partitions:
            table, _, spec = name.partition("/")
            kv = dict(part.split("=", 1) for part in spec.split("/"))
            if table == attrs["table"] and all(kv.get(k) == v for k, v in want.items()):
                return True
        return False
    if op == "SuccessFileSensor":
        return any(
            attrs["path"].rstrip("/").endswith(f.split("://", 1)[-1].rstrip("/")) or f.endswith(attrs["path"])
            for f in files
        )
    raise ValueError(f"demo does not know how to verify {op}")


def classic_calls(task: dict[str, Any]) -> int:
    """Catalog/FS calls classic poke mode makes for this task's wait: one per table per poke, every interval."""
    if not task["start_date"] or not task["end_date"]:
        return 0
    exec_dict = json.loads(task["exec_dict"])
    waited = (datetime.fromisoformat(task["end_date"]) - datetime.fromisoformat(task["start_date"])).total_seconds()
    pokes = int(waited // exec_dict["poke_interval"]) + 1
    attrs = json.loads(task["attr_dict"])
    tables = len({n.split("/", 1)[0] for n in attrs["partition_names"]}) if "partition_names" in attrs else 1
    return pokes * tables * task["try_number"]


def verify(tasks: list[dict[str, Any]], partitions: set[str], files: set[str]) -> list[str]:
    """Problems found: tasks not in the state their landing and timeout rules require."""
    problems = []
    for t in tasks:
        exec_dict = json.loads(t["exec_dict"])
        label = f"{t['dag_id']}.{t['task_id']}"
        if check_landed(t, partitions, files):
            if t["state"] != "success":
                problems.append(f"{label}: partition landed but state is {t['state']}")
            continue
        want = "skipped" if exec_dict["soft_fail"] else "failed"
        if t["state"] != want:
            problems.append(f"{label}: never landed, expected {want}, got {t['state']}")
        elif t["try_number"] != exec_dict["retries"] + 1:
            problems.append(f"{label}: ended after try {t['try_number']}, expected {exec_dict['retries'] + 1}")
        else:
            waited = (datetime.fromisoformat(t["end_date"]) - datetime.fromisoformat(t["start_date"])).total_seconds()
            if waited < exec_dict["timeout"] - 0.5:
                problems.append(f"{label}: ended after {waited:.1f} s, before its timeout {exec_dict['timeout']} s")
    return problems


def summary(tasks: list[dict[str, Any]], rounds: list[dict[str, Any]], partitions: set[str], elapsed: float) -> Table:
    smart = [t for t in tasks if t["operator"] != "ClassicEventsSensor"]
    made = sum(r["catalog_calls"] + r["fs_calls"] for r in rounds)
    classic = sum(classic_calls(t) for t in smart)
    distinct = len({t["hashcode"] for t in smart})
    table = Table(title=f"smartsensor demo summary ({elapsed:.0f} s)")
    table.add_column("")
    table.add_column("value", justify="right")
    for state, n in sorted(Counter(t["state"] for t in tasks).items()):
        table.add_row(f"tasks {state}", str(n))
    table.add_row("tasks in shard workers / classic mode", f"{len(smart)} / {len(tasks) - len(smart)}")
    table.add_row("distinct checks (hashes)", str(distinct))
    table.add_row("partitions landed by the pipeline", str(len(partitions)))
    table.add_row("worker rounds", str(len(rounds)))
    table.add_row("catalog + FS calls made by workers", str(made))
    table.add_row("classic poke mode, same waits (computed)", str(classic))
    table.add_row("classic / smart", f"{classic / made:.1f}x" if made else "-")
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=str(ROOT / ".demo"), help="Demo home folder (recreated).")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--every", type=float, default=1.5, help="Seconds between landed partitions.")
    parser.add_argument(
        "--deadline",
        type=float,
        default=240,
        help="Seconds before the demo gives up waiting for the run to finish (raise it on a loaded "
        "machine); a run cut short by it is reported as such, never as wrong states.",
    )
    args = parser.parse_args()

    home = Path(args.home)
    shutil.rmtree(home, ignore_errors=True)
    (home / "logs").mkdir(parents=True)
    demo = Demo(home, args.workers)
    port = free_port()
    write_config(home, port, args.workers)
    started = time.monotonic()
    cut_short = False
    try:
        console.print(f"[bold]home[/bold] {home}   metastore thrift://127.0.0.1:{port}")
        console.print(demo.cli("metastore", "start").stdout.strip())
        console.print(demo.cli("db", "init").stdout.strip())
        for dag in sorted(DAGS.glob("*.py")):
            rows = json.loads(demo.cli("submit", str(dag), "--execution-date", DS, "--json").stdout)
            routed = Counter(r["state"] for r in rows)
            console.print(
                f"submitted {dag.stem}: {len(rows)} tasks ({', '.join(f'{k} {v}' for k, v in routed.items())})"
            )
        demo.start("workers", smartsensor_command("workers", "-n", str(args.workers), "--interval", "1", "--json"))
        demo.start("scheduler", smartsensor_command("scheduler"))
        demo.start(
            "pipeline",
            [
                sys.executable,
                "-m",
                "scripts.demo.pipeline",
                "--table",
                "demo.events,demo.clicks,demo.orders",
                "--ds",
                DS,
                "--hours",
                "0-11",
                "--every",
                str(args.every),
                "--rows",
                "5",
                "--config",
                str(home / "airflow.cfg"),
            ],
        )
        with Live(console=console, refresh_per_second=2) as live:
            while True:
                tasks = demo.tasks()
                partitions, _ = demo.landed()
                live.update(progress_table(tasks, len(partitions), demo.rounds(), time.monotonic() - started))
                pipeline_done = demo.procs["pipeline"].poll() is not None
                if pipeline_done and not any(t["state"] in WAITING for t in tasks):
                    break
                if time.monotonic() - started > args.deadline:
                    cut_short = True
                    break
                for name in ("workers", "scheduler"):
                    if demo.procs[name].poll() is not None:
                        raise SystemExit(f"{name} exited: see {demo.logs / (name + '.log')}")
                time.sleep(1)
        if not console.is_terminal:
            console.line()  # Live leaves its last frame without a line break when output is not a terminal
        if demo.procs["pipeline"].returncode not in (0, None):
            raise SystemExit(f"pipeline failed: see {demo.logs / 'pipeline.log'}")
    finally:
        demo.stop_all()
    tasks = demo.tasks()
    partitions, files = demo.landed()
    rounds = demo.rounds()
    console.print(summary(tasks, rounds, partitions, time.monotonic() - started))
    if cut_short:
        # Tasks still waiting, and partitions the pipeline never got to land, say nothing about correctness:
        # only the tasks that finished are checked against what landed and their timeout rules.
        finished = [t for t in tasks if t["state"] not in WAITING]
        waiting = len(tasks) - len(finished)
        problems = verify(finished, partitions, files)
        console.print(
            f"[yellow]deadline reached ({args.deadline:g} s) before the run finished: the pipeline "
            f"{'finished' if demo.procs['pipeline'].returncode is not None else 'was still landing'} "
            f"({len(partitions)} partition(s) landed), {waiting} task(s) still waiting. The machine is "
            f"probably loaded: run again with a larger --deadline.[/yellow]"
        )
        for p in problems[:20]:
            console.print(f"  [red]{p}[/red]")
        return 2
    problems = verify(tasks, partitions, files)
    if problems:
        console.print(f"[red]{len(problems)} task(s) wrong:[/red]")
        for p in problems[:20]:
            console.print(f"  {p}")
        return 1
    console.print("[green]every task whose partition landed succeeded; every other ended by its timeout rules[/green]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
