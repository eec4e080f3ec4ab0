"""A user's DAG in real Airflow (2.10 and 3.x), one import line changed, against a real smartsensor: serve with
a token, a leased worker on a Hive metastore service, and a pipeline's commit landing the partition (over thrift,
then its landing signal; scripts/airflow_demo.sh's test runs the Spark pipeline itself).

`airflow dags test` runs the DAG's tasks for real, including each deferral: 2.10 runs the trigger object
inline; 3.x rebuilds it from its serialized classpath, as a triggerer does."""

from __future__ import annotations

import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from sqlalchemy import text

from scripts.airflow.stack import airflow_env, states_requests, task_end_times, task_states, version_of
from scripts.harness.hive_tables import Metastore
from smartsensor.adapters.metastore_service_process import free_port
from smartsensor.adapters.sql.engine import make_engine
from smartsensor.adapters.sql.signals import SqlLandingSignals
from smartsensor.config import Config
from smartsensor.service.signals import send_signal
from tests.support.airflow_databases import AirflowDatabases
from tests.support.airflow_helpers import airflow_venvs
from tests.support.common import ROOT, override_env, wait_until
from tests.support.proc_helpers import CliProcess, cli_env, run_cli

# One DAG through `airflow dags test` on the older versions in CI; on the newest, the production-like deployments
# (test_production_like.py, test_parked_end_to_end.py: scheduler, triggerer, LocalExecutor) run DAGs through
# smartsensor in CI, and this test's newest run is in the extended tier.
pytestmark = [pytest.mark.slow, pytest.mark.older_versions]

DS = "2026-11-22"
TOKEN = "e2e-token"

# What an Airflow user writes, with the smartsensor import instead of the Hive provider's.
DAG = """
from datetime import datetime

from airflow import DAG
try:
    from airflow.providers.standard.operators.empty import EmptyOperator
except ImportError:  # Airflow 2
    from airflow.operators.empty import EmptyOperator

from smartsensor_airflow.sensors import HivePartitionSensor, NamedHivePartitionSensor

with DAG("landing", start_date=datetime(2026, 11, 1), schedule=None, catchup=False):
    same = ["{db}.events/ds={{{{ ds }}}}"]
    a = NamedHivePartitionSensor(task_id="wait_a", partition_names=same, poke_interval=60, timeout=600)
    b = NamedHivePartitionSensor(task_id="wait_b", partition_names=same, poke_interval=60, timeout=600)
    f = HivePartitionSensor(task_id="wait_filter", table="events", schema="{db}", partition="ds='{{{{ ds }}}}'",
                            poke_interval=60, timeout=600)
    [a, b, f] >> EmptyOperator(task_id="downstream")
    never = ["{db}.events/ds=1999-01-01"]
    NamedHivePartitionSensor(task_id="never_soft", partition_names=never, poke_interval=1, timeout=3, soft_fail=True)
    NamedHivePartitionSensor(task_id="never_fail", partition_names=never, poke_interval=1, timeout=3)
"""


def smartsensor_env(service: Config, home: Path, db_url: str) -> dict[str, str]:
    return cli_env(
        home,
        db_url,
        PYTHONPATH=str(ROOT),
        SPARK_LOCAL_IP="127.0.0.1",
        **override_env(
            {
                "smart_sensor__catalog_backend": "thrift",  # as production_like deploys it: no JVM in the worker
                "spark__metastore_uris": service.get("spark", "metastore_uris"),
                "spark__warehouse_dir": service.get("spark", "warehouse_dir"),
                "spark__conf": "spark.driver.memory=512m",
                "api__token": TOKEN,
            }
        ),
    )


@pytest.mark.parametrize("venv", airflow_venvs(), ids=version_of)
def test_dag_waits_through_smartsensor(
    venv: Path, service: Config, pg_url: str, tmp_path: Path, airflow_databases: AirflowDatabases
) -> None:
    db = f"e2e_{version_of(venv).replace('.', '_')}_{tmp_path.name[-6:]}".lower()
    env = smartsensor_env(service, tmp_path / "smartsensor", pg_url)
    run_cli(["db", "init"], env, check=True)
    port = free_port()
    af_home = tmp_path / "airflow"
    af_env = airflow_env(venv, af_home, AIRFLOW_CONN_SMARTSENSOR_DEFAULT=f"http://:{TOKEN}@127.0.0.1:{port}")
    (af_home / "dags" / "landing.py").write_text(DAG.format(db=db))
    airflow_databases.new_sqlite(venv, af_home)

    engine = make_engine(pg_url)
    metastore = Metastore(service, db)
    metastore.create_tables(["events"])  # the table is there, its partition not yet
    server = CliProcess(["serve", "--port", str(port)], env)
    worker = CliProcess(["worker", "--interval", "0.5", "--json"], env)
    dags_test = subprocess.Popen(
        [str(venv / "bin" / "airflow"), "dags", "test", "landing", DS],
        env=af_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:

        def some_sensor_waits() -> bool:
            with engine.connect() as conn:
                return bool(conn.execute(text("SELECT 1 FROM external_task WHERE task_id LIKE 'wait%'")).first())

        wait_until(some_sensor_waits, timeout=240, step=0.5)
        requests_before, waiting_since = states_requests(f"http://127.0.0.1:{port}", TOKEN), time.monotonic()
        metastore.land("events", DS)
        landed = datetime.now(timezone.utc)  # committed: no task can succeed earlier
        send_signal(SqlLandingSignals(engine), f"{db}.events/ds={DS}")
        output, _ = dags_test.communicate(timeout=400)
        requests = states_requests(f"http://127.0.0.1:{port}", TOKEN) - requests_before
        per_minute = requests / ((time.monotonic() - waiting_since) / 60)
    finally:
        if dags_test.poll() is None:
            dags_test.kill()
        worker.stop()
        server.stop()
        metastore.close()
    states = task_states(af_home, "landing")
    ended = task_end_times(af_home, "landing")
    heard = sorted(
        max(0.0, (ended[t] - landed).total_seconds())
        for t in ("wait_a", "wait_b", "wait_filter")
        if ended.get(t) is not None
    )
    # A figure, not a timed assertion: landing (with its signal) → Airflow's task success, poke_interval 60 s
    print(
        f"\nAirflow {version_of(venv)}: landing → task success {', '.join(f'{h:.1f}' for h in heard)} s "
        f"(poke_interval 60 s, one triggering `airflow dags test`); states requests {requests:.0f} "
        f"({per_minute:.1f} per minute)"
    )
    assert states == {
        "wait_a": "success",
        "wait_b": "success",
        "wait_filter": "success",
        "downstream": "success",
        "never_soft": "skipped",
        "never_fail": "failed",
    }, output[-6000:]
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT e.task_id, t.state, t.hashcode, t.error FROM external_task e JOIN task_instance t "
                "ON t.dag_id = e.dag_id AND t.task_id = e.ti_task_id AND t.execution_date = e.ti_execution_date"
            )
        ).fetchall()
    engine.dispose()
    by_task = {r[0]: r for r in rows}
    assert by_task["wait_a"][2] == by_task["wait_b"][2]  # the two identical waits are one check: one hash
    assert by_task["wait_filter"][2] != by_task["wait_a"][2]
    assert {t: by_task[t][1] for t in by_task} == {
        "wait_a": "success",
        "wait_b": "success",
        "wait_filter": "success",
        "never_soft": "skipped",
        "never_fail": "failed",
    }
    assert "timed out" in (by_task["never_fail"][3] or ""), by_task["never_fail"]
    assert "AirflowSensorTimeout: smartsensor: timed out waiting" in output  # Airflow's sensor timeout: no retries
