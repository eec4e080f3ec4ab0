"""``[smartsensor] park = auto``, the default (issue 66), in Airflow as a platform team runs it
(tests/support/airflow_deployment.py: scheduler, triggerer, 3.x's dag-processor and api-server, LocalExecutor, its
database on PostgreSQL; smartsensor's ``serve`` and ``workers -n 2``): a deployment with no parking attendant keeps
the triggerer path; once an attendant runs, its heartbeat (an Airflow Variable DAG parsing reads) makes the next
parse of the DAG file park the sensor's tries, which end with no worker and no trigger; once the attendant has
stopped for longer than ``park_attendant_timeout``, the next parse stops parking again and ``status`` says how many
tries wait with no attendant. At scale (the extended tier): 300 sensors parked by default end with no worker and no
trigger, each case's p95 within 2 s."""

from __future__ import annotations

import json
import subprocess
from datetime import date, timedelta
from pathlib import Path
from typing import Iterator

import pytest

from scripts.airflow.stack import version_of
from smartsensor.config import Config
from tests.support.airflow_databases import AirflowDatabases
from tests.support.airflow_deployment import Deployment, deployed, tmp_for
from tests.support.airflow_helpers import airflow_venvs
from tests.support.airflow_race import CASES, TABLES, Outcome, dag_file, p, run_case, table
from tests.support.airflow_scale import BusyElsewhere

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


# Issue 66's done-when at scale: 300 sensors (3 DAGs × 100, the production-like test's teams' DAGs on the drop-in
# sensors, no option) parked by default, each case's end p95 within PARKED_GOAL of the trigger or the landing, with no
# worker and no trigger. A case that misses it is measured again (a new day), up to AGAIN times: the machines that
# run this are shared; a case whose every run shared the machine with BUSY_ELSEWHERE cores of other work is reported.
SCALE_DAGS, SCALE_SENSORS = 3, 100
PARKED_GOAL, AGAIN, BUSY_ELSEWHERE = 2.0, 2, 0.75


@pytest.mark.extended  # minutes of 900 tries; CI's parked end-to-end tests hold their rules
@pytest.mark.timeout(3600)
def test_300_sensors_parked_by_default(deployment: Deployment) -> None:
    stack = deployment.stack
    stack.start_attendant()  # before the DAG file is parsed: its first parse parks
    prefix = "auto_scale_"
    db = "auto_" + stack.version.replace(".", "_")
    (stack.dags / "auto_scale.py").write_text(dag_file(SCALE_DAGS, SCALE_SENSORS, "drop-in", db, prefix=prefix))
    # The component that parses, started again with Airflow's default parse interval (the module's 5 s would parse
    # the 300 sensors every 5 s while they are measured); it lists the DAG folder as it starts.
    deployment.restart_airflow(
        "dag-processor" if stack.major >= 3 else "scheduler",
        AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL="30",
        AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL="30",
    )
    dag_ids = [f"{prefix}{d}" for d in range(SCALE_DAGS)]
    stack.wait_parsed(dag_ids, timeout=900)
    ours = [proc.pid for proc in stack.processes.procs.values()]
    day = date(2026, 10, 1)
    outcomes: list[Outcome] = []
    for case in CASES:
        for _ in range(1 + AGAIN):
            with BusyElsewhere(ours) as busy:
                outcome = run_case(
                    stack, deployment.landing, deployment.engine, case, day.isoformat(), dag_ids, SCALE_SENSORS
                )
            outcome.elsewhere = busy.cores
            outcomes.append(outcome)
            day += timedelta(days=1)
            print("\n" + table(stack.version, f"parked by default, {busy.cores:.2f} cores busy elsewhere", [outcome]))
            if p(outcome.to_end, 0.95) <= PARKED_GOAL:
                break
    assert [o.tasks for o in outcomes] == [SCALE_DAGS * SCALE_SENSORS] * len(outcomes)
    assert {o.case: o.failures for o in outcomes if o.failures} == {}
    assert [(o.worker_tries, o.by_trigger) for o in outcomes] == [(0, 0)] * len(outcomes)  # no worker, no trigger
    missed = {}
    for case in CASES:
        runs = [(round(p(o.to_end, 0.95), 2), round(o.elsewhere, 2)) for o in outcomes if o.case == case]
        if min(p95 for p95, _ in runs) > PARKED_GOAL:
            if min(cores for _, cores in runs) >= BUSY_ELSEWHERE:
                print(f"{case}: p95 goal {PARKED_GOAL} s not held, the machine busy elsewhere (p95 s, cores): {runs}")
            else:
                missed[case] = runs
    assert missed == {}, f"end p95 above {PARKED_GOAL} s at 300 sensors parked by default (p95 s, cores): {missed}"
