"""The provider's shared poller against the real API app (httpx's ASGI transport, SQLite and PostgreSQL): all the
triggers of one event loop (one triggerer process) cost one states request per interval, not one each."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Callable

import httpx
import pytest
from sqlalchemy import text

from smartsensor.adapters.sql import tasks as task_sql
from smartsensor.adapters.sql.engine import make_engine
from smartsensor.domain.states import State
from smartsensor.domain.timing import timeout_error
from smartsensor.roots.serve import create_app
from smartsensor_airflow.client import ApiError, Endpoint, is_timeout, outcome
from smartsensor_airflow.poller import ServiceUnreachable, shared_poller
from smartsensor_airflow.wire import AskedTry, Registration, TryKey, TryState
from tests.support.common import end_waiting

TOKEN = "poller-token"
BASE = "http://smartsensor.test"


def register_body(i: int, try_number: int = 1) -> dict[str, Any]:
    return {
        "key": key(i, try_number).to_json(),
        "sensor": {"class": "NamedHivePartitionSensor", "persist": {"partition_names": [f"db.t/ds={i % 5}"]}},
    }


def key(i: int, try_number: int = 1) -> TryKey:
    return TryKey("d", f"t{i}", "r", -1, try_number)


def asked(i: int, try_number: int = 1) -> AskedTry:
    return AskedTry(key(i, try_number))


def endpoint(token: str = TOKEN):
    async def lookup() -> Endpoint:
        return Endpoint(BASE, token)

    return lookup


def test_two_hundred_triggers_share_one_request_per_interval(cfg, engine) -> None:
    app = create_app(cfg, engine, TOKEN)
    transport = httpx.ASGITransport(app=app)
    n, interval = 200, 0.2

    async def scenario() -> tuple[list[TryState], int, int, float]:
        async with httpx.AsyncClient(
            transport=transport, base_url=BASE, headers={"Authorization": f"Bearer {TOKEN}"}
        ) as client:
            for i in range(n):
                assert (await client.post("/api/v1/tasks", json=register_body(i))).status_code == 200
        poller = shared_poller("conn-a", endpoint(), transport)
        assert shared_poller("conn-a", endpoint(), transport) is poller  # one per loop and connection
        waiters = [asyncio.ensure_future(poller.wait(asked(i), interval)) for i in range(n)]
        start = time.monotonic()
        while poller.requests < 4:
            await asyncio.sleep(0.05)
        assert not any(w.done() for w in waiters)
        elapsed = time.monotonic() - start
        before = poller.requests
        assert end_waiting(engine, State.SUCCESS) == n
        answers = await asyncio.wait_for(asyncio.gather(*waiters), timeout=60)
        return answers, before, poller.requests, elapsed

    answers, before, total, elapsed = asyncio.run(scenario())
    assert [a.state for a in answers] == ["success"] * n
    assert {a.key.task_id for a in answers} == {f"t{i}" for i in range(n)}
    assert len({a.hashcode for a in answers}) == 5  # 200 waits, 5 distinct checks
    # One request per interval for all 200 (the first after FIRST_POLL_DELAY); per-task polling would be 200 each.
    assert before <= elapsed / interval + 2, (before, elapsed)
    assert total - before <= 2
    served = app.state.requests.snapshot()[("POST", "/api/v1/tasks/states", "200")]
    assert served == total


def test_a_newer_try_ends_the_old_wait_as_superseded(cfg, engine) -> None:
    app = create_app(cfg, engine, TOKEN)
    transport = httpx.ASGITransport(app=app)

    async def scenario() -> TryState:
        async with httpx.AsyncClient(
            transport=transport, base_url=BASE, headers={"Authorization": f"Bearer {TOKEN}"}
        ) as client:
            await client.post("/api/v1/tasks", json=register_body(1, try_number=1))
            old = asyncio.ensure_future(shared_poller("c", endpoint(), transport).wait(asked(1, 1), 0.1))
            await asyncio.sleep(0.3)
            assert not old.done()
            assert (await client.post("/api/v1/tasks", json=register_body(1, try_number=2))).status_code == 200
            return await asyncio.wait_for(old, timeout=30)

    assert asyncio.run(scenario()).state == "superseded"


def test_the_poller_hands_the_task_the_reason_a_try_ended(cfg, engine) -> None:
    """A timeout is known by the service's ``reason``: a check error that reads like one is not a timeout."""
    app = create_app(cfg, engine, TOKEN)
    transport = httpx.ASGITransport(app=app)
    errors = {1: timeout_error("metastore unreachable"), 2: "timed out waiting for the lock"}

    async def scenario() -> list[TryState]:
        async with httpx.AsyncClient(
            transport=transport, base_url=BASE, headers={"Authorization": f"Bearer {TOKEN}"}
        ) as client:
            for i in errors:
                assert (await client.post("/api/v1/tasks", json=register_body(i))).status_code == 200
        with engine.begin() as conn:
            for t in task_sql.list_tasks(conn):
                ti = t.key
                error = errors[int(t.task_id[1:])]
                task_sql.set_state(conn, ti, State.FAILED, from_states=list(State.SMART_WAITING), error=error)
        poller = shared_poller("reasons", endpoint(), transport)
        return [await asyncio.wait_for(poller.wait(asked(i), 0.1), timeout=30) for i in errors]

    answers = asyncio.run(scenario())
    assert [(a.state, a.reason) for a in answers] == [("failed", "timeout"), ("failed", "error")]
    assert [is_timeout(outcome(a)) for a in answers] == [True, False]


