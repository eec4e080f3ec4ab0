"""Hostile requests to the HTTP API in-process, on SQLite and PostgreSQL: never a 500, a schema that states what
the server takes, one log line for an unexpected error, and safe defaults for the docs and the page."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import time
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from smartsensor.roots.serve import create_app

TOKEN = "h0stile"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {"content-type": "application/json"}
KEY = {"dag_id": "etl", "task_id": "wait", "run_id": "r1", "try_number": 1}


def api(cfg: Any, engine: Any, raise_server_exceptions: bool = False) -> TestClient:
    return TestClient(create_app(cfg, engine, TOKEN), raise_server_exceptions=raise_server_exceptions, headers=AUTH)


def registration(**changes: Any) -> dict[str, Any]:
    body = {
        "key": dict(KEY),
        "sensor": {"class": "NamedHivePartitionSensor", "persist": {"partition_names": ["db.events/ds=2026-11-22"]}},
    }
    for path, value in changes.items():
        where: Any = body
        *parents, last = path.split("__")
        for p in parents:
            where = where[p]
        where[last] = value
    return body


@pytest.mark.parametrize("field", ["dag_id", "task_id", "run_id"])
def test_a_nul_or_control_character_in_a_key_is_a_422_on_both_endpoints(cfg, engine, field: str) -> None:
    client = api(cfg, engine)
    for bad in ("a\u0000", "a\nb", "  ", "\ud800"):  # sent as JSON escapes, as a hostile client would
        states = client.post("/api/v1/tasks/states", content=json.dumps({"keys": [{**KEY, field: bad}]}), headers=JSON)
        assert states.status_code == 422 and field in states.json()["error"], (bad, states.text)
        reg = client.post("/api/v1/tasks", content=json.dumps(registration(**{f"key__{field}": bad})), headers=JSON)
        assert reg.status_code == 422 and field in reg.json()["error"], (bad, reg.text)


@pytest.mark.parametrize("when", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"])
def test_a_logical_date_that_leaves_the_calendar_in_utc_is_a_422(cfg, engine, when: str) -> None:
    r = api(cfg, engine).post("/api/v1/tasks", json=registration(logical_date=when))
    assert r.status_code == 422 and "outside years 1-9999" in r.json()["error"], r.text


@pytest.mark.parametrize(
    "change,field",
    [
        ({"key__try_number": False}, "try_number"),
        ({"key__map_index": True}, "map_index"),
        ({"logical_date": 0}, "logical_date"),
        ({"logical_date": 1.5}, "logical_date"),
        ({"sensor__class": "SomethingElse"}, "class"),
        ({"sensor__class": "os.system"}, "class"),
    ],
)
def test_what_the_schema_does_not_allow_is_refused(cfg, engine, change: dict[str, Any], field: str) -> None:
    r = api(cfg, engine).post("/api/v1/tasks", json=registration(**change))
    assert r.status_code == 422 and field in r.json()["error"], r.text


def test_the_schema_declares_what_the_server_answers(cfg, engine) -> None:
    client = api(cfg, engine)
    doc = client.get("/api/v1/openapi.json").json()
    metrics = doc["paths"]["/metrics"]["get"]["responses"]
    assert list(metrics["200"]["content"]) == ["text/plain"], metrics
    assert client.get("/metrics").headers["content-type"].startswith("text/plain")
    for path, codes in (
        ("/api/v1/tasks", {"200", "400", "401", "409", "413", "422", "503"}),
        ("/api/v1/tasks/states", {"200", "400", "401", "413", "422", "503"}),
    ):
        responses = doc["paths"][path]["post"]["responses"]
        assert set(responses) == codes, (path, set(responses))
        assert responses["422"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody")
    assert set(doc["paths"]["/api/v1/health"]["get"]["responses"]) == {"200", "503"}
    sensor = doc["components"]["schemas"]["Sensor"]["properties"]["class"]
    assert sensor["enum"] == cfg.sensors_enabled
    key = doc["components"]["schemas"]["Key"]["properties"]
    assert key["try_number"]["type"] == "integer" and key["dag_id"]["pattern"]


def test_an_unexpected_error_is_one_log_line_with_a_request_id_and_no_second_traceback(
    cfg, engine, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import smartsensor.api.tasks as tasks_api

    def broken(*_: Any) -> None:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(tasks_api, "external_states", broken)
    caplog.set_level(logging.DEBUG, logger="smartsensor.api")
    # raise_server_exceptions: an exception that got past our handler (as it does to uvicorn, which logs it with
    # a traceback of its own) would be raised here
    r = api(cfg, engine, raise_server_exceptions=True).post("/api/v1/tasks/states", json={"keys": [KEY]})
    assert r.status_code == 500
    request_id = r.headers["x-request-id"]
    assert r.json() == {"error": f"internal error (RuntimeError); request id {request_id} in the server log"}
    errors = [rec for rec in caplog.records if rec.levelno >= logging.WARNING]
    assert len(errors) == 1 and errors[0].levelno == logging.ERROR and errors[0].exc_info is None
    assert request_id in errors[0].getMessage() and "boom" in errors[0].getMessage()
    assert "second line" not in errors[0].getMessage()
    assert any(rec.levelno == logging.DEBUG and rec.exc_info for rec in caplog.records)  # the traceback, at debug


def test_docs_need_the_token_and_load_nothing_from_elsewhere(cfg, engine) -> None:
    anonymous = TestClient(create_app(cfg, engine, TOKEN), raise_server_exceptions=False)
    assert anonymous.get("/api/v1/openapi.json").status_code == 401
    assert api(cfg, engine).get("/api/v1/openapi.json").status_code == 200
    assert anonymous.get("/api/v1/docs").status_code == 404  # no Swagger UI page (it would load a CDN's script)
    assert api(cfg, engine).get("/api/v1/docs").status_code == 404


def test_page_and_login_send_security_headers(cfg, engine) -> None:
    anonymous = TestClient(create_app(cfg, engine, TOKEN), raise_server_exceptions=False)
    for response in (
        anonymous.get("/login"),
        api(cfg, engine).get("/"),
        anonymous.post("/login", data={"token": "x"}),
        api(cfg, engine).get("/api/v1/status"),
    ):
        assert response.headers["x-frame-options"] == "DENY", response.url
        assert response.headers["x-content-type-options"] == "nosniff"
        policy = response.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy and "script-src" not in policy


def test_an_oversized_login_form_is_refused(cfg, engine) -> None:
    r = TestClient(create_app(cfg, engine, TOKEN)).post(
        "/login", content=b"token=" + b"x" * 10_000, headers={"content-type": "application/x-www-form-urlencoded"}
    )
    assert r.status_code == 413


def request_series(metrics_text: str) -> dict[str, float]:
    """``smartsensor_api_requests`` of a /metrics answer: each series' labels to its value."""
    found = re.findall(r"^smartsensor_api_requests(\{[^}]*\}) (\S+)$", metrics_text, re.MULTILINE)
    return {labels: float(value) for labels, value in found}


