"""A real Airflow running in the background, for tests/airflow and scripts/airflow/demo.py: its components as
processes, started in their own sessions and stopped with their children whatever happens.

- 3.x: api-server, dag-processor, scheduler and triggerer (LocalExecutor). The UI and the REST API are on the
  api-server (``url``); the simple auth manager's user ``admin`` gets a password written before the api-server
  starts (``password``), the REST calls log in with it.
- 2.x: scheduler (which also parses the DAG files) and triggerer; DAG runs are triggered with the CLI.
- Airflow's database: SQLite under AIRFLOW_HOME by default (2.x then runs the SequentialExecutor: SQLite allows
  no other), or PostgreSQL (``db_url``), as production runs it: LocalExecutor on every version.

Each component runs in its own session through ``Processes`` (a log ``logs/airflow-<component>.log`` each, stopped
as a process group whatever happens). Reads of task and run states go straight to
Airflow's database (``rows``), the same way on both versions.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import signal
import sqlite3
import subprocess
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

from sqlalchemy import bindparam, create_engine, text
from sqlalchemy.exc import OperationalError

from smartsensor.adapters.metastore_service_process import free_port
from smartsensor.adapters.process import pdeathsig_preexec

ROOT = Path(__file__).resolve().parents[2]


def provider_overlay(venv: Path) -> Path:
    """Where scripts/airflow_env.sh installed this checkout's providers/airflow for ``venv``'s Airflow: a folder
    of the checkout's own, as the venvs are shared by every checkout."""
    return ROOT / ".airflow-provider" / version_of(venv)


def airflow_env(venv: Path, home: Path, **extra: str) -> dict[str, str]:
    """An environment for Airflow commands: its venv first on PATH, this checkout's provider on PYTHONPATH and
    nothing else of smartsensor's (no SMARTSENSOR_*), examples off, DAGs from ``home/dags``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SMARTSENSOR", "AIRFLOW", "PYTHON", "VIRTUAL_ENV", "PYSPARK"))
    }
    (home / "dags").mkdir(parents=True, exist_ok=True)
    env.update(
        PATH=f"{venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}",
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(home / "dags"),
        PYTHONWARNINGS="ignore",
    )
    overlay = provider_overlay(venv)
    if overlay.is_dir():
        env["PYTHONPATH"] = str(overlay)
    env.update(extra)
    return env


def version_of(venv: Path) -> str:
    """``airflow-3.1.8`` → ``3.1.8`` (how scripts/airflow_env.sh names the venvs)."""
    return venv.name.split("-", 1)[1]


def run_airflow(
    venv: Path, args: list[str], env: dict[str, str], timeout: float = 300, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """``airflow *args`` in ``venv``; with ``check``, fail with its output unless it exits 0."""
    proc = subprocess.run(
        [str(venv / "bin" / "airflow"), *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"airflow {args} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


def task_states(home: Path, dag_id: str) -> dict[str, str | None]:
    """Airflow's task_instance states of ``dag_id`` (one run), read from its SQLite database."""
    with sqlite3.connect(home / "airflow.db") as conn:
        return dict(conn.execute("SELECT task_id, state FROM task_instance WHERE dag_id = ?", (dag_id,)).fetchall())


def task_end_times(home: Path, dag_id: str) -> dict[str, datetime | None]:
    """When each task instance of ``dag_id`` (one run) ended, aware UTC, from Airflow's SQLite database."""
    with sqlite3.connect(home / "airflow.db") as conn:
        rows = conn.execute("SELECT task_id, end_date FROM task_instance WHERE dag_id = ?", (dag_id,)).fetchall()
    out: dict[str, datetime | None] = {}
    for task_id, end in rows:
        when = datetime.fromisoformat(end) if end else None
        out[task_id] = when.replace(tzinfo=timezone.utc) if when is not None and when.tzinfo is None else when
    return out


