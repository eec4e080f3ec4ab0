"""A states request asked to wait is held until one of its tries ends, on SQLite (PRAGMA data_version) and
PostgreSQL (NOTIFY from the writer's commit), and answers at once when one already has."""

from __future__ import annotations

import threading
import time
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import text

from smartsensor.adapters.sql import channels as channel_sql, tasks as task_sql
from smartsensor.adapters.sql.engine import init_db, make_engine
from smartsensor.adapters.sql.external import SqlExternalTryStore
from smartsensor.domain.keys import ExternalKey, TaskKey
from smartsensor.domain.states import State
from smartsensor.external.registration import register_external
from smartsensor.roots.serve import create_app
from tests.support.common import end_waiting, make_cfg, wait_until

TOKEN = "lp"
WAIT = 30  # the most a request may be held: an answer well before it came from a wake-up, not the clock


def sampled(engine: Any) -> bool:
    """Whether ``serve``'s history sampler has written its first sample (its start-up tick)."""
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM state_sample")).scalar_one() > 0


def registered(engine: Any, cfg: Any, task_id: str) -> tuple[dict[str, Any], TaskKey]:
    key = ExternalKey("etl", task_id, "r1")
    done = register_external(
        SqlExternalTryStore(engine),
        cfg,
        key,
        1,
        "NamedHivePartitionSensor",
        {"partition_names": [f"db.t/ds={task_id}"]},
        {"timeout": 600},
    )
    return {"dag_id": "etl", "task_id": task_id, "run_id": "r1", "map_index": -1, "try_number": 1}, done.task_instance


def end_later(engine: Any, ti: TaskKey, delay: float) -> threading.Thread:
    """Mark ``ti`` success from another connection after ``delay`` s, as a worker's round would (with its NOTIFY)."""

    def run() -> None:
        time.sleep(delay)
        end_waiting(engine, State.SUCCESS, {ti.task_id})

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_held_request_answers_when_a_try_ends(cfg, engine) -> None:
    a, ti_a = registered(engine, cfg, "a")
    b, _ = registered(engine, cfg, "b")
    with TestClient(create_app(cfg, engine, TOKEN), headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        ender = end_later(engine, ti_a, 1.0)
        started = time.monotonic()
        r = client.post(f"/api/v1/tasks/states?wait={WAIT}", json={"keys": [a, b]})
        took = time.monotonic() - started
        ender.join()
    assert r.status_code == 200 and r.headers["x-smartsensor-long-poll"] == "30"
    assert [s["state"] for s in r.json()["states"]] == [State.SUCCESS, State.SMART_PENDING]
    assert 0.9 <= took < WAIT / 2, took  # held past the start, answered on the change, not at the deadline
    print(f"held request answered {took - 1.0:.2f} s after the try ended")


def test_a_request_answers_at_once_when_a_try_has_already_ended_or_is_unknown(cfg, engine) -> None:
    a, ti_a = registered(engine, cfg, "a")
    with engine.begin() as conn:
        task_sql.set_state(conn, ti_a, State.FAILED)
    unknown = {**a, "task_id": "never", "try_number": 1}
    with TestClient(create_app(cfg, engine, TOKEN), headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        for keys, state in (([a], State.FAILED), ([unknown], "unknown")):
            started = time.monotonic()
            r = client.post(f"/api/v1/tasks/states?wait={WAIT}", json={"keys": keys})
            assert r.json()["states"][0]["state"] == state and time.monotonic() - started < WAIT / 2


def test_without_a_change_the_request_is_answered_when_its_wait_is_over(cfg, engine) -> None:
    a, _ = registered(engine, cfg, "a")
    with TestClient(create_app(cfg, engine, TOKEN), headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        started = time.monotonic()
        r = client.post("/api/v1/tasks/states?wait=1", json={"keys": [a]})
        assert r.json()["states"][0]["state"] == State.SMART_PENDING and time.monotonic() - started >= 1
        assert client.post("/api/v1/tasks/states?wait=31", json={"keys": [a]}).status_code == 422  # over MAX_WAIT
        started = time.monotonic()  # no keys: nothing to wait on, answered at once
        assert client.post(f"/api/v1/tasks/states?wait={WAIT}", json={"keys": []}).json() == {"states": []}
        assert time.monotonic() - started < WAIT / 2
        started = time.monotonic()  # no wait: today's polling answer, at once
        assert client.post("/api/v1/tasks/states", json={"keys": [a]}).json()["states"][0]["state"] == "smart_pending"


def test_on_postgres_only_the_requests_waiting_on_an_ended_hashcode_read_again(tmp_path, pg_url) -> None:
    """The round's NOTIFY names the hashcodes that ended: a held request on other checks is not woken (it runs
    no statement), the one waiting on them is."""
    # The page's history sampler writes on the same engine: once at start (waited for below), then at each
    # history_interval boundary; a day apart, none falls inside the counted window.
    cfg = make_cfg(tmp_path / "home", pg_url, api__history_interval="86400")
    engine, notifier = make_engine(pg_url), make_engine(pg_url)
    init_db(engine)
    try:
        a, ti_a = registered(engine, cfg, "a")
        hash_a = task_hashcode(engine, ti_a)
        with TestClient(create_app(cfg, engine, TOKEN), headers={"Authorization": f"Bearer {TOKEN}"}) as client:

            def unrelated_then_a() -> None:
                wait_until(lambda: sampled(notifier), timeout=30)
                time.sleep(1.0)
                before = engine.statement_counter.count  # type: ignore[attr-defined]  # set by make_engine
                with notifier.begin() as conn:
                    channel_sql.notify_ended(conn, [hash_a + 1])  # another check ended
                time.sleep(1.5)
                reads.append(engine.statement_counter.count - before)  # type: ignore[attr-defined]  # set by make_engine
                with notifier.begin() as conn:
                    task_sql.set_state(conn, ti_a, State.SUCCESS, from_states=list(State.SMART_WAITING))
                    channel_sql.notify_ended(conn, [hash_a])

            reads: list[int] = []
            thread = threading.Thread(target=unrelated_then_a)
            thread.start()
            started = time.monotonic()
            r = client.post(f"/api/v1/tasks/states?wait={WAIT}", json={"keys": [a]})
            took = time.monotonic() - started
            thread.join()
        assert r.json()["states"][0]["state"] == State.SUCCESS and took < WAIT / 2, (r.text, took)
        assert reads == [0], reads  # the unrelated end did not make the held request read its key again
    finally:
        engine.dispose()
        notifier.dispose()


def task_hashcode(engine: Any, ti: TaskKey) -> int:
    with engine.connect() as conn:
        return task_sql.get_task(conn, *ti).hashcode
