"""The cluster policy in a production-like Airflow: DAG files written for Airflow's Hive provider, unchanged, run
through smartsensor because ``airflow_local_settings.py`` re-exports ``smartsensor_airflow.policy.task_policy``
and ``[smartsensor] use_smart_sensor`` is on (``AIRFLOW__SMARTSENSOR__…`` variables here); with the service out of
reach they still succeed (the safety valve); with the policy off they run as plain Airflow.

One deployment per Airflow version (tests/support/airflow_deployment.py: scheduler, triggerer, dag-processor and
api-server on 3.x, LocalExecutor, both databases on PostgreSQL, ``serve`` and ``workers -n 2`` on the metastore
service). Airflow's own sensors reach the same metastore through ``metastore_default`` (thrift), as the safety
valve and the classic runs do. The tests of this module run in order, one day each.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

import pytest
from sqlalchemy import bindparam, text

from scripts.airflow.stack import version_of
from smartsensor.config import Config
from tests.support.airflow_databases import AirflowDatabases
from tests.support.airflow_deployment import Deployment, deployed, tmp_for
from tests.support.airflow_helpers import airflow_venvs
from tests.support.airflow_race import TABLES

pytestmark = pytest.mark.slow

TEAMS = 3
GRACE = 15  # [smartsensor] fallback_grace: seconds out of reach before a try checks on its own
LOCAL_SETTINGS = "from smartsensor_airflow.policy import task_policy  # noqa: F401 - Airflow's policy hook\n"

# What teams write for Airflow's Hive provider: nothing of smartsensor in it. Every team waits on the same two
# partitions (``events``, ``clicks``), by name, by filter (reschedule mode) and by metastore name.
DAGS = """
from datetime import datetime

import airflow
from airflow import DAG
from airflow.providers.apache.hive.sensors.hive_partition import HivePartitionSensor
from airflow.providers.apache.hive.sensors.metastore_partition import MetastorePartitionSensor
from airflow.providers.apache.hive.sensors.named_hive_partition import NamedHivePartitionSensor

# The Hive provider beside Airflow 2.10.5 (9.1.4) needs these for its MetastorePartitionSensor (its bug).
METASTORE_FIX = {"conn_id": "metastore_mysql", "sql": "SELECT 1"} if airflow.__version__.startswith("2.") else {}
WAIT = dict(poke_interval=5, timeout=1200)

for team in range(@TEAMS@):
    with DAG(f"policy_team_{team}", start_date=datetime(2026, 1, 1), schedule=None, catchup=False) as dag:
        NamedHivePartitionSensor(task_id="named", partition_names=["@DB@.events/ds={{ ds }}"], **WAIT)
        HivePartitionSensor(task_id="filter", table="clicks", schema="@DB@", partition="ds='{{ ds }}'",
                            mode="reschedule", **WAIT)
        MetastorePartitionSensor(task_id="metastore", table="@DB@.events", partition_name="ds={{ ds }}",
                                 **WAIT, **METASTORE_FIX)
        if team == 0:
            NamedHivePartitionSensor(task_id="opted_out", partition_names=["@DB@.events/ds={{ ds }}"],
                                     params={"smartsensor": False}, **WAIT)
            # A filter smartsensor cannot check: routed, but it runs as Airflow's own.
            HivePartitionSensor(task_id="range", table="clicks", schema="@DB@", partition="ds >= '{{ ds }}'", **WAIT)
    globals()[dag.dag_id] = dag

with DAG("policy_tagged_off", start_date=datetime(2026, 1, 1), schedule=None, catchup=False,
         tags=["smartsensor:off"]) as dag:
    NamedHivePartitionSensor(task_id="named", partition_names=["@DB@.events/ds={{ ds }}"], **WAIT)

# The safety valve: waits whose check can be made without smartsensor (Airflow's MetastorePartitionSensor reads
# the metastore's MySQL database, which this metastore service does not have). The drop-in checks through
# Airflow's own sensor too.
from smartsensor_airflow.sensors import NamedHivePartitionSensor as DropIn

with DAG("policy_valve", start_date=datetime(2026, 1, 1), schedule=None, catchup=False) as dag:
    NamedHivePartitionSensor(task_id="named", partition_names=["@DB@.events/ds={{ ds }}"], **WAIT)
    HivePartitionSensor(task_id="filter", table="clicks", schema="@DB@", partition="ds='{{ ds }}'",
                        mode="reschedule", **WAIT)
    DropIn(task_id="drop_in", partition_names=["@DB@.clicks/ds={{ ds }}"], smartsensor_fallback_grace=@GRACE@, **WAIT)
