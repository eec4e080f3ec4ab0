"""``[smartsensor] park = auto``, the default (issue 66), in Airflow as a platform team runs it
(tests/support/airflow_deployment.py: scheduler, triggerer, 3.x's dag-processor and api-server, LocalExecutor, its
database on PostgreSQL; smartsensor's ``serve`` and ``workers -n 2``): a deployment with no parking attendant keeps
the triggerer path; once an attendant runs, its heartbeat (an Airflow Variable DAG parsing reads) makes the next
parse of the DAG file park the sensor's tries, which end with no worker and no trigger; once the attendant has
stopped for longer than ``park_attendant_timeout``, the next parse stops parking again and ``status`` says how many
tries wait with no attendant."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from scripts.airflow.stack import version_of
from smartsensor.config import Config
from tests.support.airflow_databases import AirflowDatabases
from tests.support.airflow_deployment import Deployment, deployed, tmp_for
from tests.support.airflow_helpers import airflow_venvs
from tests.support.airflow_race import TABLES

pytestmark = pytest.mark.slow

POOL = "smartsensor_parked"
DAG_ID = "auto_parked"
DAG_FILE = """
from datetime import datetime

from airflow import DAG

from smartsensor_airflow.sensors import NamedHivePartitionSensor

with DAG("auto_parked", start_date=datetime(2026, 1, 1), schedule=None, catchup=False):
    NamedHivePartitionSensor(task_id="wait", partition_names=["@DB@.events/ds={{ ds }}"], poke_interval=5)
"""


@pytest.fixture(scope="module", params=airflow_venvs(), ids=version_of)
def deployment(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    service: Config,
    airflow_databases: AirflowDatabases,
) -> Iterator[Deployment]:
    venv: Path = request.param
    db = "auto_" + version_of(venv).replace(".", "_")
    with deployed(
        venv,
        airflow_databases,
        tmp_for(tmp_path_factory, venv),
        service,
        db,
        TABLES,
        {"auto_parked.py": DAG_FILE.replace("@DB@", db)},
        [DAG_ID],
        airflow_env={
            # park is left to its default (auto); the DAG file is parsed again every 5 s
            "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "5",
            "AIRFLOW__SMARTSENSOR__PARK_ATTENDANT_TIMEOUT": "15",
        },
    ) as running:
        yield running


def serialized_parks(deployment: Deployment) -> bool:
    """Whether the DAG's newest serialized version parks its sensor (carries its parked check, in the pool)."""
    rows = deployment.stack.rows(
        "SELECT data FROM serialized_dag WHERE dag_id = :d ORDER BY last_updated DESC LIMIT 1", d=DAG_ID
    )
    if not rows:
        return False
    data = rows[0][0] if isinstance(rows[0][0], dict) else json.loads(rows[0][0] or "{}")
    for item in data.get("dag", {}).get("tasks", []):
        task = item.get("__var", item)
        if task.get("task_id") == "wait":
            return bool(task.get("smartsensor_parked")) and task.get("pool") == POOL
    return False


def run_once(deployment: Deployment, day: str) -> tuple[str, str, int]:
    """Trigger the DAG for ``day``, land the partition, wait for the end: the try's pool, its state and how many of
    its tries ran on a worker."""
    stack = deployment.stack
    (run_id,) = stack.trigger_many([DAG_ID], day)
    stack.wait(
        "the sensor's try scheduled or deferred",
        lambda: bool(
            stack.rows(
                "SELECT 1 FROM task_instance WHERE run_id = :r AND state IN ('scheduled', 'deferred', 'success')",
                r=run_id,
            )
        ),
        timeout=300,
        step=0.5,
    )
    deployment.landing.land(day)
    stack.wait(
        "the sensor ended",
        lambda: stack.rows("SELECT state FROM task_instance WHERE run_id = :r", r=run_id)[0][0] == "success",
        timeout=300,
        step=0.5,
    )
    pool, state = stack.rows("SELECT pool, state FROM task_instance WHERE run_id = :r", r=run_id)[0]
    return str(pool), str(state), stack.worker_tries(DAG_ID, run_id, "wait")


def test_auto_parks_while_an_attendant_lives(deployment: Deployment) -> None:
    stack = deployment.stack
    assert not serialized_parks(deployment)
    pool, state, _ = run_once(deployment, "2026-11-10")  # no attendant: the triggerer path
    assert (pool, state) == ("default_pool", "success")
    stack.start_attendant()
    stack.wait("the DAG parsed again, parking", lambda: serialized_parks(deployment), timeout=300)
    pool, state, on_worker = run_once(deployment, "2026-11-11")
    assert (pool, state, on_worker) == (POOL, "success", 0)
    stack.processes.stop(names=["attendant"])
    stack.wait("the DAG parsed again, not parking", lambda: not serialized_parks(deployment), timeout=300)
    status = subprocess.run(
        [str(stack.venv / "bin" / "python"), "-m", "smartsensor_airflow.attendant", "status"],
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert status.returncode == 0, status.stdout + status.stderr  # nothing waits
    assert "0 parked tries" in status.stdout
