"""A real Airflow triggerer with many deferred smartsensor sensors: the shared poller asks the service for all of
them at once, one states request per poll interval (not one per sensor), and every task ends right: success once
the file lands, skipped or failed by the service's timeout for the two that wait on a file that never comes.

Airflow 3.x runs its api-server, dag-processor, scheduler and triggerer (LocalExecutor); 2.10 its scheduler and
triggerer. Both on SQLite: 2.10 then runs one task at a time (SequentialExecutor, ~2 s per task process), so it
gets fewer sensors than 3.x, whose LocalExecutor runs several at once.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from sqlalchemy import text

from scripts.airflow.stack import AirflowStack, Processes, states_requests, version_of
from smartsensor.adapters.metastore_service_process import free_port
from smartsensor.adapters.sql.engine import make_engine
from tests.support.airflow_databases import AirflowDatabases
from tests.support.airflow_helpers import airflow_venvs
from tests.support.common import ROOT
from tests.support.proc_helpers import cli_env, run_cli

pytestmark = pytest.mark.slow

TOKEN = "triggerer-token"
SENSORS = {"2": 10, "3": 30}  # deferred sensors waiting on the file, by Airflow major version
POLL = 2.0  # the sensors' poke_interval, so the triggers' poll interval
TIMEOUT = 45  # of the two sensors whose file never lands (from their registration)
WINDOW = 5 * POLL  # the measuring window, while every sensor waits and none ends
HOLD = 2.0  # seconds a start trigger's registration may be held for its answer (the default execute_wait)
BURST = 3  # requests a poller may send back to back after early answers (a long-polling service)

DAG = """
from datetime import datetime

from airflow import DAG
try:
    from airflow.providers.standard.operators.empty import EmptyOperator
except ImportError:  # Airflow 2
    from airflow.operators.empty import EmptyOperator

from smartsensor_airflow.sensors import SuccessFileSensor

with DAG("fanout", start_date=datetime(2026, 11, 1), schedule=None, catchup=False):
    waits = [SuccessFileSensor(task_id=f"wait_{{i}}", path="{path}", poke_interval={poll}, timeout=900)
             for i in range({n})]
    waits >> EmptyOperator(task_id="downstream")
    SuccessFileSensor(task_id="never_soft", path="{never}", poke_interval={poll}, timeout={timeout}, soft_fail=True)
    SuccessFileSensor(task_id="never_fail", path="{never}", poke_interval={poll}, timeout={timeout})