def test_a_wrong_token_fails_the_waiters_with_the_reason(cfg, engine) -> None:
    transport = httpx.ASGITransport(app=create_app(cfg, engine, TOKEN))

    async def scenario() -> Exception:
        poller = shared_poller("bad", endpoint("wrong"), transport)
        try:
            await asyncio.wait_for(poller.wait(asked(1), 0.1), timeout=30)
        except ApiError as exc:
            return exc
        raise AssertionError("a rejected token must end the wait")

    error = asyncio.run(scenario())
    assert "bearer token" in str(error) and error.status == 401  # type: ignore[attr-defined]  # the provider's ApiError


def test_an_unreachable_service_keeps_the_triggers_waiting() -> None:
    async def scenario() -> tuple[bool, int]:
        async def nowhere() -> Endpoint:
            return Endpoint("http://127.0.0.1:9", None)  # discard port: connection refused

        poller = shared_poller("down", nowhere)
        waiter = asyncio.ensure_future(poller.wait(asked(1), 0.1))
        while poller.requests < 3:
            await asyncio.sleep(0.05)
        done = waiter.done()
        waiter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiter
        return done, poller.waiting

    done, waiting = asyncio.run(scenario())
    assert waiting == 0  # a cancelled trigger (moved to another triggerer, timed out) leaves the poller
    assert done is False  # a transport error is transient: the task keeps waiting (Airflow's timeout is the backstop)


def test_past_its_grace_an_unreachable_service_ends_only_the_waiters_that_asked_for_one() -> None:
    """The safety valve's trigger side: a waiter with a grace hears ServiceUnreachable once the outage has lasted
    that long (its task then checks on its own); one without keeps waiting."""

    async def scenario() -> tuple[str, float, bool]:
        async def nowhere() -> Endpoint:
            return Endpoint("http://127.0.0.1:9", None)  # discard port: connection refused

        poller = shared_poller("down-grace", nowhere)
        started = time.monotonic()
        patient = asyncio.ensure_future(poller.wait(asked(1), 0.1))
        valve = asyncio.ensure_future(poller.wait(asked(2), 0.1, grace=0.5))
        with contextlib.suppress(ServiceUnreachable):
            await asyncio.wait_for(valve, 30)
        waited = time.monotonic() - started
        error = valve.exception()
        still = not patient.done()
        patient.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await patient
        return str(error), waited, still

    error, waited, still_waiting = asyncio.run(scenario())
    assert "unreachable" in error and "grace 0.5 s" in error, error
    assert waited >= 0.5  # not before the grace
    assert still_waiting


class ProxyPage(httpx.AsyncBaseTransport):
    """A proxy in front of the service that answers 200 with a page of its own (not JSON) while ``broken()``."""

    def __init__(self, service: httpx.AsyncBaseTransport, broken: Callable[[], bool]) -> None:
        self.service = service
        self.broken = broken

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.broken():
            return httpx.Response(
                200, text="<html>Service is being upgraded</html>", headers={"content-type": "text/html"}
            )
        return await self.service.handle_async_request(request)


