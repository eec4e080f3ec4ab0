"""Parked tries in a real Airflow (issue 55): the scheduler parks a sensor of a pool with 0 slots (``scheduled``, no
worker, no trigger, its run not failed by the deadlock check), and the provider's ``end_parked``, run in an
Airflow process, ends exactly the tries that are still parked: never one a user changed, another try of the task,
a task of another pool, nor the same try twice; a stateful model (hypothesis, inside Airflow) drives ``end_parked``
through every interleaving of attendants (one ending a batch again, two at once), users and the scheduler.

Airflow: scheduler and triggerer (3.x: dag-processor and api-server; 2.x: its webserver, for the REST API the user
acts through), LocalExecutor, its database on the suite's PostgreSQL. No smartsensor service runs: what is
tested is Airflow's side of parking."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest

from scripts.airflow.stack import AirflowStack, Processes, run_airflow, version_of
from scripts.bench.parking import end_in_airflow
from tests.support.airflow_databases import AirflowDatabases
from tests.support.airflow_helpers import INSIDE, airflow_venvs
from tests.support.common import wait_until
from tests.support.pg import drop_pg_database

pytestmark = pytest.mark.slow

POOL = "smartsensor_parked"
OTHER = "elsewhere"  # another pool with 0 slots: its tasks wait too, and are not smartsensor's to end
DAG_ID = "parked"
SENSORS = ("s0", "s1", "s2", "s3")
DAG_FILE = f"""
from datetime import datetime

from airflow import DAG

try:
    from airflow.providers.standard.operators.bash import BashOperator
except ImportError:
    from airflow.operators.bash import BashOperator
from smartsensor_airflow.sensors import NamedHivePartitionSensor

with DAG("{DAG_ID}", start_date=datetime(2026, 1, 1), schedule=None, catchup=False):
    start = BashOperator(task_id="start", bash_command="true")
    for task_id in {SENSORS!r}:
        start >> NamedHivePartitionSensor(
            task_id=task_id, partition_names=["db.t/ds={{{{ ds }}}}"], pool="{POOL}",
            smartsensor_start_from_trigger=False,
        )
    start >> NamedHivePartitionSensor(
        task_id="other", partition_names=["db.t/ds={{{{ ds }}}}"], pool="{OTHER}", smartsensor_start_from_trigger=False,
    )
"""


@pytest.fixture(scope="module", params=airflow_venvs(), ids=lambda v: version_of(v) if v else "no-airflow")
def stack(
    request: pytest.FixtureRequest, airflow_databases: AirflowDatabases, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AirflowStack]:
    venv: Path = request.param
    tmp = tmp_path_factory.mktemp(f"parking-{version_of(venv)}")
    name, url = airflow_databases.new_pg(venv)
    airflow = AirflowStack(venv, tmp / "airflow", Processes(tmp / "logs"), parallelism=4, db_url=url, rest=True)
    (airflow.dags / "parked.py").write_text(DAG_FILE)
    try:
        for pool in (POOL, OTHER):
            run_airflow(venv, ["pools", "set", pool, "0", "parking test"], airflow.env, timeout=300)
        airflow.start()
        airflow.wait_healthy(timeout=300)
        airflow.wait_parsed([DAG_ID], timeout=300)
        yield airflow
    finally:
        airflow.stop()
        drop_pg_database(name)


def parked_tries(stack: AirflowStack, run_id: str) -> dict[str, tuple[str | None, int]]:
    """task_id → (state, try number) of the run's tasks."""
    rows = stack.rows(
        "SELECT task_id, state, try_number FROM task_instance WHERE dag_id = :d AND run_id = :r", d=DAG_ID, r=run_id
    )
    return {task: (state, int(tries)) for task, state, tries in rows}


def end(run_id: str, task_id: str, try_number: int, state: str = "success", note: str | None = None) -> dict[str, Any]:
    return {
        "dag_id": DAG_ID,
        "run_id": run_id,
        "task_id": task_id,
        "map_index": -1,
        "try_number": try_number,
        "state": state,
        "note": note,
    }


