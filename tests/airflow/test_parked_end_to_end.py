"""Parked tries end to end (issue 55), in Airflow as a platform team runs it (tests/support/airflow_deployment.py:
scheduler, triggerer, 3.x's dag-processor and api-server, LocalExecutor, its database on PostgreSQL; smartsensor's
``serve`` and ``workers -n 2`` on thrift) with ``[smartsensor] park`` on and the parking attendant running beside
the scheduler (``python -m smartsensor_airflow.attendant``, Airflow's environment).

A drop-in sensor's tries park in the parking pool: no worker, no trigger. The attendant registers them, each with
its task's own connection's service, and ends them: a partition already there, one landing while they wait;
soft_fail skips a try. What Airflow runs after an end only on a worker (a failure's handling, callbacks, outlets) is
left to one: the attendant hands such a try back to its task's own pool and a worker ends it as Airflow ends any try
(issue 66); so is a check it cannot render. With the service out of reach past the grace the pool opens and the
tries run today's way, checking on their own."""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import pytest
from sqlalchemy import create_engine, make_url, text

from scripts.airflow.stack import ATTENDANT_READY, run_airflow, version_of
from smartsensor.adapters.metastore_service_process import free_port
from smartsensor.config import Config
from tests.support.airflow_databases import AirflowDatabases
from tests.support.airflow_deployment import TOKEN, Deployment, deployed, metastore_connection, tmp_for
from tests.support.airflow_helpers import airflow_venvs
from tests.support.airflow_race import TABLES, registered_tries

pytestmark = pytest.mark.slow