"""


@pytest.mark.extended  # a whole triggerer for minutes; the poller's one request: test_provider_poller.py
@pytest.mark.parametrize("venv", airflow_venvs(), ids=version_of)
def test_one_states_request_per_interval_for_a_whole_triggerer(
    venv: Path, tmp_path: Path, pg_url: str, processes: Processes, airflow_databases: AirflowDatabases
) -> None:
    sensors = SENSORS[version_of(venv).split(".")[0]]
    env = cli_env(tmp_path / "smartsensor", pg_url, PYTHONPATH=str(ROOT), SMARTSENSOR__API__TOKEN=TOKEN)
    run_cli(["db", "init"], env, check=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    landed, never = tmp_path / "landing" / "_SUCCESS", tmp_path / "never" / "_SUCCESS"
    stack = AirflowStack(
        venv,
        tmp_path / "airflow",
        processes,
        parallelism=4,
        AIRFLOW_CONN_SMARTSENSOR_DEFAULT=f"http://:{TOKEN}@127.0.0.1:{port}",
    )
    (stack.dags / "fanout.py").write_text(
        DAG.format(path=f"file://{landed}", never=f"file://{never}", poll=POLL, n=sensors, timeout=TIMEOUT)
    )
    smartsensor = [sys.executable, "-m", "smartsensor.cli"]
    try:
        airflow_databases.new_sqlite(venv, stack.home)
        processes.start("serve", [*smartsensor, "serve", "--port", str(port)], env)
        processes.start("worker", [*smartsensor, "worker", "--interval", "0.5", "--json"], env)
        stack.start()
        stack.wait_healthy(timeout=300)
        stack.wait_parsed(["fanout"], timeout=300)
        stack.trigger("fanout", "2026-11-22")
        started = time.monotonic()

        def waiting() -> int:
            return stack.rows("SELECT count(*) FROM task_instance WHERE state = 'deferred' AND task_id LIKE 'wait%'")[
                0
            ][0]

        stack.wait(f"{sensors} sensors deferred", lambda: waiting() == sensors, timeout=600)
        to_defer = time.monotonic() - started
        triggers = stack.rows("SELECT count(*) FROM trigger")[0][0]
        stack.wait("the triggerer polling", lambda: states_requests(base, TOKEN) > 0, timeout=60, step=0.5)
        # A trigger that joins is asked about at once (a request of its own): measure once every trigger has been
        # taken by the triggerer and the poller has asked a few times since, so that none is still joining.
        stack.wait(
            "the two sensors that never land deferred (or ended)",
            lambda: (
                stack.rows(
                    "SELECT count(*) FROM task_instance WHERE task_id LIKE 'never%' "
                    "AND state IN ('deferred', 'skipped', 'failed')"
                )[0][0]
                == 2
            ),
            timeout=600,
        )
        # Taken by the triggerer is not started: a start trigger renders its check and registers its try, the
        # registration held for up to HOLD (smartsensor_execute_wait), before it joins the shared poller, and a busy
        # triggerer starts them a few at a time. Triggers that join late make the poller ask again (a join gives its
        # request back), so waiting for 3 more requests once every trigger was taken could count joins in the window
        # (12 in 10 s once, bound 8, when the registration's hold was a states request of its own). The window opens
        # once every try is registered, the newest HOLD + 1 s ago, and the poller has asked twice since.
        engine = make_engine(pg_url)
        try:

            def registered_and_held() -> bool:
                with engine.connect() as conn:
                    count, newest = conn.execute(
                        text("SELECT count(*), max(registered_at) FROM external_task WHERE dag_id = 'fanout'")
                    ).one()
                now = datetime.now(timezone.utc).replace(tzinfo=None)  # the column holds naive UTC
                return bool(count == sensors + 2 and (now - newest).total_seconds() > HOLD + 1)

            stack.wait(f"every try registered ({sensors + 2}) and its hold over", registered_and_held, 300, 0.5)
        finally:
            engine.dispose()
        settled = states_requests(base, TOKEN) + 2
        stack.wait("the poller asking with every trigger", lambda: states_requests(base, TOKEN) >= settled, 120, 0.5)
        before, start = states_requests(base, TOKEN), time.monotonic()
        time.sleep(WINDOW)  # a measuring window: nothing is asserted until it is over
        during, window = states_requests(base, TOKEN) - before, time.monotonic() - start
        still_waiting = waiting()
        landed.parent.mkdir(parents=True)
        landed.write_text("")
        landed_at = time.monotonic()
        stack.wait("every trigger fired (Airflow heard of the landing)", lambda: waiting() == 0, timeout=600, step=0.1)
        to_heard = time.monotonic() - landed_at
        stack.wait(
            "every sensor on the landed file succeeded",
            lambda: (
                stack.rows("SELECT count(*) FROM task_instance WHERE state = 'success' AND task_id LIKE 'wait%'")[0][0]
                == sensors
            ),
            timeout=600,
        )
        to_success = time.monotonic() - landed_at
        stack.wait("the DAG run ended", lambda: stack.run_states().get("fanout") in ("success", "failed"), timeout=600)
        states = {task: state for (_, task), state in stack.task_states(["fanout"]).items()}
    finally:
        stack.stop()
    print(
        f"\nAirflow {stack.version}: {sensors} sensors deferred in {to_defer:.0f} s ({triggers} trigger rows, one "
        f"triggerer); {during:.0f} states requests in {window:.1f} s with a {POLL:g} s poll interval (per-sensor "
        f"polling: ~{sensors * window / POLL:.0f}); landed -> every trigger fired in {to_heard:.1f} s, all {sensors} "
        f"succeeded in {to_success:.1f} s (no landing signal: the worker's round finds the file)"
    )
    assert triggers >= sensors  # one trigger row per deferred task (Airflow does not share them)...
    assert still_waiting == sensors  # (the window measured waiting sensors only)
    # ...but one request per poll interval for all of them (on average; a long-polling service may answer a held
    # request early, and the poller then sends up to BURST back to back), not one per sensor.
    assert 1 <= during <= window / POLL + BURST, (during, window)
    assert states == {
        **{f"wait_{i}": "success" for i in range(sensors)},
        "downstream": "success",
        "never_soft": "skipped",
        "never_fail": "failed",
    }, states