def test_only_a_try_still_parked_is_ended_and_only_once(stack: AirflowStack) -> None:
    run_id = stack.trigger(DAG_ID, "2026-11-22")
    parked = ["s0", "s1", "s2", "s3", "other"]

    def all_parked() -> bool:
        tries = parked_tries(stack, run_id)
        return all(tries.get(t, (None, 0))[0] == "scheduled" for t in parked)

    wait_until(all_parked, timeout=180, step=0.5)
    tries = parked_tries(stack, run_id)
    assert tries["start"][0] == "success"
    assert int(stack.rows("SELECT count(*) FROM trigger")[0][0]) == 0
    for task in parked:
        assert stack.worker_tries(DAG_ID, run_id, task) == 0
    # A user marks s1 failed through the REST API while it is parked: the user's change wins.
    v = 2 if stack.major >= 3 else 1
    body: dict[str, Any] = {"new_state": "failed"} if v == 2 else {"dry_run": False, "new_state": "failed"}
    stack.api("PATCH", f"/api/v{v}/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/s1", body)
    try_of = {task: tries[task][1] for task in parked}
    reason = "smartsensor: timed out after 900 s waiting for db.t/ds=2026-11-22"
    ends = [
        end(run_id, "s0", try_of["s0"]),
        end(run_id, "s1", try_of["s1"]),  # the user's now
        end(run_id, "s2", try_of["s2"] + 1),  # a later try's answer: not this one's
        end(run_id, "s3", try_of["s3"], "failed", reason),
        end(run_id, "other", try_of["other"]),  # not in the parking pool
    ]
    result = end_in_airflow(stack, ends, batch=500, pool=POOL)
    assert sorted(key[2] for key in result["applied"]) == ["s0", "s3"]
    states = {task: state for task, (state, _) in parked_tries(stack, run_id).items()}
    assert states == {
        "start": "success",
        "s0": "success",
        "s1": "failed",
        "s2": "scheduled",
        "s3": "failed",
        "other": "scheduled",
    }
    note_sql = (
        "SELECT n.content FROM task_instance_note n JOIN task_instance t ON n.ti_id = t.id "
        "WHERE t.dag_id = :d AND t.run_id = :r AND t.task_id = 's3'"
        if stack.major >= 3
        else "SELECT content FROM task_instance_note WHERE dag_id = :d AND run_id = :r AND task_id = 's3'"
    )
    assert stack.rows(note_sql, d=DAG_ID, r=run_id) == []  # no note: a note is its users'
    ended = stack.rows(
        "SELECT start_date, end_date, duration FROM task_instance WHERE dag_id = :d AND run_id = :r AND task_id = 's0'",
        d=DAG_ID,
        r=run_id,
    )[0]
    assert ended[0] is not None and ended[1] is not None and ended[2] is not None and ended[2] >= 0
    # Ending the same tries again changes nothing: each was ended once.
    again = end_in_airflow(stack, ends, batch=2, pool=POOL)
    assert again["applied"] == []
    # The run waits on its parked tries: the scheduler's deadlock check has not failed it.
    assert stack.rows("SELECT state FROM dag_run WHERE dag_id = :d AND run_id = :r", d=DAG_ID, r=run_id) == [
        ("running",)
    ]


def test_end_parked_through_every_interleaving(stack: AirflowStack) -> None:
    """The stateful model of ``end_parked`` (tests/airflow/inside/parking_model.py: hypothesis drives attendants,
    a second and concurrent attendant, users and the scheduler through every interleaving) on a run's parked
    tries, with Airflow's scheduler stopped meanwhile (it would schedule a cleared try itself)."""
    run_id = stack.trigger(DAG_ID, "2026-11-21")
    tasks = {**{task: POOL for task in SENSORS}, "other": OTHER}
    wait_until(
        lambda: all(parked_tries(stack, run_id).get(t, (None, 0))[0] == "scheduled" for t in tasks),
        timeout=180,
        step=0.5,
    )
    stack.processes.stop(names=["airflow-scheduler"])
    try:
        proc = subprocess.run(
            [str(stack.venv / "bin" / "python"), str(INSIDE / "parking_model.py")],
            input=json.dumps({"pool": POOL, "dag_id": DAG_ID, "run_id": run_id, "tasks": tasks, "examples": 40}),
            env=stack.env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert proc.returncode == 0, proc.stderr[-6000:]
        counts = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"\nAirflow {stack.version}: the parking model ran {counts}")
        assert counts["examples"] >= 40 and counts["applied"] > 0 and counts["concurrent"] > 0, counts
    finally:
        stack.start("scheduler")