POOL = "smartsensor_parked"
SENSORS = 10
DAG_IDS = [
    "parked_0",
    "parked_1",
    "parked_timeouts",
    "parked_valve",
    "parked_rules",
    "parked_dagrun_timeout",
    "parked_deleted",
    "parked_after_end",
    "parked_consumer",
    "parked_elsewhere",
]
ASSET = "smartsensor-test://parked/outlet"
# A DAG of its own file, deleted while its try is parked (the file stays: Airflow parses it again, with no run).
DELETED_DAG_FILE = """
from datetime import datetime

from airflow import DAG

from smartsensor_airflow.sensors import NamedHivePartitionSensor

with DAG("parked_deleted", start_date=datetime(2026, 1, 1), schedule=None, catchup=False):
    NamedHivePartitionSensor(task_id="doomed", partition_names=["@DB@.events/ds={{ ds }}"], poke_interval=30)
"""
DAG_FILE = """
from datetime import datetime, timedelta

from airflow import DAG

try:
    from airflow.sdk import Asset
    from airflow.providers.standard.operators.empty import EmptyOperator
except ImportError:
    from airflow.datasets import Dataset as Asset
    from airflow.operators.empty import EmptyOperator

from smartsensor_airflow.sensors import HivePartitionSensor, NamedHivePartitionSensor

for d in range(2):
    with DAG(f"parked_{d}", start_date=datetime(2026, 1, 1), schedule=None, catchup=False, max_active_tasks=64):
        for i in range(@SENSORS@):
            if i % 2:
                NamedHivePartitionSensor(
                    task_id=f"named_{i}", partition_names=["@DB@.events/ds={{ ds }}"], poke_interval=30,
                    timeout=900, retries=2,
                )
            else:
                HivePartitionSensor(
                    task_id=f"filter_{i}", table="clicks", schema="@DB@", partition="ds='{{ ds }}'",
                    poke_interval=30, timeout=900,
                )

with DAG("parked_timeouts", start_date=datetime(2026, 1, 1), schedule=None, catchup=False):
    NamedHivePartitionSensor(
        task_id="times_out", partition_names=["@DB@.events/ds=1999-01-01"], poke_interval=1, timeout=3, retries=2,
    )
    NamedHivePartitionSensor(
        task_id="soft", partition_names=["@DB@.events/ds=1999-01-01"], poke_interval=1, timeout=3, soft_fail=True,
    )
    NamedHivePartitionSensor(task_id="undefined", partition_names=["@DB@.events/ds={{ params.nope }}"], retries=0)

with DAG("parked_rules", start_date=datetime(2026, 1, 1), schedule=None, catchup=False):
    first = NamedHivePartitionSensor(task_id="first", partition_names=["@DB@.events/ds={{ ds }}"], poke_interval=30)
    after_first = HivePartitionSensor(
        task_id="after_first", table="clicks", schema="@DB@", partition="ds='{{ ds }}'", poke_interval=30
    )
    first >> after_first
    NamedHivePartitionSensor(
        task_id="execution_timeout", partition_names=["@DB@.events/ds=1999-01-02"], poke_interval=30, timeout=900,
        execution_timeout=timedelta(seconds=3), retries=1, retry_delay=timedelta(seconds=5),
    )

with DAG(
    "parked_dagrun_timeout", start_date=datetime(2026, 1, 1), schedule=None, catchup=False,
    dagrun_timeout=timedelta(seconds=5),
):
    NamedHivePartitionSensor(task_id="never", partition_names=["@DB@.events/ds=1999-01-03"], poke_interval=30)

def write_marker(context):
    with open("@MARKERS@/" + context["ti"].task_id + "." + context["run_id"].replace(":", "_"), "w") as f:
        f.write("success callback")

with DAG("parked_after_end", start_date=datetime(2026, 1, 1), schedule=None, catchup=False):
    NamedHivePartitionSensor(task_id="plain", partition_names=["@DB@.events/ds={{ ds }}"], poke_interval=30)
    NamedHivePartitionSensor(
        task_id="callback", partition_names=["@DB@.events/ds={{ ds }}"], poke_interval=30,
        on_success_callback=write_marker,
    )
    NamedHivePartitionSensor(
        task_id="outlet", partition_names=["@DB@.events/ds={{ ds }}"], poke_interval=30, outlets=[Asset("@ASSET@")],
    )
    NamedHivePartitionSensor(
        task_id="stored", partition_names=["@DB@.events/ds={{ ds }}"], poke_interval=30,
        smartsensor_conn_id="smartsensor_stored",
    )

with DAG("parked_consumer", start_date=datetime(2026, 1, 1), schedule=[Asset("@ASSET@")], catchup=False):
    EmptyOperator(task_id="consume")

with DAG("parked_elsewhere", start_date=datetime(2026, 1, 1), schedule=None, catchup=False):
    NamedHivePartitionSensor(
        task_id="elsewhere", partition_names=["@DB@.events/ds={{ ds }}"], poke_interval=2, timeout=600,
        smartsensor_conn_id="smartsensor_elsewhere", smartsensor_fallback_grace=3,
    )

with DAG("parked_valve", start_date=datetime(2026, 1, 1), schedule=None, catchup=False):
    NamedHivePartitionSensor(
        task_id="valve", partition_names=["@DB@.events/ds={{ ds }}"], poke_interval=2, timeout=600,
        smartsensor_fallback_grace=3,
    )
"""


@pytest.fixture(scope="module", params=airflow_venvs(), ids=version_of)
def deployment(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    service: Config,
    airflow_databases: AirflowDatabases,
) -> Iterator[Deployment]:
    venv: Path = request.param
    db = "parked_" + version_of(venv).replace(".", "_")
    tmp = tmp_for(tmp_path_factory, venv)
    markers = markers_of(tmp / "logs")
    markers.mkdir(parents=True, exist_ok=True)
    source = (
        DAG_FILE.replace("@SENSORS@", str(SENSORS))
        .replace("@DB@", db)
        .replace("@MARKERS@", str(markers))
        .replace("@ASSET@", ASSET)
    )
    with deployed(
        venv,
        airflow_databases,
        tmp,
        service,
        db,
        TABLES,
        {"parked.py": source, "parked_deleted.py": DELETED_DAG_FILE.replace("@DB@", db)},
        DAG_IDS,
        airflow_env={
            "AIRFLOW__SMARTSENSOR__PARK": "True",
            "AIRFLOW__SMARTSENSOR__PARK_FALLBACK_GRACE": "5",
            "AIRFLOW__SMARTSENSOR__PARK_INTERVAL": "0.5",
            # The safety valve's tries check on their own (execute → poke) through the metastore service.
            **metastore_connection(service),
        },
    ) as running:
        # Connections stored in Airflow's database: the default one's service under another id, and one whose
        # service is not there (a closed port).
        stored = f"http://:{TOKEN}@127.0.0.1:{running.port}"
        for conn_id, uri in (
            ("smartsensor_stored", stored),
            ("smartsensor_elsewhere", f"http://127.0.0.1:{free_port()}"),
        ):
            run_airflow(venv, ["connections", "add", conn_id, "--conn-uri", uri], running.stack.env)
        running.start_attendant()
        yield running