@pytest.mark.parametrize(
    "fault, said",
    [
        ("look-up fails", "looking up the connection failed"),
        ("body not JSON", "not its JSON answer"),
        ("re-look-up after a 401 fails", "looking up the connection failed"),
    ],
)
def test_a_failing_connection_look_up_or_a_body_not_json_is_an_outage_not_an_error(
    cfg, engine, fault: str, said: str
) -> None:
    """As the poller starts, Airflow 3's ``aget_connection`` may fail for a moment; a proxy may answer 200 with a
    page that is not JSON; the look-up again after a 401 (the token changed) may fail. Each is an outage, counted
    toward a waiter's grace as an unreachable service is (the safety valve), never an error that fails every
    waiting task; once it is over the waiters hear their answers."""
    service = httpx.ASGITransport(app=create_app(cfg, engine, TOKEN))
    out, look_ups = True, 0

    async def look_up() -> Endpoint:
        nonlocal look_ups
        look_ups += 1
        if fault == "re-look-up after a 401 fails" and look_ups == 1:
            return Endpoint(BASE, "the-old-token")
        if out and fault != "body not JSON":
            raise RuntimeError("the API server is restarting")
        return Endpoint(BASE, TOKEN)

    async def scenario() -> tuple[BaseException | None, bool, TryState]:
        nonlocal out
        async with httpx.AsyncClient(
            transport=service, base_url=BASE, headers={"Authorization": f"Bearer {TOKEN}"}
        ) as client:
            for i in (1, 2):
                assert (await client.post("/api/v1/tasks", json=register_body(i))).status_code == 200
        proxy = ProxyPage(service, lambda: out and fault == "body not JSON")
        poller = shared_poller(f"fault: {fault}", look_up, proxy)
        patient = asyncio.ensure_future(poller.wait(asked(1), 0.1))
        valve = asyncio.ensure_future(poller.wait(asked(2), 0.1, grace=0.3))
        with contextlib.suppress(ServiceUnreachable):
            await asyncio.wait_for(valve, 30)
        still_waiting = not patient.done()
        out = False
        await asyncio.to_thread(end_waiting, engine, State.SUCCESS)
        return valve.exception(), still_waiting, await asyncio.wait_for(patient, 30)

    error, still_waiting, answer = asyncio.run(scenario())
    assert isinstance(error, ServiceUnreachable) and said in str(error) and "grace 0.3 s" in str(error), error
    assert still_waiting  # a waiter without a grace keeps waiting through the outage
    assert answer.state == "success"


def test_a_service_without_its_database_counts_as_out_of_reach(cfg, tmp_path) -> None:
    """503 (the metadata database is unavailable) is an outage too, as a refused connection is."""
    down = make_engine(f"sqlite:///{tmp_path / 'home' / 'gone.db'}", home=tmp_path / "home")
    with down.begin() as conn:  # a database without our schema: every query fails, as test_api's outage
        conn.execute(text("CREATE TABLE unrelated (x INTEGER)"))
    transport = httpx.ASGITransport(app=create_app(cfg, down, TOKEN))

    async def scenario() -> tuple[str, float | None]:
        poller = shared_poller("db-down", endpoint(), transport)
        waiter = asyncio.ensure_future(poller.wait(asked(1), 0.1, grace=0.3))
        with contextlib.suppress(ServiceUnreachable):
            await asyncio.wait_for(waiter, 30)
        return str(waiter.exception()), poller.unreachable_since

    try:
        error, since = asyncio.run(scenario())
    finally:
        down.dispose()
    assert "metadata database unavailable" in error and "grace 0.3 s" in error, error
    assert since is not None


def test_a_held_request_brings_the_answer_at_once_with_no_more_requests_than_polling(cfg, engine) -> None:
    """Against a service that holds requests: a wait with a 10 s interval hears of its end within a second or so,
    and the requests stay at about one per interval (polling made one per interval too)."""
    app = create_app(cfg, engine, TOKEN)
    transport = httpx.ASGITransport(app=app)
    interval = 10.0

    async def scenario() -> tuple[TryState, float, int]:
        async with app.router.lifespan_context(app):  # the watch that wakes held requests runs with the server
            async with httpx.AsyncClient(
                transport=transport, base_url=BASE, headers={"Authorization": f"Bearer {TOKEN}"}
            ) as client:
                assert (await client.post("/api/v1/tasks", json=register_body(1))).status_code == 200
            poller = shared_poller("held", endpoint(), transport)
            waiter = asyncio.ensure_future(poller.wait(asked(1), interval))
            while poller.requests < 1:
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)  # the request is held now
            assert not waiter.done()
            ended = time.monotonic()
            await asyncio.to_thread(end_waiting, engine, State.SUCCESS)
            answer = await asyncio.wait_for(waiter, timeout=60)
            return answer, time.monotonic() - ended, poller.requests

    answer, heard_after, requests = asyncio.run(scenario())
    print(f"heard {heard_after:.2f} s after the task ended, {requests} states request(s), interval {interval:g} s")
    assert answer.state == "success"
    assert heard_after < interval / 2, heard_after  # woken by the end, not by the interval
    assert requests <= 2