def states_requests(base_url: str, token: str) -> int:
    """``POST /api/v1/tasks/states`` requests a smartsensor `serve` answered so far, whatever the code (its
    /metrics counts them per process since it started)."""
    request = urllib.request.Request(f"{base_url}/metrics", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as r:
        return int(
            sum(
                float(line.rsplit(" ", 1)[1])
                for line in r.read().decode().splitlines()
                if line.startswith("smartsensor_api_requests{") and '"/api/v1/tasks/states"' in line
            )
        )


USER = "admin"
ATTENDANT_READY = "smartsensor attendant: watching pool"  # its line once it cycles (attendant.serve)
STOP_GRACE = 30.0  # seconds a component gets to stop on SIGTERM before its process group is killed


class StackError(RuntimeError):
    """A component died, or the stack did not get healthy in time; the message names it and its log."""


class Processes:
    """Named background processes, each in its own session (a process group stopped as a whole, children
    included), each logging to ``logs/<name>.log``. If the process that started them dies, even by SIGKILL, each
    gets SIGTERM (Linux)."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.services: set[str] = set()  # those that must keep running (check_alive)
        logs.mkdir(parents=True, exist_ok=True)

    def start(self, name: str, args: list[str], env: dict[str, str], service: bool = True) -> subprocess.Popen[bytes]:
        with (self.logs / f"{name}.log").open("ab") as log:
            proc = subprocess.Popen(
                args,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=pdeathsig_preexec(),
            )
        self.procs[name] = proc
        if service:
            self.services.add(name)
        return proc

    def log_tail(self, name: str, chars: int = 3000) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"

    def check_alive(self) -> None:
        """Raise StackError naming the first service that exited, with the end of its log."""
        for name in sorted(self.services):
            proc = self.procs[name]
            if proc.poll() is not None:
                raise StackError(
                    f"{name} exited ({proc.returncode}); end of {self.logs / (name + '.log')}:\n{self.log_tail(name)}"
                )

    def stop(self, grace: float = STOP_GRACE, names: Iterable[str] | None = None) -> None:
        """SIGTERM to every process group at once (or to those of ``names``), then SIGKILL to the groups of those
        still running after ``grace`` seconds (and to any child left behind by one that exited)."""
        chosen = list(self.procs) if names is None else [n for n in names if n in self.procs]
        self.services.difference_update(chosen)
        procs = [self.procs[name] for name in chosen]
        for proc in procs:
            if proc.poll() is None:
                _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc.pid, signal.SIGKILL)
            if proc.poll() is None:
                proc.wait()
        if names is not None:
            for name in chosen:
                del self.procs[name]


def admin_user_args(password: str) -> list[str]:
    """``airflow users create`` for the REST calls' ``admin`` (2.x). The password goes as ``--password=…``: a random one
    may start with ``-`` (``secrets.token_urlsafe``), which argparse would take for an option as a separate word."""
    return [
        "users",
        "create",
        "--username",
        USER,
        f"--password={password}",
        "--role",
        "Admin",
        *("--email", "admin@example.invalid", "--firstname", "smart", "--lastname", "sensor"),
    ]


class AirflowStack:
    """One Airflow installation (a venv with the provider installed, one AIRFLOW_HOME) and its processes."""

    def __init__(
        self,
        venv: Path,
        home: Path,
        processes: Processes,
        parallelism: int = 8,
        port: int = 0,
        db_url: str | None = None,
        rest: bool = False,
        api_workers: int = 1,
        **extra_env: str,
    ) -> None:
        """``rest``: 2.x also runs its webserver, whose REST API (``/api/v1``) takes ``admin`` with basic auth, as
        3.x's api-server always runs. ``api_workers``: the processes serving the REST API (3.x's ``[api] workers``,
        2.x's ``[webserver] workers``); Airflow 3's default is 1."""
        self.venv, self.home, self.processes = venv, home, processes
        self.version = version_of(venv)
        self.major = int(self.version.split(".")[0])
        self.rest = rest or self.major >= 3
        self.port = (port or free_port()) if self.rest else 0
        self.url = f"http://127.0.0.1:{self.port}" if self.port else ""
        self.password = secrets.token_urlsafe(12)
        self.db_url = db_url or f"sqlite:///{home / 'airflow.db'}"
        self.sqlite = self.db_url.startswith("sqlite")
        self._token: str | None = None
        self._engine: Any = None
        env = {
            "AIRFLOW__CORE__EXECUTOR": "SequentialExecutor" if self.major < 3 and self.sqlite else "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": str(parallelism),
            "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(parallelism),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.db_url,
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "30",
        }
        if self.major >= 3:
            env.update(
                {
                    "AIRFLOW__API__HOST": "127.0.0.1",
                    "AIRFLOW__API__PORT": str(self.port),
                    "AIRFLOW__API__BASE_URL": self.url,
                    "AIRFLOW__API__WORKERS": str(api_workers),
                    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
                    "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
                    "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
                    "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
                    "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
                    "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                }
            )
        elif self.rest:
            env.update(
                {
                    "AIRFLOW__API__AUTH_BACKENDS": "airflow.api.auth.backend.basic_auth",
                    "AIRFLOW__WEBSERVER__WORKERS": str(api_workers),
                    "AIRFLOW__WEBSERVER__WEB_SERVER_PORT": str(self.port),
                    "AIRFLOW__WEBSERVER__SECRET_KEY": secrets.token_urlsafe(32),
                    "AIRFLOW__WEBSERVER__BASE_URL": self.url,
                }
            )
        env.update(extra_env)
        self.env = airflow_env(venv, home, **env)
        self.dags = home / "dags"

    # -- processes -------------------------------------------------------------------------------
    def components(self) -> dict[str, list[str]]:
        airflow = str(self.venv / "bin" / "airflow")
        if self.major >= 3:
            return {
                "api-server": [airflow, "api-server", "--port", str(self.port), "--host", "127.0.0.1"],
                "dag-processor": [airflow, "dag-processor"],
                "scheduler": [airflow, "scheduler", "--skip-serve-logs"],
                "triggerer": [airflow, "triggerer", "--skip-serve-logs"],
            }
        components = {
            "scheduler": [airflow, "scheduler", "--skip-serve-logs"],
            "triggerer": [airflow, "triggerer", "--skip-serve-logs"],
        }
        if self.rest:
            components["webserver"] = [airflow, "webserver", "--port", str(self.port), "--hostname", "127.0.0.1"]
        return components

    def start_attendant(self, timeout: float = 120, **env: str) -> None:
        """Start the parking attendant beside the scheduler, with Airflow's environment (issue 55) and ``env``, as
        ``attendant`` in ``processes``, and wait until it watches the parking pool (it imports Airflow first:
        seconds)."""
        log = self.processes.logs / "attendant.log"
        seen = log.read_text(errors="replace").count(ATTENDANT_READY) if log.exists() else 0
        command = [str(self.venv / "bin" / "python"), "-m", "smartsensor_airflow.attendant"]
        self.processes.start("attendant", command, {**self.env, **env})
        self.wait(
            "the parking attendant watching its pool",
            lambda: log.exists() and log.read_text(errors="replace").count(ATTENDANT_READY) > seen,
            timeout=timeout,
            step=0.2,
        )

    def migrate(self) -> float:
        """``airflow db migrate`` (a new database); returns its seconds."""
        started = time.monotonic()
        run_airflow(self.venv, ["db", "migrate"], self.env, timeout=600)
        return time.monotonic() - started

    def start(self, *names: str) -> None:
        """Start the components ``names`` (every one when none is named) as ``airflow-<component>`` in
        ``processes``. A home with no ``airflow.cfg`` yet (its database copied, not migrated here) gets it first, from
        one process reading its config: components that start together would each write it, and one may read
        another's half-written file."""
        if not (self.home / "airflow.cfg").exists():
            run_airflow(self.venv, ["config", "get-value", "core", "executor"], self.env, timeout=300)
        if self.major >= 3:
            (self.home / "passwords.json").write_text(json.dumps({USER: self.password}) + "\n")
        elif self.rest and not (self.home / "admin-created").exists():
            run_airflow(self.venv, admin_user_args(self.password), self.env, timeout=300)
            (self.home / "admin-created").write_text(USER + "\n")
        for name, args in self.components().items():
            if not names or name in names:
                self.processes.start(f"airflow-{name}", args, self.env)

    def stop(self) -> None:
        """Stop every process of ``processes`` (the components and whatever else was started with them)."""
        self.processes.stop()
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    # -- waiting ---------------------------------------------------------------------------------
    def wait(self, what: str, predicate: Callable[[], bool], timeout: float, step: float = 1.0) -> float:
        """Poll ``predicate`` while every component lives; seconds it took, or StackError after ``timeout``."""
        started = time.monotonic()
        while True:
            self.processes.check_alive()
            try:
                if predicate():
                    return time.monotonic() - started
            except (OSError, OperationalError):
                pass  # not listening yet, or the tables are not there yet
            if time.monotonic() - started > timeout:
                raise StackError(
                    f"Airflow {self.version}: {what} not reached within {timeout:g} s (logs in {self.processes.logs})"
                )
            time.sleep(step)

    def healthy(self) -> bool:
        """3.x: the api-server's health says the database, scheduler, triggerer and dag-processor are healthy.
        2.x: the scheduler and the triggerer have a running job with a recent heartbeat."""
        if self.major >= 3:
            with urllib.request.urlopen(f"{self.url}/api/v2/monitor/health", timeout=10) as response:
                health = json.load(response)
            return all(
                (health.get(k) or {}).get("status") == "healthy"
                for k in ("metadatabase", "scheduler", "triggerer", "dag_processor")
            )
        jobs = {r[0] for r in self.rows("SELECT job_type FROM job WHERE state = 'running'")}
        if self.rest:
            with urllib.request.urlopen(f"{self.url}/health", timeout=10) as response:
                if (json.load(response).get("metadatabase") or {}).get("status") != "healthy":
                    return False
        return {"SchedulerJob", "TriggererJob"} <= jobs

    def wait_healthy(self, timeout: float = 300) -> float:
        return self.wait("every component healthy", self.healthy, timeout)

    def parsed(self, dag_ids: Iterable[str]) -> bool:
        """Whether every DAG in ``dag_ids`` has been parsed and serialized."""
        found = {r[0] for r in self.rows("SELECT dag_id FROM serialized_dag")}
        return set(dag_ids) <= found

    def wait_parsed(self, dag_ids: Iterable[str], timeout: float = 300) -> float:
        dag_ids = list(dag_ids)
        return self.wait(f"DAGs {dag_ids} parsed", lambda: self.parsed(dag_ids), timeout)

    # -- runs and states ---------------------------------------------------------------------------
    def trigger(self, dag_id: str, logical_date: str) -> str:
        """Create a DAG run for ``logical_date`` (``YYYY-MM-DD``) through the REST API (2.x without ``rest``: the
        CLI); returns its run_id."""
        if self.rest:
            version = "v2" if self.major >= 3 else "v1"
            run = self.api(
                "POST",
                f"/api/{version}/dags/{dag_id}/dagRuns",
                {"logical_date": f"{logical_date}T00:00:00Z", "conf": {}},
            )
            return run["dag_run_id"]
        run_airflow(self.venv, ["dags", "trigger", "-e", logical_date, dag_id], self.env)
        return self.rows("SELECT run_id FROM dag_run WHERE dag_id = :d ORDER BY id DESC LIMIT 1", d=dag_id)[0][0]

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """One call to the REST API as ``admin`` (3.x: logged in once, with ``password``; 2.x with ``rest``: basic
        auth)."""
        return _call(method, f"{self.url}{path}", body, self.auth_headers())

    def publisher_settings(self, password_file: Path, uri_prefix: str, url: str | None = None) -> dict[str, str]:
        """smartsensor's ``[landings]`` keys that publish to this stack (its api-server at ``url``, by default its own
        URL) as ``admin``, the ``hive://`` assets under ``uri_prefix``; the password written to ``password_file``
        (only its owner may read it)."""
        password_file.parent.mkdir(parents=True, exist_ok=True)
        password_file.write_text(self.password + "\n")
        password_file.chmod(0o600)
        return {
            "publish": "true",
            "airflow_url": url or self.url,
            "airflow_username": USER,
            "airflow_password_file": str(password_file),
            "asset_uri_prefix": uri_prefix,
        }

    def auth_headers(self) -> dict[str, str]:
        """The headers that authenticate a REST call as ``admin``."""
        if self.major < 3:
            return {"Authorization": "Basic " + base64.b64encode(f"{USER}:{self.password}".encode()).decode()}
        if self._token is None:
            self._token = _call("POST", f"{self.url}/auth/token", {"username": USER, "password": self.password})[
                "access_token"
            ]
        return {"Authorization": f"Bearer {self._token}"}

    def trigger_many(self, dag_ids: Iterable[str], logical_date: str) -> list[str]:
        """Create a run of each DAG for ``logical_date``, at about the same moment: through the REST API (3.x, 2.x
        with ``rest``), else the CLI (one process per DAG, started together: each imports Airflow, seconds of CPU
        that a 2-core machine takes from the scheduler). Returns their run_ids."""
        dag_ids = list(dag_ids)
        if self.rest:
            return [self.trigger(dag_id, logical_date) for dag_id in dag_ids]
        airflow = str(self.venv / "bin" / "airflow")
        procs = [
            subprocess.Popen(
                [airflow, "dags", "trigger", "-e", logical_date, dag_id],
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for dag_id in dag_ids
        ]
        for dag_id, proc in zip(dag_ids, procs, strict=True):
            output, _ = proc.communicate(timeout=300)
            if proc.returncode != 0:
                raise StackError(f"airflow dags trigger {dag_id} exited {proc.returncode}: {output[-3000:]}")
        return [
            r[0]
            for r in self.rows(
                "SELECT run_id FROM dag_run WHERE dag_id IN :dags AND "
                + ("execution_date" if self.major < 3 else "logical_date")
                + " = :when",
                expanding=["dags"],
                dags=dag_ids,
                when=datetime.fromisoformat(logical_date).replace(tzinfo=timezone.utc),
            )
        ]

    def rows(self, sql: str, expanding: Iterable[str] = (), **params: Any) -> list[tuple[Any, ...]]:
        """Rows of a query on Airflow's own database (``expanding``: parameters that are lists, for ``IN``)."""
        if self._engine is None:
            self._engine = create_engine(self.db_url, connect_args={"timeout": 30} if self.sqlite else {})
        statement = text(sql).bindparams(*(bindparam(name, expanding=True) for name in expanding))
        with self._engine.connect() as conn:
            return [tuple(r) for r in conn.execute(statement, params).fetchall()]

    def task_states(self, dag_ids: Iterable[str] | None = None) -> dict[tuple[str, str], str | None]:
        """(dag_id, task_id) → state, for every task instance (one run per DAG) of ``dag_ids`` (default all)."""
        rows = self.rows("SELECT dag_id, task_id, state FROM task_instance")
        wanted = None if dag_ids is None else set(dag_ids)
        return {(d, t): s for d, t, s in rows if wanted is None or d in wanted}

    def worker_tries(self, dag_id: str, run_id: str, task_id: str) -> int:
        """How many tries of this task (all its map indexes) ran a task process on a worker: each such try writes
        ``attempt=N.log`` (a resume appends to it), while a trigger's lines go to ``attempt=N.log.trigger.<job>.log``
        on 2.10 and 3.x alike, and the parking attendant's to ``attempt=N.log.attendant.log``. 0: no worker ever ran
        it (it started and ended in the triggerer, or parked)."""
        folder = self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
        return sum(
            1
            for path in folder.rglob("attempt=*.log")
            if ".trigger." not in path.name and not path.name.endswith(".attendant.log")
        )

    def run_states(self) -> dict[str, str]:
        """dag_id → state of its (latest) run."""
        return {d: s for d, s in self.rows("SELECT dag_id, state FROM dag_run ORDER BY id")}


def _call(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            raw = response.read()
    except urllib.error.HTTPError as exc:
        raise StackError(f"{method} {url}: {exc.code} {exc.read()[:2000]!r}") from None
    return json.loads(raw) if raw else None


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