def markers_of(logs: Path) -> Path:
    """Where the DAGs' success callbacks write their markers: beside the deployment's logs."""
    return logs.parent / "markers"


def states(deployment: Deployment, run_ids: list[str]) -> dict[tuple[str, str], str | None]:
    rows = deployment.stack.rows(
        "SELECT dag_id, task_id, state FROM task_instance WHERE run_id IN :runs", expanding=["runs"], runs=run_ids
    )
    return {(d, t): s for d, t, s in rows}


def pools(deployment: Deployment, run_ids: list[str]) -> set[str]:
    rows = deployment.stack.rows(
        "SELECT DISTINCT pool FROM task_instance WHERE run_id IN :runs", expanding=["runs"], runs=run_ids
    )
    return {r[0] for r in rows}


def pool_slots(deployment: Deployment) -> int:
    """The parking pool's slots (0 while closed; the valve opens it)."""
    return int(deployment.stack.rows("SELECT slots FROM slot_pool WHERE pool = :p", p=POOL)[0][0])


def worker_tries(deployment: Deployment, run_ids: list[str]) -> int:
    rows = deployment.stack.rows(
        "SELECT dag_id, run_id, task_id FROM task_instance WHERE run_id IN :runs", expanding=["runs"], runs=run_ids
    )
    return sum(deployment.stack.worker_tries(d, r, t) for d, r, t in rows)


def wait_all(deployment: Deployment, run_ids: list[str], wanted: set[str], what: str, timeout: float = 300) -> None:
    deployment.stack.wait(
        what, lambda: set(states(deployment, run_ids).values()) <= wanted and bool(states(deployment, run_ids)), timeout
    )


def test_parked_tries_end_with_no_worker_and_no_trigger(deployment: Deployment) -> None:
    stack = deployment.stack
    dags = ["parked_0", "parked_1"]
    # Already there when the runs start.
    deployment.landing.land("2026-11-20")
    run_ids = stack.trigger_many(dags, "2026-11-20")
    wait_all(deployment, run_ids, {"success"}, "every parked sensor ended (already there)")
    assert pools(deployment, run_ids) == {POOL}
    # Landing while every try is parked and registered.
    run_ids_2 = stack.trigger_many(dags, "2026-11-21")
    wait_all(deployment, run_ids_2, {"scheduled"}, "every sensor parked")
    stack.wait(
        "the attendant registered the parked tries",
        lambda: registered_tries(deployment.engine, run_ids_2) == 2 * SENSORS,
        timeout=120,
        step=0.5,
    )
    landed = deployment.landing.land("2026-11-21")
    wait_all(deployment, run_ids_2, {"success"}, "every parked sensor ended (landed while parked)")
    ends = stack.rows("SELECT end_date FROM task_instance WHERE run_id IN :runs", expanding=["runs"], runs=run_ids_2)
    latest = max(r[0] for r in ends)
    print(f"\n{stack.version}: landed → last parked try ended: {(latest - landed).total_seconds():.2f} s")
    assert worker_tries(deployment, run_ids + run_ids_2) == 0
    assert int(stack.rows("SELECT count(*) FROM trigger")[0][0]) == 0
    # Their runs succeed at the scheduler's next look at them (a loop or more on a busy machine).
    runs = run_ids + run_ids_2
    stack.wait(
        "the runs of the parked tries succeeded",
        lambda: (
            set(stack.rows("SELECT state FROM dag_run WHERE run_id IN :runs", expanding=["runs"], runs=runs))
            == {("success",)}
        ),
        timeout=300,
    )


