"""The cluster policy's DAGs and what its production-like tests read (tests/airflow/test_production_like.py, which
deploys them beside the race's): DAG files written for Airflow's Hive provider, unchanged, run through smartsensor
because ``airflow_local_settings.py`` re-exports ``smartsensor_airflow.policy.task_policy`` and ``[smartsensor]
use_smart_sensor`` is on (``AIRFLOW__SMARTSENSOR__…`` variables)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import bindparam, text

from tests.support.airflow_deployment import Deployment

TEAMS = 3  # policy_team_0…
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
DAG_IDS = [*TEAM_DAGS, "policy_tagged_off", "policy_valve"]
ROUTED = ("named", "filter", "metastore")
# Airflow's environment for the policy: on, its triggers asking every 2 s, and the safety valve's grace.
AIRFLOW_ENV = {
    "AIRFLOW__SMARTSENSOR__USE_SMART_SENSOR": "True",
    "AIRFLOW__SMARTSENSOR__POLL_INTERVAL": "2",
    "AIRFLOW__SMARTSENSOR__FALLBACK_GRACE": str(GRACE),
}


def dag_source(db: str) -> str:
    return DAGS.replace("@TEAMS@", str(TEAMS)).replace("@DB@", db).replace("@GRACE@", str(GRACE))


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


def class_of(task_id: str) -> str:
    return {
        "filter": "HivePartitionSensor",
        "range": "HivePartitionSensor",
        "metastore": "MetastorePartitionSensor",
    }.get(task_id, "NamedHivePartitionSensor")


def serialized_since(deployment: Deployment, dag_id: str, since: datetime) -> bool:
    rows = deployment.stack.rows("SELECT max(last_updated) FROM serialized_dag WHERE dag_id = :d", d=dag_id)
    when: Any = rows[0][0]
    return when is not None and (when if when.tzinfo else when.replace(tzinfo=timezone.utc)) > since


def task_logs(deployment: Deployment, dag_id: str, run_id: str, task_id: str = "") -> str:
    """The logs of ``run_id``'s tasks (or of ``task_id``'s), every try, trigger logs included."""
    folder = deployment.stack.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
    if task_id:
        folder = folder / f"task_id={task_id}"
    return "\n".join(p.read_text(errors="replace") for p in sorted(folder.rglob("*.log*")) if p.is_file())
