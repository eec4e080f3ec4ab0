"""A running Airflow 3 + smartsensor stack in one command (./scripts/airflow_demo.sh runs this with a throwaway
PostgreSQL and the Airflow venv ready).

It starts smartsensor (a Hive metastore service, ``serve`` with a token, leased workers on the thrift backend)
and a real Airflow (api-server, dag-processor, scheduler, triggerer; LocalExecutor on SQLite), with the provider
installed and the DAGs of scripts/airflow/dags: several teams' sensor tasks, written for Airflow's Hive
provider with only their import lines changed, many waiting on the same partitions. It triggers every DAG for
one day; once every sensor has registered and waits, the pipeline (scripts/demo/pipeline.py) lands the day's
partitions. At the end it prints Airflow's task states against the expected ones, the figures, and the URLs.

The sensors' tries park (``[smartsensor] park``): each waits in Airflow's parking pool, with no trigger and no
worker, and the parking attendant (``python -m smartsensor_airflow.attendant``, started beside the scheduler)
registers it and ends it with smartsensor's answer; with --no-park each starts in the triggerer, one trigger each.

Two modes, the same DAGs, states and figures: "import swap" (the default: the DAG files import smartsensor's
drop-ins) and "cluster policy" (--policy: the DAG files get their import lines back, Airflow's own Hive sensors,
and ``$AIRFLOW_HOME/config/airflow_local_settings.py`` re-exports ``smartsensor_airflow.policy.task_policy``,
enabled with ``AIRFLOW__SMARTSENSOR__USE_SMART_SENSOR``; the summary then also checks that every Hive sensor task
instance shows ``… via smartsensor`` as its operator in Airflow's database).

With --assets (combinable with --policy), the landings are also published to Airflow (issue 44, "Schedule on
landings"): the workers run with ``[landings] publish`` on, the DAG files of scripts/airflow/dags/assets are added
(two teams' DAGs rewritten as ``PartitionedAssetTimetable`` consumers of ``hive://127.0.0.1:<metastore port>/demo/…``,
each task reading ``{{ dag_run.partition_key }}``, and an export DAG whose outlet, demo.raw_events, nobody is
scheduled on), and the pipeline also lands each hour in demo.raw_events. The summary then also checks that every
landed partition started exactly one run of each consumer, with its key, and that nothing was published for
demo.raw_events; it prints landed -> run queued and the outbox's state (``smartsensor status --json``).

Exit status: 0 when every task ended as expected (and, with --assets, every landed partition started one run of each
consumer); 1 when some did not (listed); 2 when the deadline passed (the phase it was in is named); 3 when a process
of the stack failed (its log is shown).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import sys
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from scripts.airflow.report import (
    MODEL,
    SENSOR_OPERATORS,
    TERMINAL,
    ConsumerCheck,
    ConsumerRun,
    PolicyCheck,
    assets_json,
    assets_table,
    check_dag,
    dag_table,
    figures,
    figures_table,
    is_sensor,
    policy_check,
    state_counts,
    summary_json,
)
from scripts.airflow.stack import USER, AirflowStack, Processes, StackError, states_requests, version_of
from scripts.demo.demo import worker_rounds
from smartsensor.adapters.metastore_service_process import free_port
from smartsensor.adapters.process import smartsensor_command
from smartsensor.adapters.sql.engine import make_engine
from smartsensor.adapters.sql.tasks import list_tasks
from smartsensor.config_keys import render_config
from smartsensor.domain.clock import iso
from smartsensor.domain.landings import partition_key

ROOT = Path(__file__).resolve().parents[2]
DAGS = ROOT / "scripts" / "airflow" / "dags"
ASSET_DAGS = DAGS / "assets"  # --assets: scheduled on the landings (not read by Airflow without it)
# --assets: each partitioned consumer's table (scripts/airflow/dags/assets), and the table the pipeline also lands in
# that no DAG is scheduled on (raw_events_export names it as an outlet only)
CONSUMERS = {"finance_hourly_on_landing": "demo.clicks", "marketing_reports_on_landing": "demo.events"}
UNCONSUMED = "demo.raw_events"
DS = "2026-11-22"  # the day the teams wait for
YESTERDAY = "2026-11-21"
console = Console(width=None if sys.stdout.isatty() else 110)

# Where Airflow's Hive provider defines the drop-ins' counterparts (smartsensor_airflow._compat has the same map;
# this driver runs outside Airflow's venv). With --policy each DAG file imports these instead of the drop-ins.
AIRFLOW_HIVE_SENSORS = {
    "NamedHivePartitionSensor": "airflow.providers.apache.hive.sensors.named_hive_partition",
    "HivePartitionSensor": "airflow.providers.apache.hive.sensors.hive_partition",
    "MetastorePartitionSensor": "airflow.providers.apache.hive.sensors.metastore_partition",
}
DROP_IN_IMPORT = "from smartsensor_airflow.sensors import "
LOCAL_SETTINGS = (
    '"""Written by scripts/airflow/demo.py --policy: Airflow runs its own Hive sensors through smartsensor."""\n\n'
    "from smartsensor_airflow.policy import task_policy  # noqa: F401 - Airflow's task_policy hook\n"
)


def mode_name(policy: bool) -> str:
    return "cluster policy" if policy else "import swap"


def airflow_own(source: str) -> str:
    """A DAG file of scripts/airflow/dags as its team wrote it for Airflow's Hive provider: each drop-in that has a
    counterpart there imported from there instead (SuccessFileSensor, smartsensor's own, stays the drop-in), the
    commented original above it, if any, giving way to it; nothing else changed. ValueError on a drop-in import
    it cannot swap (one line, plain names only)."""
    out: list[str] = []
    for line in source.splitlines(keepends=True):
        if not line.startswith(DROP_IN_IMPORT):
            out.append(line)
            continue
        names = [n.strip() for n in line[len(DROP_IN_IMPORT) :].split(",")]
        if not all(n.isidentifier() for n in names):
            raise ValueError(f"--policy swaps one-line imports of plain names only, not: {line.strip()}")
        own = [f"from {AIRFLOW_HIVE_SENSORS[n]} import {n}\n" for n in names if n in AIRFLOW_HIVE_SENSORS]
        if out and out[-1].startswith("# ") and out[-1][2:] in own:
            out.pop()
        out += own
        rest = [n for n in names if n not in AIRFLOW_HIVE_SENSORS]
        if rest:
            out.append(DROP_IN_IMPORT + ", ".join(rest) + "\n")
    return "".join(out)


class Deadline(Exception):
    """The run's deadline passed; the message names what it was waiting for."""


class Stop(Exception):
    """SIGTERM or SIGHUP: stop everything, as Ctrl-C does."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sensors", type=int, default=200, help="sensor tasks over all the DAGs (default 200)")
    p.add_argument(
        "--partitions",
        type=int,
        default=20,
        help="hourly partitions the pipeline lands, half in demo.events, half in demo.clicks (even, 2-48; default 20)",
    )
    p.add_argument("--every", type=float, default=3.0, help="seconds between landed hours (default 3)")
    p.add_argument("--workers", type=int, default=2, help="leased smartsensor workers (default 2)")
    p.add_argument("--parallelism", type=int, default=8, help="Airflow's [core] parallelism (default 8)")
    p.add_argument(
        "--home",
        default=str(ROOT / ".airflow-demo"),
        help="the demo's folder, recreated (default .airflow-demo; logs in HOME/logs)",
    )
    p.add_argument(
        "--db-url",
        default=None,
        help="smartsensor's metadata DB (default: SQLite under HOME; airflow_demo.sh passes its throwaway PostgreSQL)",
    )
    p.add_argument(
        "--airflow-venv",
        default=None,
        help="an Airflow 3 venv with the provider installed (default: "
        "the one scripts/airflow_env.sh built, from SMARTSENSOR_AIRFLOW_VENVS)",
    )
    p.add_argument("--airflow-port", type=int, default=0, help="Airflow UI/API port (default: a free one)")
    p.add_argument("--port", type=int, default=0, help="smartsensor serve's port (default: a free one)")
    p.add_argument("--deadline", type=float, default=900, help="seconds before the demo gives up (default 900)")
    p.add_argument("--keep", action="store_true", help="keep the stack running after the summary until Ctrl-C")
    p.add_argument("--summary-json", default=None, help="also write the summary to this file as JSON")
    p.add_argument(
        "--policy",
        action="store_true",
        help="the DAG files keep Airflow's own Hive sensors and the cluster policy (airflow_local_settings.py, "
        "[smartsensor] use_smart_sensor) routes them through smartsensor (default: they import the drop-ins)",
    )
    p.add_argument(
        "--no-park",
        action="store_true",
        help="the sensors' tries start in the triggerer, one trigger each (default: they park in the parking pool, "
        "[smartsensor] park, with no trigger and no worker, and the parking attendant ends them)",
    )
    p.add_argument(
        "--assets",
        action="store_true",
        help="also schedule on the landings: [landings] publish on, and the PartitionedAssetTimetable consumers of "
        "scripts/airflow/dags/assets; checks one run per landed partition of each (Airflow 3.3+)",
    )
    args = p.parse_args(argv)
    if args.sensors < 5 or args.partitions < 2 or args.partitions > 48 or args.partitions % 2:
        p.error("--sensors must be at least 5 and --partitions even, 2-48")
    if args.airflow_venv is None:
        venvs = [v for v in os.environ.get("SMARTSENSOR_AIRFLOW_VENVS", "").split() if Path(v).name >= "airflow-3"]
        if not venvs:
            p.error("no Airflow 3 venv: run ./scripts/airflow_demo.sh, or give --airflow-venv")
        args.airflow_venv = venvs[-1]
    if args.assets and tuple(int(n) for n in version_of(Path(args.airflow_venv)).split(".")[:2]) < (3, 3):
        p.error("--assets needs Airflow 3.3 or later (partition keys on asset events, PartitionedAssetTimetable)")
    return args


def write_config(
    home: Path, db_url: str, metastore_port: int, token: str, landings: dict[str, str] | None = None
) -> Path:
    """The stack's smartsensor config: every key commented, as `smartsensor config init` writes it; ``landings``:
    keys of ``[landings]`` (--assets)."""
    home.mkdir(parents=True, exist_ok=True)
    cfg = home / "airflow.cfg"
    values = {
        ("core", "sql_alchemy_conn"): db_url,
        ("smart_sensor", "shards"): "4",
        ("spark", "warehouse_dir"): f"{home}/warehouse",
        ("spark", "metastore_uris"): f"thrift://127.0.0.1:{metastore_port}",
        ("spark", "conf"): "spark.driver.memory=512m",
        ("metastore", "port"): str(metastore_port),
        ("api", "token"): token,
        ("api", "history_interval"): "5",
    }
    values.update({("landings", k): v for k, v in (landings or {}).items()})
    cfg.write_text(render_config(values))
    return cfg


def landings_settings(stack: AirflowStack, password_file: Path, uri_prefix: str) -> dict[str, str]:
    """``[landings]`` for --assets: publish to the stack's api-server as its admin, the metastore's hive:// assets;
    Airflow's assets read every 2 s (not 60: the demo's consumers are new), posts retried soon."""
    return {
        **stack.publisher_settings(password_file, uri_prefix),
        "assets_refresh_interval": "2",
        "retry_base": "0.5",
        "retry_max": "5",
    }


class Demo:
    """The processes of one run and what they recorded."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.home = Path(args.home).resolve()
        shutil.rmtree(self.home, ignore_errors=True)
        self.logs = self.home / "logs"
        self.processes = Processes(self.logs)
        self.ss_home = self.home / "smartsensor"
        self.token = secrets.token_urlsafe(16)
        self.db_url = args.db_url or f"sqlite:///{self.ss_home / 'smartsensor.db'}"
        self.metastore_port = free_port()
        self.hive_assets = f"hive://127.0.0.1:{self.metastore_port}/"  # how Airflow's assets name its tables
        self.port = args.port or free_port()
        self.ss_url = f"http://127.0.0.1:{self.port}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SMARTSENSOR")}
        self.env.update(SMARTSENSOR_HOME=str(self.ss_home), SPARK_LOCAL_IP="127.0.0.1")
        self.mode = mode_name(args.policy)
        airflow_env = {
            "AIRFLOW_CONN_SMARTSENSOR_DEFAULT": f"http://:{self.token}@127.0.0.1:{self.port}",
            "DEMO_SENSORS": str(args.sensors),
            "DEMO_PARTITIONS": str(args.partitions),
            "DEMO_HIVE_ASSETS": self.hive_assets,
        }
        if args.policy:
            airflow_env["AIRFLOW__SMARTSENSOR__USE_SMART_SENSOR"] = "True"
        self.parks = not args.no_park
        airflow_env["AIRFLOW__SMARTSENSOR__PARK"] = "True" if self.parks else "False"
        self.stack = AirflowStack(
            Path(args.airflow_venv), self.home / "airflow", self.processes, args.parallelism, args.airflow_port
        )
        self.stack.env.update(airflow_env)
        landings = None
        if args.assets:
            landings = landings_settings(self.stack, self.ss_home / "airflow-password", self.hive_assets)
            for dag in sorted(ASSET_DAGS.glob("*.py")):
                (self.stack.dags / dag.name).write_text(dag.read_text())
        write_config(self.ss_home, self.db_url, self.metastore_port, self.token, landings)
        for dag in sorted(DAGS.glob("*.py")):
            source = dag.read_text()
            (self.stack.dags / dag.name).write_text(airflow_own(source) if args.policy else source)
        if args.policy:
            (self.stack.home / "config").mkdir(parents=True, exist_ok=True)
            (self.stack.home / "config" / "airflow_local_settings.py").write_text(LOCAL_SETTINGS)
        self.dag_ids = sorted(p.stem for p in DAGS.glob("*.py") if p.stem != "demo_scale")
        self.asset_dag_ids = sorted(p.stem for p in ASSET_DAGS.glob("*.py")) if args.assets else []
        self.engine: Any = None
        self.started = time.monotonic()
        self.phase = "starting"
        self.triggered = False
        self.marks: dict[str, float] = {}  # seconds since the start when each phase was reached

    # -- smartsensor ------------------------------------------------------------------------------
    def cli(self, *args: str) -> str:
        import subprocess

        proc = subprocess.run(smartsensor_command(*args), env=self.env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise StackError(f"smartsensor {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
        return proc.stdout.strip()

    def smartsensor(self, name: str, *args: str, service: bool = True) -> None:
        self.processes.start(name, smartsensor_command(*args), self.env, service=service)

    def pipeline(self, name: str, tables: str, ds: str, hours: str, every: float) -> Any:
        """scripts/demo/pipeline.py landing ``hours`` of ``ds`` in ``tables`` (a landing signal after each)."""
        return self.processes.start(
            name,
            [
                sys.executable,
                "-m",
                "scripts.demo.pipeline",
                "--table",
                tables,
                "--ds",
                ds,
                "--hours",
                hours,
                "--every",
                str(every),
                "--rows",
                "5",
                "--no-success-file",
            ],
            self.env,
            service=False,
        )

    def query(self, sql: str, **params: Any) -> list[Any]:
        if self.engine is None:
            self.engine = make_engine(self.db_url)
        with self.engine.connect() as conn:
            return list(conn.execute(text(sql), params).fetchall())

    def rows(self) -> list[dict[str, Any]]:
        """smartsensor's task instances (one per registered sensor try), dates as ISO text."""
        with self.engine.connect() as conn:
            return [
                {k: iso(v) if isinstance(v, datetime) else v for k, v in r.columns().items()} for r in list_tasks(conn)
            ]

    def states_requests(self) -> int:
        """``POST /api/v1/tasks/states`` requests serve answered (its /metrics)."""
        return states_requests(self.ss_url, self.token)

    def sensor_worker_tries(self) -> int:
        """Tries of the demo's sensor tasks that ran a task process on a worker (0 when each started and ended in
        the triggerer)."""
        rows = self.stack.rows("SELECT dag_id, run_id, task_id, operator, custom_operator_name FROM task_instance")
        return sum(
            self.stack.worker_tries(d, r, t)
            for d, r, t, op, name in rows
            if d in self.dag_ids and (is_sensor(name) or is_sensor(op))
        )

    def policy_check(self) -> PolicyCheck:
        """Airflow's Hive sensor task instances of the demo's DAGs, by their operator name (``… via smartsensor``
        when the cluster policy routed them)."""
        rows = self.stack.rows("SELECT dag_id, task_id, operator, custom_operator_name FROM task_instance")
        return policy_check((d, t, op, name) for d, t, op, name in rows if d in self.dag_ids)

    def serve_healthy(self) -> bool:
        with urllib.request.urlopen(f"{self.ss_url}/api/v1/health", timeout=5) as r:
            return r.status == 200

    def pipeline_lines(self) -> list[str]:
        log = self.logs / "pipeline.log"
        return log.read_text(errors="replace").splitlines() if log.exists() else []

    def landed(self) -> set[str]:
        """The partitions the pipeline landed for the sensors (``db.table/ds=…/hr=…``; not --assets' extra table)."""
        names = {line.split(" ", 1)[1].strip() for line in self.pipeline_lines() if line.startswith("landed ")}
        return {n for n in names if not n.startswith(UNCONSUMED + "/")}

    def landed_at(self) -> dict[str, datetime]:
        """Every partition the pipeline landed (``db.table/ds=…/hr=…``) → when its insert returned (aware UTC)."""
        out: dict[str, datetime] = {}
        for line in self.pipeline_lines():
            if line.startswith("landed-at "):
                _, at, name = line.split(" ", 2)
                out[name.strip()] = datetime.fromisoformat(at)
        return out

    # -- --assets: the landings published, the consumers' runs -----------------------------------------------------
    def tables_watched(self) -> bool:
        """smartsensor watches each consumer's table, and has taken its baseline (what was there before)."""
        rows = self.query("SELECT db_name, table_name FROM asset_watch WHERE baselined_at IS NOT NULL")
        return {f"{d}.{t}" for d, t in rows} >= set(CONSUMERS.values())

    def consumer_runs(self) -> dict[str, list[ConsumerRun]]:
        """Airflow's runs of each consumer, with what its task returned (XCom)."""
        dags = list(CONSUMERS)
        returned = {
            (d, k): v if isinstance(v, str) else json.dumps(v)
            for d, k, v in self.stack.rows(
                "SELECT r.dag_id, r.partition_key, x.value FROM xcom x JOIN dag_run r ON r.id = x.dag_run_id "
                "WHERE x.key = 'return_value' AND r.dag_id IN :dags",
                expanding=["dags"],
                dags=dags,
            )
        }
        runs: dict[str, list[ConsumerRun]] = {d: [] for d in dags}
        for dag_id, key, state, queued in self.stack.rows(
            "SELECT dag_id, partition_key, state, queued_at FROM dag_run WHERE dag_id IN :dags ORDER BY id",
            expanding=["dags"],
            dags=dags,
        ):
            runs[dag_id].append(ConsumerRun(key, state, _utc(queued), returned.get((dag_id, key))))
        return runs

    def consumer_checks(self) -> list[ConsumerCheck]:
        """Each consumer's landed partitions (by key), its runs, and when each landing's event was delivered."""
        landed = self.landed_at()
        runs = self.consumer_runs()
        delivered = self.query("SELECT uri, partition_key, delivered_at FROM landing_outbox WHERE state = 'delivered'")
        checks = []
        for dag_id, table in sorted(CONSUMERS.items()):
            mine = {
                partition_key(name.split("/", 1)[1]): at for name, at in landed.items() if name.startswith(table + "/")
            }
            uri = self.hive_assets + table.replace(".", "/")
            posted = {k: when for u, k, at in delivered if u == uri and (when := _utc(at)) is not None}
            checks.append(ConsumerCheck(dag_id, table, mine, runs[dag_id], posted))
        return checks

    def backlog(self) -> int:
        """Landings in the outbox not yet delivered (pending, or being sent)."""
        return int(self.query("SELECT count(*) FROM landing_outbox WHERE state IN ('pending', 'sending')")[0][0])

    def consumers_ran(self) -> bool:
        """Nothing left to publish, every partition landed on a consumer's table has a run of it, and every run of
        the consumers ended."""
        if self.backlog():
            return False
        checks = self.consumer_checks()
        return all(
            set(c.landed) <= set(c.runs_per_key()) and all(r.state in ("success", "failed") for r in c.runs)
            for c in checks
        )

    def unconsumed(self) -> dict[str, Any]:
        """What reached the outbox and Airflow for UNCONSUMED, the table nobody is scheduled on (both should be 0)."""
        db, table = UNCONSUMED.split(".")
        uri = f"{self.hive_assets}{db}/{table}"
        landed = sum(1 for name in self.landed_at() if name.startswith(UNCONSUMED + "/"))
        outbox = self.query("SELECT count(*) FROM landing_outbox WHERE uri = :uri", uri=uri)[0][0]
        events = self.stack.rows(
            "SELECT count(*) FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.uri = :uri", uri=uri
        )[0][0]
        known = self.stack.rows("SELECT count(*) FROM asset WHERE uri = :uri", uri=uri)[0][0]
        return {
            "table": UNCONSUMED,
            "landed": landed,
            "asset_in_airflow": bool(known),
            "outbox_rows": int(outbox),
            "events": int(events),
        }

    def import_errors(self) -> bool:
        """StackError when Airflow could not import a DAG file of the demo (instead of waiting for the deadline)."""
        errors = self.stack.rows("SELECT filename, stacktrace FROM import_error")
        if errors:
            raise StackError("Airflow could not import: " + "\n".join(f"{f}:\n{t}" for f, t in errors)[-3000:])
        return False

    def rounds(self) -> list[dict[str, Any]]:
        return worker_rounds(self.logs / "workers.log")

    # -- the run ------------------------------------------------------------------------------------
    def wait(self, phase: str, predicate: Any, step: float = 2.0, show: bool = True) -> None:
        """Poll ``predicate`` (showing progress) until true; Deadline past the run's deadline."""
        self.phase = phase
        live = Live(console=console, refresh_per_second=1) if show and console.is_terminal else None
        last_line = 0.0
        try:
            if live:
                live.start()
            while True:
                self.processes.check_alive()
                try:
                    done = predicate()
                except (OSError, OperationalError):  # not listening yet, or Airflow's tables not created yet
                    done = False
                if show and (live or time.monotonic() - last_line > 15 or done):
                    table = self.progress()
                    if live:
                        live.update(table)
                    else:
                        console.print(table)
                        last_line = time.monotonic()
                if done:
                    return
                if time.monotonic() - self.started > self.args.deadline:
                    raise Deadline(f"the deadline ({self.args.deadline:g} s) passed while waiting for: {phase}")
                time.sleep(step)
        finally:
            if live:
                live.stop()

    def progress(self) -> Table:
        states = self.stack.task_states(self.dag_ids)
        table = Table(title=f"{self.phase} — {time.monotonic() - self.started:.0f} s", title_justify="left")
        table.add_column("DAG")
        table.add_column("Airflow task states")
        for dag_id in self.dag_ids:
            table.add_row(dag_id, state_counts(s for (d, _), s in states.items() if d == dag_id) or "-")
        registered, distinct = self.query("SELECT count(*), count(DISTINCT hashcode) FROM task_instance")[0]
        table.add_row(
            "[dim]smartsensor[/dim]",
            f"{registered} registered, {distinct} distinct checks, "
            f"{len(self.landed())} partitions landed, {self.states_requests()} states requests",
        )
        if self.args.assets:
            runs = self.consumer_runs()
            table.add_row(
                "[dim]scheduled on landings[/dim]",
                ", ".join(f"{d}: {state_counts(r.state for r in runs[d]) or 'no run'}" for d in sorted(runs))
                + f"; outbox backlog {self.backlog()}",
            )
        return table

    def sensors_settled(self) -> bool:
        """Every sensor task of every run waits (parked and registered with smartsensor; with --no-park deferred, in
        the triggerer) or already ended."""
        rows = self.stack.rows("SELECT state, operator FROM task_instance")
        sensors = [s for s, op in rows if op in SENSOR_OPERATORS]
        waits = "scheduled" if self.parks else "deferred"
        if len(sensors) < self.args.sensors * 0.9 or not all(s == waits or s in TERMINAL for s in sensors):
            return False
        return not self.parks or self.query("SELECT count(*) FROM task_instance")[0][0] >= sensors.count(waits)

    def landed_and_finished(self) -> bool:
        pipeline = self.processes.procs["pipeline"]
        if pipeline.poll() is None:
            return False
        if pipeline.returncode != 0:  # nothing more will land: no use waiting for the deadline
            raise StackError(f"the pipeline failed:\n{self.processes.log_tail('pipeline')}")
        if "pipeline done" not in self.marks:
            self.mark("pipeline done")
        return self.runs_finished()

    def runs_finished(self) -> bool:
        runs = {d: s for d, s in self.stack.run_states().items() if d in self.dag_ids}
        return len(runs) == len(self.dag_ids) and all(s in ("success", "failed") for s in runs.values())

    def run(self) -> None:
        console.print(
            f"[bold]home[/bold] {self.home}   Airflow {self.stack.version}   mode {self.mode}   logs {self.logs}"
        )
        migrate = self.processes.start(
            "airflow-db-migrate",
            [str(self.stack.venv / "bin" / "airflow"), "db", "migrate"],
            self.stack.env,
            service=False,
        )
        console.print(self.cli("metastore", "start"))
        console.print(self.cli("db", "init"))
        # The tables exist with yesterday's data before the teams start waiting on today's, as in production.
        history = self.pipeline("pipeline-history", "demo.events,demo.clicks,demo.partner_feed", YESTERDAY, "0-0", 0)
        self.smartsensor("serve", "serve", "--port", str(self.port))
        self.smartsensor("workers", "workers", "-n", str(self.args.workers), "--json")
        self.wait("Airflow's database migrated", lambda: migrate.poll() is not None, 1, show=False)
        if migrate.returncode != 0:
            raise StackError(f"airflow db migrate failed:\n{self.processes.log_tail('airflow-db-migrate')}")
        # Before Airflow parses any DAG: with --assets, what is there when a table is first watched is its baseline
        # (never published), and yesterday's partitions must be in it.
        self.wait("yesterday's partitions landed", lambda: history.poll() is not None, 1, show=False)
        if history.returncode != 0:
            raise StackError(f"the pipeline failed:\n{self.processes.log_tail('pipeline-history')}")
        self.stack.start()
        self.wait("smartsensor serve answering", self.serve_healthy, 1, show=False)
        self.wait(
            "Airflow healthy (api-server, dag-processor, scheduler, triggerer)", self.stack.healthy, 1, show=False
        )
        if self.parks:  # beside the scheduler: it creates the parking pool, registers and ends the parked tries
            self.stack.start_attendant()
        self.wait(
            "the DAG files parsed",
            lambda: self.import_errors() or self.stack.parsed(self.dag_ids + self.asset_dag_ids),
            1,
            show=False,
        )
        if self.args.assets:
            self.wait("smartsensor watching the consumers' tables", self.tables_watched, 1, show=False)
        self.mark("stack up")
        console.print(
            f"stack up in {self.marks['stack up']:.0f} s: Airflow UI {self.stack.url}, smartsensor {self.ss_url}"
        )
        for dag_id in self.dag_ids:
            self.stack.trigger(dag_id, DS)
        self.triggered = True
        console.print(f"triggered {', '.join(self.dag_ids)} for {DS}")
        self.wait("every sensor task registered and waiting", self.sensors_settled)
        self.mark("sensors deferred")
        tables = "demo.events,demo.clicks" + (f",{UNCONSUMED}" if self.args.assets else "")
        self.pipeline("pipeline", tables, DS, f"0-{self.args.partitions // 2 - 1}", self.args.every)
        self.wait("the pipeline landing and every DAG run finishing", self.landed_and_finished)
        self.mark("runs finished")
        if self.args.assets:
            self.wait("one run of each consumer per landed partition", self.consumers_ran)
            self.mark("consumers ran")

    def mark(self, name: str) -> None:
        self.marks[name] = round(time.monotonic() - self.started, 1)

    def stop(self) -> None:
        # A throwaway stack: 10 s to stop cleanly (Airflow's scheduler waits for the task runs under way, its
        # triggerer for its triggers), then each process group is killed.
        self.processes.stop(grace=10)
        try:
            self.cli("metastore", "stop")
        except StackError as exc:
            console.print(f"[yellow]{exc}[/yellow]")
        if self.engine is not None:
            self.engine.dispose()
        self.stack.stop()  # disposes its engine (its processes are already stopped)


def summary(demo: Demo, finished: bool) -> list[str]:
    """Print the summary (and write it as JSON with --summary-json); returns the mismatches (only among the
    tasks that ended, when the run was cut short)."""
    rows = demo.rows()
    by_key = {(r["dag_id"], r["task_id"]): r for r in rows}
    landed = demo.landed()
    states = demo.stack.task_states(demo.dag_ids)
    checks = [
        check_dag(
            dag_id,
            demo.stack.api("GET", f"/api/v2/dags/{dag_id}/tasks")["tasks"],
            {t: s for (d, t), s in states.items() if d == dag_id},
            by_key,
            landed,
            set(),
        )
        for dag_id in demo.dag_ids
    ]
    table, problems = dag_table(checks, finished)
    console.print(table)
    f = figures(rows, demo.rounds(), demo.states_requests(), demo.sensor_worker_tries())
    console.print(figures_table(f, len(landed), demo.args.partitions, parked=demo.parks))
    console.print(f"[dim]{MODEL}[/dim]")
    console.print("timeline: " + ", ".join(f"{name} at {at:.0f} s" for name, at in demo.marks.items()))
    extra: dict[str, Any] = {"mode": demo.mode, "parked": demo.parks}
    if demo.args.policy:
        routing = demo.policy_check()
        problems += routing.not_routed
        colour = "green" if routing.hive_sensors and not routing.not_routed else "red"
        console.print(
            f"mode: cluster policy (the DAG files import Airflow's own Hive sensors) — [{colour}]{routing.routed} of "
            f"{routing.hive_sensors} Hive sensor task instances ran through smartsensor[/{colour}] (operator "
            f"'… via smartsensor' in Airflow's task_instance.custom_operator_name)"
        )
        if not routing.hive_sensors:
            problems.append("no Hive sensor task instance in Airflow's database: nothing for the policy to route")
        extra["policy"] = {
            "hive_sensors": routing.hive_sensors,
            "routed": routing.routed,
            "not_routed": routing.not_routed,
        }
    else:
        console.print("mode: import swap (the DAG files import smartsensor's drop-ins)")
    if demo.args.assets:
        assets, wrong = assets_summary(demo, finished)
        problems += wrong
        extra["assets"] = assets
    if demo.args.summary_json:
        data = summary_json(
            checks,
            f,
            finished,
            landed=len(landed),
            timeline=demo.marks,
            airflow_ui=demo.stack.url,
            status_page=f"{demo.ss_url}/",
            logs=str(demo.logs),
            **extra,
        )
        Path(demo.args.summary_json).write_text(json.dumps(data, indent=2) + "\n")
    return problems


def assets_summary(demo: Demo, finished: bool) -> tuple[dict[str, Any], list[str]]:
    """--assets: per consumer, the partitions landed on its table, the runs they started, their keys and landed ->
    run queued; the table nobody is scheduled on; the outbox as `smartsensor status --json` shows it. Printed, and
    returned as data with the problems (a partition with no run or several, …)."""
    checks = demo.consumer_checks()
    table, problems = assets_table(checks, finished)
    console.print(table)
    unconsumed = demo.unconsumed()
    if unconsumed["outbox_rows"] or unconsumed["events"]:
        problems.append(
            f"{UNCONSUMED}: nobody is scheduled on it, yet {unconsumed['outbox_rows']} landing(s) in the outbox and "
            f"{unconsumed['events']} event(s) in Airflow"
        )
    console.print(
        f"{UNCONSUMED} (an asset in Airflow: {'yes' if unconsumed['asset_in_airflow'] else 'no'}, no DAG scheduled "
        f"on it): {unconsumed['landed']} partitions landed, {unconsumed['outbox_rows']} in the outbox, "
        f"{unconsumed['events']} events published"
    )
    outbox = json.loads(demo.cli("status", "--json"))["landings"]
    states = ", ".join(f"{n} {state}" for state, n in outbox["by_state"].items())
    console.print(
        f"outbox (smartsensor status --json, landings): {outbox['watched_tables']} tables watched; {states}; "
        f"backlog {outbox['backlog']}, duplicates {outbox['duplicates']}, unknown outcomes "
        f"{outbox['unknown_outcomes']}"
    )
    if outbox["duplicates"]:
        problems.append(f"the outbox counts {outbox['duplicates']} duplicate post(s)")
    if not problems and finished:
        runs = sum(len(c.runs) for c in checks)
        console.print(f"[green]every landed partition started one run of each consumer ({runs} runs)[/green]")
    return {"consumers": assets_json(checks, finished), "unconsumed": unconsumed, "outbox": outbox}, problems


def _utc(value: Any) -> datetime | None:
    """A time read from Airflow's database (text on SQLite) as aware UTC."""
    if value is None:
        return None
    when = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    demo = Demo(args)

    def stop_signal(signum: int, frame: Any) -> None:
        raise Stop(signal.Signals(signum).name)

    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started in the background (SIG_IGN)
    signal.signal(signal.SIGTERM, stop_signal)
    signal.signal(signal.SIGHUP, stop_signal)
    status, finished, summarized = 0, False, False
    try:
        try:
            demo.run()
            finished = True
        except Deadline as exc:
            console.print(
                f"[red]{exc}[/red]; below, only the tasks that ended are checked (the machine is "
                f"probably loaded: run again with a larger --deadline)"
            )
            status = 2
        if not demo.triggered:  # the deadline passed while starting: nothing ran, nothing to compare
            urls(demo)
            return status
        problems = summary(demo, finished)
        elapsed = time.monotonic() - demo.started
        if problems:
            console.print(f"[red]{len(problems)} task(s) not as expected:[/red]")
            for p in problems[:30]:
                console.print(f"  {p}")
            status = status or 1
        elif finished:
            console.print(f"[green]every Airflow task ended as expected[/green] ({elapsed:.0f} s)")
        urls(demo)
        summarized = True
        if args.keep:
            console.print("[bold]the stack keeps running: Ctrl-C stops it[/bold]")
            while True:
                demo.processes.check_alive()
                time.sleep(2)
    except StackError as exc:
        console.print(f"[red]{exc}[/red]")
        status = 3
    except (KeyboardInterrupt, Stop):
        console.print("stopping" if summarized else "stopping (interrupted)")
        status = status if summarized else 130  # with --keep, Ctrl-C is how the run ends
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        demo.stop()
        console.print(f"stopped everything; logs in {demo.logs}")
    return status


def urls(demo: Demo) -> None:
    console.print(f"Airflow UI         {demo.stack.url}   (user {USER}, password {demo.stack.password})")
    console.print(f"smartsensor status {demo.ss_url}/   (token {demo.token}, at /login)")
    console.print(f"logs               {demo.logs}")


if __name__ == "__main__":
    sys.exit(main())