def test_a_timeout_fails_soft_fail_skips_and_an_unrenderable_check_fails_with_airflows_error(
    deployment: Deployment,
) -> None:
    """soft_fail's skip is ended by the attendant; the timeout and the check it cannot render are handed back, and a
    worker ends each as Airflow does: AirflowSensorTimeout (no retry), Airflow's own rendering error."""
    stack = deployment.stack
    (run_id,) = stack.trigger_many(["parked_timeouts"], "2026-11-22")
    stack.wait(
        "the timeouts ended",
        lambda: (
            states(deployment, [run_id])
            == {
                ("parked_timeouts", "times_out"): "failed",
                ("parked_timeouts", "soft"): "skipped",
                ("parked_timeouts", "undefined"): "failed",
            }
        ),
        timeout=300,
    )
    ran = {t: stack.worker_tries("parked_timeouts", run_id, t) for t in ("times_out", "soft", "undefined")}
    assert ran == {"times_out": 1, "soft": 0, "undefined": 1}
    assert "AirflowSensorTimeout" in worker_log(deployment, "parked_timeouts", run_id, "times_out")
    assert "UndefinedError" in worker_log(deployment, "parked_timeouts", run_id, "undefined")
    assert tries(deployment, run_id)["times_out"] == ("failed", 1)  # a sensor's timeout is not retried


def worker_log(deployment: Deployment, dag_id: str, run_id: str, task_id: str) -> str:
    """The text of the task's worker logs (every try's)."""
    folder = deployment.stack.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
    return "\n".join(
        p.read_text(errors="replace") for p in sorted(folder.rglob("attempt=*.log")) if ".trigger." not in p.name
    )


def test_what_airflow_runs_after_an_end_runs_and_each_try_asks_its_own_service(deployment: Deployment) -> None:
    """A success with nothing after it is ended by the attendant (no worker), also for a task whose connection is
    stored in Airflow's database; a task with an on_success_callback or outlets is handed back and a worker ends it:
    the callback runs, the outlet's asset event schedules its consumer DAG. A task whose own connection's service is
    not there is never answered by the default connection's service, where its partition is (a false success before
    issue 66): the valve opens for it, a worker runs it and checks on its own."""
    stack = deployment.stack
    day = "2026-11-16"
    deployment.landing.land(day)
    (run_id,) = stack.trigger_many(["parked_after_end"], day)
    wait_all(deployment, [run_id], {"success"}, "every after-end sensor ended")
    ran = {t: stack.worker_tries("parked_after_end", run_id, t) for t in ("plain", "stored", "callback", "outlet")}
    assert ran == {"plain": 0, "stored": 0, "callback": 1, "outlet": 1}
    assert (markers_of(deployment.logs) / f"callback.{run_id.replace(':', '_')}").read_text() == "success callback"
    stack.wait(
        "the outlet's consumer DAG ran",
        lambda: bool(stack.rows("SELECT run_id FROM dag_run WHERE dag_id = 'parked_consumer'")),
        timeout=300,
    )
    other_day = "2026-11-14"  # a day of its own: on 2.x, runs of one logical date share their run_id
    deployment.landing.land(other_day)
    (elsewhere,) = stack.trigger_many(["parked_elsewhere"], other_day)
    stack.wait(
        "the try of the service that is not there ended (by a worker, checking on its own)",
        lambda: states(deployment, [elsewhere]) == {("parked_elsewhere", "elsewhere"): "success"},
        timeout=600,
    )
    assert stack.worker_tries("parked_elsewhere", elsewhere, "elsewhere") == 1
    stack.wait("the parking pool closed again", lambda: pool_slots(deployment) == 0, timeout=120)


def test_with_the_service_out_of_reach_the_pool_opens_and_the_tries_run_as_today(deployment: Deployment) -> None:
    stack = deployment.stack
    deployment.landing.land("2026-11-23")
    deployment.stop_serve()
    try:
        (run_id,) = stack.trigger_many(["parked_valve"], "2026-11-23")
        stack.wait(
            "the valve's try checked on its own",
            lambda: states(deployment, [run_id]) == {("parked_valve", "valve"): "success"},
            timeout=600,
        )
        assert worker_tries(deployment, [run_id]) == 1
        assert pool_slots(deployment) > 0
    finally:
        deployment.start_serve()
    stack.wait("the parking pool closed again", lambda: pool_slots(deployment) == 0, timeout=120)


def tries(deployment: Deployment, run_id: str) -> dict[str, tuple[str | None, int]]:
    rows = deployment.stack.rows("SELECT task_id, state, try_number FROM task_instance WHERE run_id = :r", r=run_id)
    return {t: (s, n) for t, s, n in rows}


