"""A real Airflow 2.10 scheduler and triggerer: six deferred sensors in one triggerer process cost one states
request per poll interval in all (the shared poller), and all of them finish when the file lands.

(Airflow 3.x needs an api-server, a dag-processor, a scheduler and a triggerer for the same run; there the
trigger's serialize → rebuild path is covered by test_dag_end_to_end and test_provider_in_airflow.)"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

from smartsensor.adapters.metastore import free_port
from tests.support.airflow_helpers import airflow_env, airflow_venvs, run_airflow, version_of
from tests.support.common import ROOT, wait_until
from tests.support.pg import drop_pg_database, new_pg_database
from tests.support.proc_helpers import CliProcess, cli_env, run_cli

pytestmark = pytest.mark.slow

TOKEN = "triggerer-token"
SENSORS = 6
POLL = 2.0

DAG = """
from datetime import datetime

from airflow import DAG
from airflow.operators.empty import EmptyOperator

from smartsensor_airflow.sensors import SuccessFileSensor

with DAG("fanout", start_date=datetime(2026, 11, 1), schedule=None, catchup=False):
    waits = [SuccessFileSensor(task_id=f"wait_{{i}}", path="{path}", poke_interval={poll}, timeout=900)
             for i in range({n})]
    waits >> EmptyOperator(task_id="downstream")
"""


class Group:
    """Processes started in their own sessions, killed with their children at the end whatever happened."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.procs.append(subprocess.Popen(args, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                                           start_new_session=True))

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture
def group() -> Iterator[Group]:
    g = Group()
    yield g
    g.kill()


def states_requests(base: str) -> float:
    """``POST /api/v1/tasks/states`` requests the server answered so far (its /metrics)."""
    request = urllib.request.Request(f"{base}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("smartsensor_api_requests{") and 'route="/api/v1/tasks/states"' in line \
                    and 'code="200"' in line:
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def airflow_rows(home: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(home / "airflow.db", timeout=30) as conn:
        return conn.execute(sql).fetchall()


@pytest.mark.parametrize("venv", [v for v in airflow_venvs() if not isinstance(v, Path) or version_of(v) < "3"],
                         ids=version_of)
def test_one_states_request_per_interval_for_a_whole_triggerer(venv: Path, tmp_path: Path, group: Group) -> None:
    name, db_url = new_pg_database()
    try:
        env = cli_env(tmp_path / "smartsensor", db_url, PYTHONPATH=str(ROOT), SPARK_LOCAL_IP="127.0.0.1",
                      SMARTSENSOR__API__TOKEN=TOKEN, SMARTSENSOR__SPARK__CONF="spark.driver.memory=512m")
        run_cli(["db", "init"], env, check=True)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        landed = tmp_path / "landing" / "_SUCCESS"
        home = tmp_path / "airflow"
        af_env = airflow_env(venv, home, AIRFLOW_CONN_SMARTSENSOR_DEFAULT=f"http://:{TOKEN}@127.0.0.1:{port}",
                             AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC="1",
                             AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL="5",
                             AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False")
        (home / "dags" / "fanout.py").write_text(DAG.format(path=f"file://{landed}", poll=POLL, n=SENSORS))
        run_airflow(venv, ["db", "migrate"], af_env)
        server = CliProcess(["serve", "--port", str(port)], env)
        worker = CliProcess(["worker", "--interval", "0.5", "--json"], env)
        try:
            group.start([str(venv / "bin" / "airflow"), "scheduler", "--skip-serve-logs"], af_env,
                        tmp_path / "scheduler.log")
            group.start([str(venv / "bin" / "airflow"), "triggerer"], af_env, tmp_path / "triggerer.log")
            wait_until(lambda: run_airflow(venv, ["dags", "list"], af_env, check=False).stdout.count("fanout") > 0,
                       timeout=120, step=2)
            run_airflow(venv, ["dags", "trigger", "fanout"], af_env)

            def all_deferred() -> bool:
                rows = airflow_rows(home, "SELECT count(*) FROM task_instance WHERE state = 'deferred'")
                return rows[0][0] == SENSORS

            wait_until(all_deferred, timeout=400, step=1)
            assert airflow_rows(home, "SELECT count(*) FROM trigger")[0][0] == SENSORS  # one trigger row each
            wait_until(lambda: states_requests(base) > 0, timeout=60, step=0.5)  # the triggerer is polling
            before, start = states_requests(base), time.monotonic()
            time.sleep(5 * POLL)  # a measuring window: nothing is asserted until it is over
            during, window = states_requests(base) - before, time.monotonic() - start
            print(f"{SENSORS} deferred sensors, one triggerer: {during:.0f} states requests in {window:.1f} s "
                  f"(poll interval {POLL} s)")
            # Per-task polling would be SENSORS requests per interval; shared, it is one per interval.
            assert 1 <= during <= window / POLL + 1, (during, window)
            landed.parent.mkdir(parents=True)
            landed.write_text("")

            def run_state() -> str:
                return airflow_rows(home, "SELECT state FROM dag_run WHERE dag_id = 'fanout'")[0][0]

            wait_until(lambda: run_state() in ("success", "failed"), timeout=400, step=1)
            states = dict(airflow_rows(home, "SELECT task_id, state FROM task_instance WHERE dag_id = 'fanout'"))
            assert run_state() == "success", (states, (tmp_path / "triggerer.log").read_text()[-4000:])
        finally:
            worker.stop()
            server.stop()
    finally:
        drop_pg_database(name)
