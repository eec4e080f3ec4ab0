"""Airflow and smartsensor deployed as a platform team runs them, for the production-like tests in tests/airflow:
Airflow's components (LocalExecutor, its database on the suite's PostgreSQL), and smartsensor's ``serve`` (with a
token) and ``workers -n 2`` on PostgreSQL with the thrift backend on the module's metastore service. Every process
is stopped and both databases dropped at the end, whatever happened."""

from __future__ import annotations

import contextlib
import sys
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

from sqlalchemy.engine import Engine

from scripts.airflow.stack import AirflowStack, Processes, version_of
from scripts.harness.hive_tables import Metastore
from smartsensor.adapters.metastore_service_process import free_port
from smartsensor.adapters.sql import leases as lease_sql
from smartsensor.config import Config
from tests.support.airflow_databases import AirflowDatabases
from tests.support.airflow_race import Landing
from tests.support.common import ROOT, new_db, override_env, wait_until
from tests.support.pg import drop_pg_database, new_pg_database
from tests.support.proc_helpers import cli_env

TOKEN = "race-token"
SMARTSENSOR = [sys.executable, "-m", "smartsensor.cli"]
WORKERS = 2  # `smartsensor workers -n WORKERS` beside each Airflow


@dataclass
class Deployment:
    """One Airflow version and smartsensor, running, with the DAGs of the module parsed."""

    stack: AirflowStack
    landing: Landing
    engine: Any  # smartsensor's database
    logs: Path
    port: int  # serve's
    env: dict[str, str] = field(default_factory=dict)  # smartsensor's processes'
    airflow_db: str = ""  # the name of Airflow's database on the test server

    def start_serve(self) -> None:
        """Start ``serve`` (again) and wait until it answers its health check."""
        self.stack.processes.start("serve", [*SMARTSENSOR, "serve", "--port", str(self.port)], self.env)
        wait_until(lambda: serving(self.port), timeout=120, step=0.5)

    def stop_serve(self) -> None:
        """Stop every ``serve`` process: the service is out of reach, its workers and database go on."""
        self.stack.processes.stop(names=["serve"])

    def start_workers(self) -> None:
        """Start ``workers -n 2`` (again)."""
        self.stack.processes.start("workers", [*SMARTSENSOR, "workers", "-n", str(WORKERS)], self.env)

    def start_attendant(self) -> None:
        """Start the parking attendant beside the scheduler (``AirflowStack.start_attendant``)."""
        self.stack.start_attendant()

    def restart_airflow(self, *names: str, **env: str) -> None:
        """Stop Airflow's components ``names`` (all of them when none is named), then start them again with ``env``
        added to theirs (the others keep the environment they started with)."""
        chosen = names or tuple(self.stack.components())
        self.stack.processes.stop(names=[f"airflow-{name}" for name in chosen])
        self.stack.env.update(env)
        self.stack.start(*chosen)
        self.stack.wait_healthy(timeout=300)

    def restart_exited(self) -> list[str]:
        """As a supervisor (systemd, Kubernetes) does: start again the Airflow components that exited, with the
        stack's environment. The ones it started, by name."""
        procs = self.stack.processes.procs
        exited = [
            name
            for name in self.stack.components()
            if (proc := procs.get(f"airflow-{name}")) is not None and proc.poll() is not None
        ]
        if exited:
            self.stack.processes.stop(names=[f"airflow-{name}" for name in exited])
            self.stack.start(*exited)
        return exited