def test_against_a_service_that_answers_at_once_it_polls_once_per_interval() -> None:
    """An older service ignores ``wait`` and answers at once: the budget keeps the old rhythm, one request per
    interval, never a busy loop."""
    sent: list[float] = []

    def older_service(request: httpx.Request) -> httpx.Response:
        sent.append(time.monotonic())
        keys = httpx.Response(200, content=request.content).json()["keys"]
        return httpx.Response(
            200, json={"states": [{**k, "state": "smart_running", "error": None, "hashcode": 1} for k in keys]}
        )

    interval = 0.3

    async def scenario() -> None:
        poller = shared_poller("older", endpoint(), httpx.MockTransport(older_service))
        waiter = asyncio.ensure_future(poller.wait(asked(1), interval))
        while len(sent) < 8:
            await asyncio.sleep(0.05)
        waiter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiter

    asyncio.run(scenario())
    gaps = [b - a for a, b in zip(sent, sent[1:], strict=False)]
    assert min(gaps) >= interval * 0.8, gaps  # paced by the interval, as the old poller was


def test_triggers_that_join_while_a_request_is_held_hear_a_landing_at_once(cfg, engine) -> None:
    """A triggerer starts its triggers a few at a time: those that join while the request for the others is held
    are not in it, but when a landing wakes it they are asked at once (not an interval later), for one more
    request."""
    app = create_app(cfg, engine, TOKEN)
    transport = httpx.ASGITransport(app=app)
    interval = 10.0

    async def scenario() -> tuple[float, list[TryState], int]:
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(
                transport=transport, base_url=BASE, headers={"Authorization": f"Bearer {TOKEN}"}
            ) as client:
                for i in (1, 6, 11):  # one partition (ds=1): one check
                    assert (await client.post("/api/v1/tasks", json=register_body(i))).status_code == 200
            poller = shared_poller("joins", endpoint(), transport)
            waiters = [asyncio.ensure_future(poller.wait(asked(1), interval))]
            while poller.requests < 1:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)  # the request for key 1 is held now
            waiters += [asyncio.ensure_future(poller.wait(asked(i), interval)) for i in (6, 11)]  # they join
            await asyncio.sleep(0.5)
            assert poller.requests == 1 and not any(w.done() for w in waiters)
            landed = time.monotonic()
            await asyncio.to_thread(end_waiting, engine, State.SUCCESS)
            answers = await asyncio.wait_for(asyncio.gather(*waiters), timeout=60)
            return time.monotonic() - landed, answers, poller.requests

    heard, answers, requests = asyncio.run(scenario())
    print(f"every waiter heard the landing in {heard:.2f} s, {requests} states requests, interval {interval:g} s")
    assert [a.state for a in answers] == ["success"] * 3
    assert heard < interval / 4, heard
    assert requests == 2  # the held one, woken; then one asking the two that joined


def test_tries_that_end_in_the_next_commit_are_heard_at_once_too(cfg, engine) -> None:
    """Two tables landing together end their checks in two rounds: the second end, a moment after the first woke
    the held request, is heard at once (the answer that ended tries gives its request back), not an interval
    later."""
    app = create_app(cfg, engine, TOKEN)
    transport = httpx.ASGITransport(app=app)
    interval = 10.0

    def end(task_id: str) -> None:
        assert end_waiting(engine, State.SUCCESS, {task_id}) == 1

    async def scenario() -> tuple[float, int]:
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(
                transport=transport, base_url=BASE, headers={"Authorization": f"Bearer {TOKEN}"}
            ) as client:
                for i in (1, 2):  # two partitions: two checks
                    assert (await client.post("/api/v1/tasks", json=register_body(i))).status_code == 200
            poller = shared_poller("two-commits", endpoint(), transport)
            first, second = (asyncio.ensure_future(poller.wait(asked(i), interval)) for i in (1, 2))
            while poller.requests < 1:
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)  # held now, with a budget of well under one request
            await asyncio.to_thread(end, "t1")
            await asyncio.wait_for(first, timeout=60)
            await asyncio.to_thread(end, "t2")
            ended = time.monotonic()
            await asyncio.wait_for(second, timeout=60)
            return time.monotonic() - ended, poller.requests

    heard, requests = asyncio.run(scenario())
    print(f"the second end heard in {heard:.2f} s, {requests} states requests, interval {interval:g} s")
    assert heard < interval / 4, heard
    assert requests <= 3


def end_check(engine: Any, hashcode: int) -> int:
    """A round's commit for one check: its waiting tasks marked success, the end notified."""
    from smartsensor.adapters.sql import channels as channel_sql

    with engine.begin() as conn:
        marked = sum(
            task_sql.set_state(conn, t.key, State.SUCCESS, from_states=list(State.SMART_WAITING))
            for t in task_sql.list_tasks(conn)
            if t.hashcode == hashcode
        )
        channel_sql.notify_ended(conn)
    return marked