def notes_of(deployment: Deployment, run_id: str) -> dict[str, str]:
    sql = (
        "SELECT t.task_id, n.content FROM task_instance_note n JOIN task_instance t ON n.ti_id = t.id "
        "WHERE t.run_id = :r"
        if deployment.stack.major >= 3
        else "SELECT task_id, content FROM task_instance_note WHERE run_id = :r"
    )
    return dict(deployment.stack.rows(sql, r=run_id))


def registered_at(deployment: Deployment, run_id: str, task_id: str) -> datetime | None:
    with deployment.engine.connect() as conn:
        return conn.execute(
            text("SELECT registered_at FROM external_task WHERE run_id = :r AND task_id = :t"),
            {"r": run_id, "t": task_id},
        ).scalar()


def clear(deployment: Deployment, dag_id: str, run_id: str, task_id: str, day: str) -> None:
    """Clear one task of a run as a user does: the REST API on 3.x, the CLI on 2.x."""
    stack = deployment.stack
    if stack.major >= 3:
        body = {"dry_run": False, "task_ids": [task_id], "dag_run_id": run_id, "only_failed": False}
        stack.api("POST", f"/api/v2/dags/{dag_id}/clearTaskInstances", {**body, "reset_dag_runs": True})
    else:
        run_airflow(stack.venv, ["tasks", "clear", "-t", f"^{task_id}$", "-s", day, "-e", day, "-y", dag_id], stack.env)


def aware(when: datetime) -> datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


def test_a_sensor_parks_once_its_upstream_is_done_and_execution_timeout_retries(deployment: Deployment) -> None:
    """``first >> after_first``: the second parks (and is registered) only once the first ended, as the scheduler
    schedules it; ``execution_timeout`` ends a parked try as the provider's trigger does, resumed on a worker where
    Airflow raises ``AirflowTaskTimeout``, retried while it has retries (its retry parks again), then failed."""
    stack = deployment.stack
    day = "2026-11-24"
    deployment.landing.land(day, tables=("clicks",))
    (run_id,) = stack.trigger_many(["parked_rules"], day)
    stack.wait(
        "the first sensor parked and registered",
        lambda: (
            tries(deployment, run_id).get("first", (None, 0))[0] == "scheduled"
            and registered_at(deployment, run_id, "first") is not None
        ),
        timeout=300,
        step=0.5,
    )
    assert tries(deployment, run_id)["after_first"][0] is None  # its upstream waits: not scheduled, not parked
    assert registered_at(deployment, run_id, "after_first") is None
    deployment.landing.land(day, tables=("events",))
    stack.wait(
        "both sensors ended, the timed-out one after its retry",
        lambda: (
            {t: s for t, (s, _) in tries(deployment, run_id).items()}
            == {"first": "success", "after_first": "success", "execution_timeout": "failed"}
        ),
        timeout=300,
    )
    first_end = stack.rows("SELECT end_date FROM task_instance WHERE run_id = :r AND task_id = 'first'", r=run_id)[0][0]
    second = registered_at(deployment, run_id, "after_first")
    assert second is not None and aware(second) >= aware(first_end)
    assert tries(deployment, run_id)["execution_timeout"][1] == 2  # try 1 up_for_retry, try 2 failed
    # Each try reached its execution_timeout parked and was resumed on a worker with the trigger's event, where
    # Airflow raised AirflowTaskTimeout (its failure handling, its retry); the retry parked again.
    ran = {t: stack.worker_tries("parked_rules", run_id, t) for t in ("first", "after_first", "execution_timeout")}
    assert ran == {"first": 0, "after_first": 0, "execution_timeout": 2}
    assert "AirflowTaskTimeout" in worker_log(deployment, "parked_rules", run_id, "execution_timeout")
    folder = stack.home / "logs" / "dag_id=parked_rules" / f"run_id={run_id}" / "task_id=execution_timeout"
    assert sorted(p.name for p in folder.glob("*.attendant.log")) == [
        "attempt=1.log.attendant.log",
        "attempt=2.log.attendant.log",
    ]