"""
TEAM_DAGS = [f"policy_team_{t}" for t in range(TEAMS)]
ROUTED = ("named", "filter", "metastore")


def dag_source(db: str) -> str:
    return DAGS.replace("@TEAMS@", str(TEAMS)).replace("@DB@", db).replace("@GRACE@", str(GRACE))


@pytest.fixture(scope="module", params=airflow_venvs(), ids=version_of)
def deployment(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    service: Config,
    airflow_databases: AirflowDatabases,
) -> Iterator[Deployment]:
    venv: Path = request.param
    db = "policy_" + version_of(venv).replace(".", "_")
    port = service.get("spark", "metastore_uris").rsplit(":", 1)[1]
    with deployed(
        venv,
        airflow_databases,
        tmp_for(tmp_path_factory, venv),
        service,
        db,
        TABLES,
        {"teams.py": dag_source(db)},
        [*TEAM_DAGS, "policy_tagged_off", "policy_valve"],
        local_settings=LOCAL_SETTINGS,
        AIRFLOW__SMARTSENSOR__USE_SMART_SENSOR="True",
        AIRFLOW__SMARTSENSOR__POLL_INTERVAL="2",
        AIRFLOW__SMARTSENSOR__FALLBACK_GRACE=str(GRACE),
        AIRFLOW_CONN_METASTORE_DEFAULT=f"hive-metastore://127.0.0.1:{port}",
    ) as running:
        yield running


def tasks_of(deployment: Deployment, run_ids: list[str]) -> dict[tuple[str, str], tuple[str, str | None, int]]:
    """(dag_id, task_id) → (state, operator name as the UI shows it, try_number) for the runs ``run_ids``."""
    return {
        (d, t): (s, name, int(tries))
        for d, t, s, name, tries in deployment.stack.rows(
            "SELECT dag_id, task_id, state, coalesce(custom_operator_name, operator), try_number "
            "FROM task_instance WHERE run_id IN :runs",
            expanding=["runs"],
            runs=run_ids,
        )
    }


def registered(deployment: Deployment, run_ids: list[str]) -> dict[tuple[str, str], int]:
    """(dag_id, task_id) → hashcode of every try smartsensor was given for the runs ``run_ids``."""
    with deployment.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT e.dag_id, e.task_id, t.hashcode FROM external_task e JOIN task_instance t "
                "ON t.dag_id = e.dag_id AND t.task_id = e.ti_task_id AND t.execution_date = e.ti_execution_date "
                "WHERE e.run_id IN :runs"
            ).bindparams(bindparam("runs", expanding=True)),
            {"runs": run_ids},
        ).fetchall()
    return {(d, t): h for d, t, h in rows}


def wait_ended(deployment: Deployment, run_ids: list[str], what: str, timeout: float = 600) -> None:
    ended = ("success", "failed", "skipped", "upstream_failed")

    def done() -> bool:
        states = [s for s, _, _ in tasks_of(deployment, run_ids).values()]
        return bool(states) and all(s in ended for s in states)

    deployment.stack.wait(what, done, timeout=timeout, step=0.5)


def wait_deferred(deployment: Deployment, run_ids: list[str], tasks: set[tuple[str, str]]) -> None:
    deployment.stack.wait(
        f"{len(tasks)} routed sensors deferred",
        lambda: {k for k, (s, _, _) in tasks_of(deployment, run_ids).items() if s == "deferred"} >= tasks,
        timeout=600,
        step=0.5,
    )


@pytest.mark.timeout(1200)
def test_airflows_own_sensors_run_through_smartsensor_and_share_checks(deployment: Deployment) -> None:
    ds = "2026-10-01"
    run_ids = deployment.stack.trigger_many([*TEAM_DAGS, "policy_tagged_off"], ds)
    routed = {(d, t) for d in TEAM_DAGS for t in ROUTED}
    wait_deferred(deployment, run_ids, routed)
    deployment.landing.land(ds)
    wait_ended(deployment, run_ids, f"every sensor of {ds} ended")
    seen = tasks_of(deployment, run_ids)
    assert {k: s for k, (s, _, _) in seen.items() if s != "success"} == {}, seen
    for key in routed:  # what the UI shows; 2.10 names a try that no worker ran by its serialized class
        names = {f"{_class_of(key[1])} via smartsensor"} | (
            {_class_of(key[1])} if deployment.stack.major < 3 else set()
        )
        assert seen[key][1] in names, (key, seen[key])
    for key in [("policy_team_0", "opted_out"), ("policy_tagged_off", "named")]:
        assert seen[key][1] == "NamedHivePartitionSensor", (key, seen[key])
    hashes = registered(deployment, run_ids)
    assert set(hashes) == routed  # the opted-out tasks and the range filter checked on their own
    (team_0_run,) = [
        r
        for (r,) in deployment.stack.rows(
            "SELECT run_id FROM dag_run WHERE dag_id = 'policy_team_0' AND run_id IN :runs",
            expanding=["runs"],
            runs=run_ids,
        )
    ]
    assert "runs as Airflow's own sensor" in _task_logs(deployment, "policy_team_0", team_0_run, "range")
    # Nine waits, two checks: by name and by metastore name are one check, by filter the other.
    assert len(set(hashes.values())) == 2, hashes
    assert hashes[("policy_team_0", "named")] == hashes[("policy_team_2", "metastore")]


@pytest.mark.timeout(1200)
def test_with_the_service_out_of_reach_the_tasks_still_succeed(deployment: Deployment) -> None:
    ds = "2026-10-02"
    (run_id,) = deployment.stack.trigger_many(["policy_valve"], ds)
    valve = {("policy_valve", t) for t in ("named", "filter", "drop_in")}
    wait_deferred(deployment, [run_id], valve)
    deployment.stop_serve()
    try:
        # A run that starts while the service is down: its tries ride out the grace while registering.
        (late_run,) = deployment.stack.trigger_many(["policy_valve"], "2026-10-12")
        for day in (ds, "2026-10-12"):
            for table in TABLES:  # no landing signal: nobody would hear it
                deployment.landing.metastore.land(table, day)
        for run in (run_id, late_run):  # one run at a time: tasks_of keys by (dag_id, task_id)
            wait_ended(deployment, [run], f"the valve's sensors of {run} ended (grace {GRACE} s)")
            seen = tasks_of(deployment, [run])
            assert {k: (s, tries) for k, (s, _, tries) in seen.items()} == {k: ("success", 1) for k in valve}, seen
            log = _task_logs(deployment, "policy_valve", run)
            assert log.count("checks on its own as Airflow's sensor would") >= len(valve), log[-3000:]
    finally:
        deployment.start_serve()
    # The service is back: a new try uses it again.
    ds = "2026-10-03"
    (run_id,) = deployment.stack.trigger_many(["policy_valve"], ds)
    wait_deferred(deployment, [run_id], valve)
    deployment.landing.land(ds)
    wait_ended(deployment, [run_id], f"the valve's sensors of {ds} ended")
    assert {s for s, _, _ in tasks_of(deployment, [run_id]).values()} == {"success"}
    assert set(registered(deployment, [run_id])) == valve


@pytest.mark.timeout(1200)
def test_with_the_policy_off_the_same_dags_run_as_plain_airflow(deployment: Deployment) -> None:
    restarted = datetime.now(timezone.utc)
    deployment.restart_airflow(AIRFLOW__SMARTSENSOR__USE_SMART_SENSOR="False")
    deployment.stack.wait(  # parsed again without the policy: the operator names are Airflow's again
        "the team DAGs serialized again",
        lambda: all(_serialized_since(deployment, d, restarted) for d in TEAM_DAGS),
        timeout=600,
    )
    ds = "2026-10-04"
    deployment.landing.land(ds)
    run_ids = deployment.stack.trigger_many(TEAM_DAGS, ds)
    wait_ended(deployment, run_ids, f"every sensor of {ds} ended")
    seen = tasks_of(deployment, run_ids)
    assert registered(deployment, run_ids) == {}
    assert {k: name for k, (_, name, _) in seen.items()} == {k: _class_of(k[1]) for k in seen}
    states = {k: s for k, (s, _, _) in seen.items()}
    # Airflow's own MetastorePartitionSensor reads the metastore's MySQL database, which this deployment lacks:
    # it fails as it would on any Airflow without that connection; the others find their partitions.
    assert states == {k: "failed" if k[1] == "metastore" else "success" for k in seen}, states


def _class_of(task_id: str) -> str:
    return {
        "filter": "HivePartitionSensor",
        "range": "HivePartitionSensor",
        "metastore": "MetastorePartitionSensor",
    }.get(task_id, "NamedHivePartitionSensor")


def _serialized_since(deployment: Deployment, dag_id: str, since: datetime) -> bool:
    rows = deployment.stack.rows("SELECT max(last_updated) FROM serialized_dag WHERE dag_id = :d", d=dag_id)
    when: Any = rows[0][0]
    return when is not None and (when if when.tzinfo else when.replace(tzinfo=timezone.utc)) > since


def _task_logs(deployment: Deployment, dag_id: str, run_id: str, task_id: str = "") -> str:
    """The logs of ``run_id``'s tasks (or of ``task_id``'s), every try, trigger logs included."""
    folder = deployment.stack.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
    if task_id:
        folder = folder / f"task_id={task_id}"
    return "\n".join(p.read_text(errors="replace") for p in sorted(folder.rglob("*.log*")) if p.is_file())