@contextlib.contextmanager
def deployed(
    venv: Path,
    databases: AirflowDatabases,
    tmp: Path,
    service: Config,
    db: str,
    tables: tuple[str, ...],
    dags: dict[str, str],
    dag_ids: list[str],
    local_settings: str | None = None,
    smartsensor_settings: dict[str, str] | None = None,
    landings_prefix: str | None = None,
    airflow_env: dict[str, str] | None = None,
    landings_via: Callable[[str], str] | None = None,
    rest: bool = False,
    parse_timeout: float = 300,
    home_files: dict[str, str] | None = None,
) -> Iterator[Deployment]:
    """smartsensor and Airflow (``venv``; its database a copy of one migrated by ``databases``) with the DAG files
    ``dags`` (file name → source), ``local_settings`` as ``$AIRFLOW_HOME/config/airflow_local_settings.py`` and
    ``airflow_env`` added to Airflow's environment; the Hive tables ``db``.``tables`` created on the metastore
    service. ``smartsensor_settings`` (``section__option``) go to smartsensor's processes; ``landings_prefix``
    switches the landing publisher on (``[landings]``, Airflow 3: this stack's api-server, its admin user, the
    ``hive://`` assets under that prefix; ``landings_via`` maps the api-server's URL to the one the workers are given,
    e.g. a proxy's); ``rest``: 2.x runs its webserver too, and runs are triggered through its REST API as on 3.x;
    ``home_files``: more files under $AIRFLOW_HOME before Airflow starts (path → source: plugins, templates).
    Waits until ``dag_ids`` are parsed (``parse_timeout`` seconds at most)."""
    (smartsensor_db, smartsensor_url), (airflow_db, airflow_url) = new_pg_database(), databases.new_pg(venv)
    processes = Processes(tmp / "logs")
    port = free_port()
    extra: dict[str, Any] = {
        "AIRFLOW_CONN_SMARTSENSOR_DEFAULT": f"http://:{TOKEN}@127.0.0.1:{port}",
        **(airflow_env or {}),
    }
    stack = AirflowStack(venv, tmp / "airflow", processes, parallelism=8, db_url=airflow_url, rest=rest, **extra)
    settings = {
        "smart_sensor__catalog_backend": "thrift",
        "spark__metastore_uris": service.get("spark", "metastore_uris"),
        "api__token": TOKEN,
        **(smartsensor_settings or {}),
    }
    if landings_prefix is not None:
        url = landings_via(stack.url) if landings_via is not None else None
        publishing = stack.publisher_settings(tmp / "airflow-password", landings_prefix, url)
        settings.update({f"landings__{key}": value for key, value in publishing.items()})
    home = tmp / "smartsensor"
    _, engine = new_db(home, smartsensor_url, **settings)
    env = cli_env(home, smartsensor_url, PYTHONPATH=str(ROOT), **override_env(settings))
    metastore = Metastore(service, db)
    for name, source in dags.items():
        (stack.dags / name).write_text(source)
    files = dict(home_files or {})
    if local_settings is not None:
        files["config/airflow_local_settings.py"] = local_settings
    for relative, source in files.items():
        (stack.home / relative).parent.mkdir(parents=True, exist_ok=True)
        (stack.home / relative).write_text(source)
    deployment = Deployment(stack, Landing(metastore, engine), engine, tmp / "logs", port, env, airflow_db)
    try:
        metastore.create_tables(tables)
        deployment.start_serve()
        deployment.start_workers()
        stack.start()
        stack.wait_healthy(timeout=300)
        stack.wait_parsed(dag_ids, timeout=parse_timeout)
        stack.wait("the workers' leases settled", lambda: leases_settled(engine, WORKERS), timeout=120)
        yield deployment
    finally:
        stack.stop()
        metastore.close()
        engine.dispose()
        drop_pg_database(airflow_db)
        drop_pg_database(smartsensor_db)


def leases_settled(engine: Engine, workers: int) -> bool:
    """Whether ``workers`` workers share every shard range, none holding more than its share: a worker that starts
    takes every free range at once and gives the extras back as the others come, so a try registered before this
    may wait for its range's handover (a lease's claim), which a measurement must not count."""
    now = datetime.now(timezone.utc)
    with engine.connect() as conn:
        rows = lease_sql.load_leases(conn)
    held = Counter(lease.owner for row in rows if (lease := row.held_lease(now)) is not None)
    share = -(-len(rows) // workers)
    return bool(rows) and sum(held.values()) == len(rows) and len(held) == workers and max(held.values()) <= share


def metastore_connection(service: Config) -> dict[str, str]:
    """Airflow's ``metastore_default`` connection to the module's metastore service (thrift): what Airflow's own Hive
    sensors, the safety valve and the classic runs check through."""
    port = service.get("spark", "metastore_uris").rsplit(":", 1)[1]
    return {"AIRFLOW_CONN_METASTORE_DEFAULT": f"hive-metastore://127.0.0.1:{port}"}


def serving(port: int) -> bool:
    """Whether ``serve`` answers its health check."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/health", timeout=5) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def tmp_for(tmp_path_factory: Any, venv: Path) -> Path:
    """A fresh directory for one version's deployment."""
    return Path(tmp_path_factory.mktemp(f"airflow-{version_of(venv)}"))