def test_a_cleared_try_parks_again_and_a_paused_dags_tries_still_end(deployment: Deployment) -> None:
    """A user clears an ended parked try: its next try parks again and ends; a DAG paused while its tries are parked
    still has them ended (as its deferred tries would be), and a run past its ``dagrun_timeout`` is Airflow's to end:
    its parked try is skipped by the scheduler, never touched by the attendant."""
    stack = deployment.stack
    day = "2026-11-25"
    deployment.landing.land(day)
    (run_id,) = stack.trigger_many(["parked_rules"], day)
    stack.wait(  # its tries, and the run itself (a clear racing the scheduler's end of the run leaves it failed)
        "the rules' run ended",
        lambda: stack.rows("SELECT state FROM dag_run WHERE run_id = :r", r=run_id)[0][0] in ("success", "failed"),
        timeout=300,
    )
    clear(deployment, "parked_rules", run_id, "first", day)
    stack.wait(
        "the cleared try parked again and ended",
        lambda: tries(deployment, run_id)["first"] == ("success", 2),
        timeout=300,
        step=0.5,
    )
    paused_day = "2026-11-26"
    (paused,) = stack.trigger_many(["parked_rules"], paused_day)
    stack.wait(
        "the paused DAG's first sensor parked and registered",
        lambda: registered_at(deployment, paused, "first") is not None,
        timeout=300,
        step=0.5,
    )
    run_airflow(stack.venv, ["dags", "pause", "parked_rules"], stack.env)
    try:
        deployment.landing.land(paused_day, tables=("events",))
        stack.wait(
            "the paused DAG's parked try ended",
            lambda: tries(deployment, paused)["first"][0] == "success",
            timeout=300,
            step=0.5,
        )
    finally:
        run_airflow(stack.venv, ["dags", "unpause", "parked_rules"], stack.env)
    (timed_out,) = stack.trigger_many(["parked_dagrun_timeout"], "2026-11-27")
    stack.wait(
        "the run past its dagrun_timeout failed",
        lambda: stack.rows("SELECT state FROM dag_run WHERE run_id = :r", r=timed_out)[0][0] == "failed",
        timeout=300,
    )
    stack.wait("its try ended by Airflow", lambda: tries(deployment, timed_out)["never"][0] == "skipped", timeout=120)
    folder = stack.home / "logs" / "dag_id=parked_dagrun_timeout" / f"run_id={timed_out}" / "task_id=never"
    attended = "".join(path.read_text(errors="replace") for path in folder.glob("*.attendant.log"))
    assert "ended" not in attended and "handed back" not in attended  # the attendant never ended it
    assert notes_of(deployment, timed_out) == {}  # nor wrote a note: a note is its users'
    waited = [("parked_rules", r, t) for r in (run_id, paused) for t in ("first", "after_first")]
    waited.append(("parked_dagrun_timeout", timed_out, "never"))
    assert sum(stack.worker_tries(*one) for one in waited) == 0  # (execution_timeout's tries end on a worker)


def test_a_dag_deleted_while_its_tries_are_parked(deployment: Deployment) -> None:
    """A DAG deleted while its try is parked (``airflow dags delete``: its runs and tries go with it): the landing's
    answer for that try ends nothing (no row is written back), the attendant goes on, and another DAG's parked try
    of the same day ends."""
    stack = deployment.stack
    day = "2026-11-28"
    (doomed,) = stack.trigger_many(["parked_deleted"], day)
    (kept,) = stack.trigger_many(["parked_rules"], day)
    stack.wait(
        "both DAGs' first sensors parked and registered",
        lambda: (
            registered_at(deployment, doomed, "doomed") is not None
            and registered_at(deployment, kept, "first") is not None
        ),
        timeout=300,
        step=0.5,
    )
    run_airflow(stack.venv, ["dags", "delete", "-y", "parked_deleted"], stack.env)
    assert left_of(deployment, doomed) == (0, 0)
    deployment.landing.land(day, tables=("events",))  # answers both at once: the deleted try's too
    stack.wait(
        "the other DAG's parked try ended",
        lambda: tries(deployment, kept)["first"][0] == "success",
        timeout=300,
        step=0.5,
    )
    with deployment.engine.connect() as conn:  # the service ended its registration: the answer was there to end
        answered = conn.execute(
            text(
                "SELECT count(*) FROM external_task e JOIN task_instance t ON t.dag_id = e.dag_id "
                "AND t.task_id = e.ti_task_id AND t.execution_date = e.ti_execution_date "
                "WHERE e.dag_id = 'parked_deleted' AND e.run_id = :r AND t.state = 'success'"
            ),
            {"r": doomed},
        ).scalar_one()
    assert answered == 1
    assert left_of(deployment, doomed) == (0, 0)
    stack.processes.check_alive()  # the attendant among them
    log = (stack.processes.logs / "attendant.log").read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]


