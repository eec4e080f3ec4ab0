"""``POST /tasks?wait=S``: one request registers a try and, while it waits, holds the answer until it ends or ``S``
seconds pass, on SQLite and PostgreSQL; and the provider's registration, which asks for that hold once and, when a
held request is cut in transit, asks again without it (real API app through httpx's ASGI transport)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx
from fastapi.testclient import TestClient

from smartsensor.adapters.sql import tasks as task_sql
from smartsensor.domain.states import State
from smartsensor.roots.serve import create_app
from smartsensor_airflow.client import Endpoint, register_try_async
from smartsensor_airflow.wire import Registered, Registration
from tests.support.common import end_waiting, wait_until

TOKEN = "held-registration"
BASE = "http://smartsensor.test"
WAIT = 30  # the most a request may be held: an answer well before it came from a wake-up, not the clock


def body(task_id: str) -> dict[str, Any]:
    return {
        "key": {"dag_id": "etl", "task_id": task_id, "run_id": "r1", "map_index": -1, "try_number": 1},
        "sensor": {"class": "NamedHivePartitionSensor", "persist": {"partition_names": [f"db.t/ds={task_id}"]}},
    }


def end_once_registered(engine: Any, task_id: str, state: str, after: float) -> threading.Thread:
    """Once ``task_id`` is registered, ``after`` seconds later, mark it ``state`` as a worker's round would (guarded,
    with its notification)."""

    def run() -> None:
        wait_until(lambda: any(t.task_id == task_id for t in list_tasks(engine)), timeout=60)
        time.sleep(after)
        end_waiting(engine, state, {task_id})

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def list_tasks(engine: Any) -> list[Any]:
    with engine.connect() as conn:
        return task_sql.list_tasks(conn)


def test_a_held_registration_answers_when_its_try_ends(cfg, engine) -> None:
    with TestClient(create_app(cfg, engine, TOKEN), headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        ender = end_once_registered(engine, "a", State.SUCCESS, 1.0)
        started = time.monotonic()
        r = client.post(f"/api/v1/tasks?wait={WAIT}", json=body("a"))
        took = time.monotonic() - started
        ender.join()
    assert r.status_code == 200, r.text
    answer = r.json()
    assert (answer["state"], answer["reason"], answer["created"]) == (State.SUCCESS, "landed", True)
    assert 0.9 <= took < WAIT / 2, took  # held past the registration, answered on the end, not at the deadline


def test_a_registration_is_held_only_while_its_try_waits_and_at_most_its_wait(cfg, engine) -> None:
    with TestClient(create_app(cfg, engine, TOKEN), headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        started = time.monotonic()  # no wait: answered at once, as before
        assert client.post("/api/v1/tasks", json=body("a")).json()["state"] == State.SMART_PENDING
        assert time.monotonic() - started < WAIT / 2
        started = time.monotonic()  # nothing ends: answered when the wait is over, the try still waiting
        r = client.post("/api/v1/tasks?wait=1", json=body("a"))
        assert r.json()["state"] == State.SMART_PENDING and r.json()["created"] is False
        assert time.monotonic() - started >= 1
        assert client.post("/api/v1/tasks?wait=31", json=body("b")).status_code == 422  # over MAX_WAIT
        assert not any(t.task_id == "b" for t in list_tasks(engine))  # refused: nothing registered
        with engine.begin() as conn:
            (task,) = task_sql.list_tasks(conn)
            task_sql.set_state(conn, task.key, State.FAILED)
        started = time.monotonic()  # the same try again, already ended: answered at once with its end
        r = client.post(f"/api/v1/tasks?wait={WAIT}", json=body("a"))
        assert (r.json()["state"], r.json()["reason"]) == (State.FAILED, "error")
        assert time.monotonic() - started < WAIT / 2


class Recorded(httpx.AsyncBaseTransport):
    """The real app behind a record of each request's query; ``cut_held``: a proxy that closes a held request
    after ``cut_after`` seconds, as some cut long requests."""

    def __init__(self, app: Any, cut_held: bool = False, cut_after: float = 0.0) -> None:
        self.inner = httpx.ASGITransport(app=app)
        self.cut_held, self.cut_after = cut_held, cut_after
        self.sent: list[dict[str, str]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(dict(request.url.params))
        if self.cut_held and "wait" in request.url.params:
            await asyncio.sleep(self.cut_after)
            raise httpx.RemoteProtocolError("the proxy closed the held request", request=request)
        return await self.inner.handle_async_request(request)


def test_the_provider_registers_and_hears_the_end_in_one_request(cfg, engine) -> None:
    app = create_app(cfg, engine, TOKEN)
    transport = Recorded(app)

    async def scenario() -> Registered:
        async with app.router.lifespan_context(app):  # the watch that wakes held requests runs with the server
            async with httpx.AsyncClient(transport=transport) as client:
                return await register_try_async(
                    client, Endpoint(BASE, TOKEN), Registration.from_json(body("a")), wait=WAIT
                )

    ender = end_once_registered(engine, "a", State.SUCCESS, 0.5)
    started = time.monotonic()
    answer = asyncio.run(scenario())
    took = time.monotonic() - started
    ender.join()
    assert answer.state == State.SUCCESS and answer.reason == "landed"
    assert transport.sent == [{"wait": "30"}]  # registered and heard in one request
    assert took < WAIT / 2, took


def test_a_held_registration_cut_in_transit_is_asked_again_without_holding(cfg, engine) -> None:
    """The held attempt is cut after longer than the registration's patience: the patience counts from the cut, so
    the plain attempt after it still runs, and registers the try."""
    app = create_app(cfg, engine, TOKEN)
    transport = Recorded(app, cut_held=True, cut_after=1.5)

    async def scenario() -> Registered:
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=transport) as client:
                return await register_try_async(
                    client, Endpoint(BASE, TOKEN), Registration.from_json(body("a")), patience=1.0, wait=5
                )

    answer = asyncio.run(scenario())
    assert answer.state == State.SMART_PENDING and answer.created is True
    assert transport.sent == [{"wait": "5"}, {}]
    assert [t.task_id for t in list_tasks(engine)] == ["a"]


def test_a_hundred_held_registrations_wait_side_by_side_and_one_landing_answers_them_all(cfg, engine) -> None:
    """A triggerer starts dozens of triggers at once, each holding its registration: the holds wait on the event
    loop, not in the server's thread pool (40 threads), so a hundred are all registered and held together, and
    the round that ends their check answers every one at once."""
    app = create_app(cfg, engine, TOKEN)
    transport = Recorded(app)
    n = 100

    def same_check(i: int) -> Registration:
        return Registration.from_json(
            {
                **body(f"t{i}"),
                "sensor": {"class": "NamedHivePartitionSensor", "persist": {"partition_names": ["db.t/ds=1"]}},
            }
        )

    async def scenario() -> tuple[list[Registered], float]:
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=transport) as client:
                held = [
                    asyncio.ensure_future(register_try_async(client, Endpoint(BASE, TOKEN), same_check(i), wait=WAIT))
                    for i in range(n)
                ]
                deadline = time.monotonic() + 60
                while len(await asyncio.to_thread(list_tasks, engine)) < n:  # every try registered, its answer held
                    assert time.monotonic() < deadline, "the registrations were not all taken within 60 s"
                    await asyncio.sleep(0.05)
                assert not any(h.done() for h in held)
                landed = time.monotonic()
                await asyncio.to_thread(end_waiting, engine, State.SUCCESS)
                answers = await asyncio.wait_for(asyncio.gather(*held), timeout=60)
                return answers, time.monotonic() - landed

    answers, heard = asyncio.run(scenario())
    print(f"{n} held registrations answered {heard:.2f} s after their check ended")
    assert [a.state for a in answers] == [State.SUCCESS] * n
    assert len(transport.sent) == n  # one request each
    assert heard < WAIT / 2, heard