# The labels do not depend on the database: these run on SQLite alone.
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_made_up_methods_and_paths_leave_a_bounded_number_of_request_series(cfg, engine) -> None:
    async def scenario() -> str:
        transport = httpx.ASGITransport(app=create_app(cfg, engine, TOKEN))
        async with httpx.AsyncClient(transport=transport, base_url="http://smartsensor") as anonymous:
            for i in range(2000):  # a route the app serves, with a method no one serves: a 405
                assert (await anonymous.request(f"M{i:04d}X", "/api/v1/tasks/states")).status_code == 405
            for i in range(2000):  # a path of its own each, under the API, at the root, past a served route
                path = ("/api/v1/tasks/", "/", "/api/v1/status/")[i % 3] + f"r{i:04d}"
                assert (await anonymous.get(path)).status_code == 404
            return (await anonymous.get("/metrics", headers=AUTH)).text

    served = request_series(asyncio.run(scenario()))
    assert served == {
        '{code="405",method="other",route="/api/v1/tasks/states"}': 2000.0,
        '{code="404",method="GET",route="other"}': 2000.0,
    }, f"{len(served)} series"


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_metrics_read_while_other_threads_count_fail_nothing_and_lose_no_request(cfg, engine) -> None:
    app = create_app(cfg, engine, TOKEN)  # every TestClient request without a `with` runs on a loop of its own
    writers, each = 4, 250
    scrapes: list[tuple[int, str]] = []  # each scrape's status and body
    writing = [threading.Thread(target=made_up_requests, args=(app, n, each)) for n in range(writers)]
    for thread in writing:
        thread.start()
    scraper = TestClient(app, raise_server_exceptions=False, headers=AUTH)
    deadline = time.monotonic() + 120
    while any(thread.is_alive() for thread in writing) and time.monotonic() < deadline:
        scrape = scraper.get("/metrics")
        scrapes.append((scrape.status_code, scrape.text))
    for thread in writing:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not any(thread.is_alive() for thread in writing), "the writers did not finish within 120 s"
    last = scraper.get("/metrics")
    failed = [text for status, text in scrapes if status != 200]
    assert failed == [], f"{len(failed)} of {len(scrapes)} scrapes failed, the first: {failed[0]}"
    # the last scrape counts every answer that started before its own: the writers' and the earlier scrapes
    assert sum(request_series(last.text).values()) == writers * each + len(scrapes)


def made_up_requests(app: Any, writer: int, count: int) -> None:
    """``count`` unauthenticated requests, each with a method and a path of its own."""
    client = TestClient(app, raise_server_exceptions=False)
    for i in range(count):
        client.request(f"W{writer}M{i:04d}", f"/w{writer}/{i}")