def test_two_attendants_and_one_is_killed(deployment: Deployment) -> None:
    """A second attendant beside the first: both register the parked tries (the service takes the same try twice as
    one); the first is killed (SIGKILL, nothing cleaned up) while every try waits, and the second ends them all, once
    each, with no worker."""
    stack = deployment.stack
    second = "attendant-2"
    log = stack.processes.logs / f"{second}.log"
    stack.processes.start(
        second, [str(stack.venv / "bin" / "python"), "-m", "smartsensor_airflow.attendant"], stack.env
    )
    try:
        stack.wait("the second attendant watching", lambda: log.exists() and ATTENDANT_READY in log.read_text(), 120)
        day = "2026-11-15"
        run_ids = stack.trigger_many(["parked_0"], day)
        wait_all(deployment, run_ids, {"scheduled"}, "every sensor parked")
        stack.wait(
            "both attendants registered the parked tries",
            lambda: registered_tries(deployment.engine, run_ids) == SENSORS and "registered=" in log.read_text(),
            timeout=120,
            step=0.5,
        )
        first = stack.processes.procs.pop("attendant")
        stack.processes.services.discard("attendant")
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        assert attendant_status(deployment)[0] == 0  # the second one's heartbeat
        deployment.landing.land(day)
        wait_all(deployment, run_ids, {"success"}, "the second attendant ended every try")
        assert worker_tries(deployment, run_ids) == 0
        ended = stack.rows(
            "SELECT count(*) FROM task_instance WHERE run_id IN :runs AND state = 'success' AND try_number = 1",
            expanding=["runs"],
            runs=run_ids,
        )
        assert int(ended[0][0]) == SENSORS
    finally:
        stack.processes.stop(names=[second])
        if "attendant" not in stack.processes.procs:
            stack.start_attendant()


