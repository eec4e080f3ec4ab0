"""The provider's poller against a real `serve` process: a `serve` killed (kill -9) while it holds the poller's
request loses nothing. The poller just asks again, reaches the restarted server and hears the task's end."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from pathlib import Path

import httpx

from smartsensor.adapters.metastore_service_process import free_port
from smartsensor.adapters.sql import channels as channel_sql, tasks as task_sql
from smartsensor.adapters.sql.engine import make_engine
from smartsensor.domain.clock import as_utc
from smartsensor.domain.keys import TaskKey
from smartsensor.domain.states import State
from smartsensor_airflow.client import Endpoint
from smartsensor_airflow.poller import shared_poller
from smartsensor_airflow.wire import AskedTry, TryKey, TryState
from tests.support.common import wait_until
from tests.support.proc_helpers import CliProcess, cli_env, run_cli

TOKEN = "kill-token"
KEY = TryKey("d", "wait", "r", -1, 1)


def healthy(base: str) -> bool:
    try:
        return httpx.get(f"{base}/api/v1/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_serve_killed_while_holding_the_request_loses_nothing(tmp_path: Path, db_url: str) -> None:
    env = cli_env(tmp_path / "home", db_url, SMARTSENSOR__API__TOKEN=TOKEN)
    run_cli(["db", "init"], env, check=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = CliProcess(["serve", "--port", str(port)], env)
    replacement: CliProcess | None = None
    engine = make_engine(db_url)
    try:
        wait_until(lambda: healthy(base), timeout=60)
        r = httpx.post(
            f"{base}/api/v1/tasks",
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=30,
            json={
                "key": KEY.to_json(),
                "sensor": {"class": "NamedHivePartitionSensor", "persist": {"partition_names": ["db.t/ds=2026-11-22"]}},
            },
        )
        assert r.status_code == 200, r.text
        ref = r.json()["task_instance"]
        ti = TaskKey(ref["dag_id"], ref["task_id"], as_utc(datetime.fromisoformat(ref["execution_date"])))

        async def scenario() -> tuple[TryState, int]:
            nonlocal replacement

            async def lookup() -> Endpoint:
                return Endpoint(base, TOKEN)

            poller = shared_poller("kill", lookup)
            waiter = asyncio.ensure_future(poller.wait(AskedTry(KEY), 2.0))
            deadline = time.monotonic() + 60
            while poller.requests < 2 and time.monotonic() < deadline:  # the second one is held by the server
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)
            server.kill()  # mid-wait, with the request held
            replacement = CliProcess(["serve", "--port", str(port)], env)
            await asyncio.to_thread(wait_until, lambda: healthy(base), 60)
            assert not waiter.done()  # a dead server is no answer: the task keeps waiting

            def end() -> None:
                with engine.begin() as conn:
                    task_sql.set_state(conn, ti, State.SUCCESS, from_states=list(State.SMART_WAITING))
                    channel_sql.notify_ended(conn)

            await asyncio.to_thread(end)
            return await asyncio.wait_for(waiter, timeout=60), poller.requests

        answer, requests = asyncio.run(scenario())
        assert answer.state == "success", answer
        print(f"{requests} states requests, one server killed under a held request")
    finally:
        engine.dispose()
        server.stop()
        if replacement is not None:
            replacement.stop()