def test_a_try_registered_again_with_another_check_ends_the_old_wait_as_superseded_not_with_its_verdict(
    cfg, engine
) -> None:
    """A run created again (or a reset Airflow) registers the same key and try for another partition, which lands:
    the trigger still waiting for the first check hears ``superseded``, never the other check's success."""
    from smartsensor_airflow.client import register_try_async

    app = create_app(cfg, engine, TOKEN)
    transport = httpx.ASGITransport(app=app)
    service = Endpoint(BASE, TOKEN)

    def check(day: str) -> Registration:
        return Registration(key(1), "NamedHivePartitionSensor", {"partition_names": [f"db.t/ds={day}"]}, {})

    async def scenario() -> tuple[Any, AskedTry, TryState]:
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as client:
            first = await register_try_async(client, service, check("1"))
            waits_on = first.asked(key(1))
            old = asyncio.ensure_future(shared_poller("c", endpoint(), transport).wait(waits_on, 0.1))
            other = await register_try_async(client, service, check("2"))
            assert other.created and other.hashcode != first.hashcode
            assert end_check(engine, other.hashcode) == 1  # the other check's partition landed
            return first, waits_on, await asyncio.wait_for(old, timeout=30)

    first, waits_on, heard = asyncio.run(scenario())
    assert waits_on.hashcode == first.hashcode
    assert (heard.state, heard.reason) == ("superseded", "superseded")
    assert "registered again with another check" in heard.error


def test_two_airflow_deployments_sharing_a_service_each_hear_their_own_check(cfg, engine) -> None:
    """The same key in two deployments (``scheduled__`` run ids are the same): each connection names its instance,
    and each trigger hears its own check's verdict, whatever the other's does."""
    from smartsensor_airflow.client import register_try_async

    app = create_app(cfg, engine, TOKEN)
    transport = httpx.ASGITransport(app=app)
    deployments = {name: Endpoint(BASE, TOKEN, name) for name in ("prod-a", "prod-b")}

    async def scenario() -> dict[str, tuple[str, str]]:
        waiting: dict[str, asyncio.Future[TryState]] = {}
        hashcodes: dict[str, int] = {}
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as client:
            for day, (name, service) in enumerate(deployments.items()):
                persist = {"partition_names": [f"db.t/ds={day}"]}
                registration = Registration(key(1), "NamedHivePartitionSensor", persist, {})
                answer = await register_try_async(client, service, registration)
                assert answer.created and answer.key.instance == name
                hashcodes[name] = answer.hashcode

                async def lookup(service: Endpoint = service) -> Endpoint:
                    return service

                poller = shared_poller(name, lookup, transport)
                waiting[name] = asyncio.ensure_future(poller.wait(answer.asked(key(1)), 0.1))
        assert end_check(engine, hashcodes["prod-a"]) == 1
        heard_a = await asyncio.wait_for(waiting["prod-a"], timeout=30)
        await asyncio.sleep(0.5)  # several intervals of prod-b's poller: still waiting
        assert not waiting["prod-b"].done()
        assert end_check(engine, hashcodes["prod-b"]) == 1
        heard_b = await asyncio.wait_for(waiting["prod-b"], timeout=30)
        return {"prod-a": (heard_a.state, heard_a.key.task_id), "prod-b": (heard_b.state, heard_b.key.task_id)}

    assert asyncio.run(scenario()) == {"prod-a": ("success", "t1"), "prod-b": ("success", "t1")}


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({}, ""),
        ({"instance": "prod-a"}, "prod-a"),
        ({"instance": "a b"}, ApiError),
        ({"instance": 3}, ApiError),
        ({"instance": "x" * 64}, "x" * 64),
        ({"instance": "x" * 65}, ApiError),  # the service's limit (wire.INSTANCE_MAX_LENGTH)
        ({"instance": "prod\n"}, ApiError),
    ],
)
def test_the_connection_names_its_deployment(extra: dict[str, Any], expected: Any) -> None:
    import json
    from types import SimpleNamespace

    from smartsensor_airflow.client import endpoint_from_connection

    conn = SimpleNamespace(host="http://svc:8794", password="t", extra=json.dumps(extra))
    if expected is ApiError:
        with pytest.raises(ApiError, match="invalid instance"):
            endpoint_from_connection(conn, "ss")
    else:
        assert endpoint_from_connection(conn, "ss").instance == expected