def attendant_status(deployment: Deployment, **env: str) -> tuple[int, str]:
    """``python -m smartsensor_airflow.attendant status``: its exit code and what it printed."""
    stack = deployment.stack
    proc = subprocess.run(
        [str(stack.venv / "bin" / "python"), "-m", "smartsensor_airflow.attendant", "status"],
        env={**stack.env, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.returncode, proc.stdout


def test_tries_that_wait_with_no_attendant_are_told(deployment: Deployment) -> None:
    """With no attendant running, parked tries wait (as deferred tries wait while no triggerer runs): ``status``
    says how many wait with no attendant (exit 1) once the last heartbeat is older than
    ``park_attendant_timeout``; an attendant started again registers and ends them."""
    stack = deployment.stack
    stack.processes.stop(names=["attendant"])
    try:
        day = "2026-11-13"
        run_ids = stack.trigger_many(["parked_1"], day)
        wait_all(deployment, run_ids, {"scheduled"}, "every sensor parked, no attendant running")
        stack.wait(  # the last heartbeat ages past the timeout given
            "status saying the tries wait with no attendant",
            lambda: attendant_status(deployment, AIRFLOW__SMARTSENSOR__PARK_ATTENDANT_TIMEOUT="2")[0] == 1,
            timeout=120,
            step=5,  # each call starts a Python with Airflow (seconds of CPU)
        )
        code, out = attendant_status(deployment, AIRFLOW__SMARTSENSOR__PARK_ATTENDANT_TIMEOUT="2")
        assert code == 1, out
        unattended = re.search(r"UNATTENDED: (\d+) tries wait with no attendant", out)
        assert unattended is not None and int(unattended.group(1)) >= SENSORS, out  # (and any an earlier test left)
    finally:
        stack.start_attendant()
        deployment.landing.land(day)  # even when the test failed: its tries end, and take no worker slot later
    wait_all(deployment, run_ids, {"success"}, "the attendant started again ended every try")
    code, out = attendant_status(deployment)
    assert code == 0 and " attended" in out, out
    assert worker_tries(deployment, run_ids) == 0


def left_of(deployment: Deployment, run_id: str) -> tuple[int, int]:
    """The deleted DAG's rows left of ``run_id``: (its runs, its tries). On 2.x another DAG's run of the same
    logical date has the same run_id."""
    rows = [
        deployment.stack.rows(f"SELECT count(*) FROM {table} WHERE dag_id = 'parked_deleted' AND run_id = :r", r=run_id)
        for table in ("dag_run", "task_instance")
    ]
    return int(rows[0][0][0]), int(rows[1][0][0])


# What the attendant reads and writes in Airflow's database (docs/airflow.md, "What the attendant reads and
# writes"), as PostgreSQL grants: its row locks (SELECT … FOR UPDATE) need an UPDATE privilege, a column's is enough.
ATTENDANT_GRANTS = (
    "GRANT SELECT ON task_instance, dag_run, serialized_dag, slot_pool, connection TO {role}",
    "GRANT UPDATE (state, start_date, end_date, duration, pool, next_method, next_kwargs, updated_at)"
    " ON task_instance TO {role}",
    "GRANT INSERT, UPDATE (slots, description) ON slot_pool TO {role}",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON variable TO {role}",
    "GRANT USAGE ON SEQUENCE variable_id_seq TO {role}",
    "GRANT USAGE ON SEQUENCE slot_pool_id_seq TO {role}",
)


def test_the_attendant_needs_no_more_than_it_reads_and_writes(deployment: Deployment) -> None:
    """The attendant under a database role granted only ATTENDANT_GRANTS (the deployment's own stopped meanwhile):
    it ends a try whose partition is there, one whose connection is stored in Airflow's database, a soft_fail, hands
    back a timeout and an unrenderable check, and opens and closes the pool for the safety valve."""
    stack = deployment.stack
    role, password = f"attendant_{secrets.token_hex(4)}", secrets.token_urlsafe(12)
    owner = create_engine(stack.db_url, isolation_level="AUTOCOMMIT")
    try:
        with owner.connect() as conn:
            conn.execute(text(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'"))
            for grant in ATTENDANT_GRANTS:
                conn.execute(text(grant.format(role=role)))
        restricted = make_url(stack.db_url).set(username=role, password=password)
        stack.processes.stop(names=["attendant"])
        stack.start_attendant(AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=restricted.render_as_string(hide_password=False))
        try:
            day = "2026-11-19"  # a past day: Airflow starts no run whose logical date is in the future
            deployment.landing.land(day)
            (run_id,) = stack.trigger_many(["parked_0"], day)
            # Days of their own: on 2.x, runs of one logical date share their run_id.
            (timeouts,) = stack.trigger_many(["parked_timeouts"], "2026-11-18")
            (after,) = stack.trigger_many(["parked_after_end"], day)
            wait_all(deployment, [run_id], {"success"}, f"parked_0 of {day} ended by the restricted attendant")
            stack.wait(
                "the timeouts ended or handed back by the restricted attendant",
                lambda: set(states(deployment, [timeouts]).values()) == {"failed", "skipped"},
                timeout=300,
            )
            wait_all(deployment, [after], {"success"}, "the after-end sensors ended")
            assert stack.worker_tries("parked_after_end", after, "stored") == 0  # its stored connection read
            deployment.stop_serve()
            try:
                deployment.landing.metastore.land(TABLES[0], "2026-11-17")
                (valve,) = stack.trigger_many(["parked_valve"], "2026-11-17")
                stack.wait(
                    "the valve's try checked on its own (the restricted attendant opened the pool)",
                    lambda: states(deployment, [valve]) == {("parked_valve", "valve"): "success"},
                    timeout=600,
                )
            finally:
                deployment.start_serve()
            stack.wait(
                "the restricted attendant closed the pool again", lambda: pool_slots(deployment) == 0, timeout=120
            )
            log = (stack.processes.logs / "attendant.log").read_text(errors="replace")
            assert "permission denied" not in log.lower(), log[-3000:]
            assert attendant_status(deployment)[0] == 0  # its heartbeat written under the role
        finally:
            stack.processes.stop(names=["attendant"])
            stack.start_attendant()
    finally:
        with owner.connect() as conn:
            conn.execute(text(f"DROP OWNED BY {role}"))
            conn.execute(text(f"DROP ROLE IF EXISTS {role}"))
        owner.dispose()
