"""The HTTP API in-process (FastAPI's TestClient) on SQLite and PostgreSQL: health, status equal to
`status --json`, metrics, the bearer token, and bad requests answered with a 4xx JSON line."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from smartsensor.adapters.sql.engine import make_engine
from smartsensor.adapters.sql.registration_store import SqlRegistrationStore
from smartsensor.roots.serve import create_app
from smartsensor.service.status import collect_status
from smartsensor.standalone.registration import register
from tests.support.common import DAY, named, new_db

TOKEN = "s3cret-token"


def client(cfg: Any, engine: Any, token: str | None = TOKEN) -> TestClient:
    return TestClient(create_app(cfg, engine, token), raise_server_exceptions=False)


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_health_needs_no_token_and_names_the_schema(cfg, engine) -> None:
    r = client(cfg, engine).get("/api/v1/health")
    assert r.status_code == 200 and r.json()["status"] == "ok" and r.json()["schema_revision"]


def test_status_equals_what_the_cli_prints(cfg, engine) -> None:
    register(
        SqlRegistrationStore(engine),
        [("a", named("w", "db.t/ds=1")), ("b", named("w", "db.t/ds=1")), ("c", named("w", "db.t/ds=2"))],
        DAY,
        cfg,
    )
    body = client(cfg, engine).get("/api/v1/status", headers=auth()).json()
    expected = collect_status(engine, cfg).as_json()
    for volatile in ("leases", "lease_workers", "workers", "zombies"):  # ages move with the clock
        body.pop(volatile), expected.pop(volatile)
    assert body == expected
    assert body["tasks_by_state"] == {"smart_pending": 3} and body["distinct_hashes"] == 2


def test_metrics_are_prometheus_text_of_the_same_numbers(cfg, engine) -> None:
    register(SqlRegistrationStore(engine), [(f"d{i}", named("w", "db.t/ds=1")) for i in range(4)], DAY, cfg)
    r = client(cfg, engine).get("/metrics", headers=auth())
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert 'smartsensor_tasks{state="smart_pending"} 4.0' in r.text
    assert "smartsensor_dedup_ratio 4.0" in r.text


@pytest.mark.parametrize("max_age,reads", [("0", 3), ("60", 1)])
def test_status_metrics_and_page_share_one_read_for_status_max_age(tmp_path, db_url, max_age, reads) -> None:
    cfg, engine = new_db(tmp_path, db_url, api__status_max_age=max_age)
    try:
        register(SqlRegistrationStore(engine), [(f"d{i}", named("w", "db.t/ds=1")) for i in range(2)], DAY, cfg)
        app = create_app(cfg, engine, TOKEN)
        with TestClient(app, raise_server_exceptions=False) as c:
            for path in ("/api/v1/status", "/metrics", "/"):
                assert c.get(path, headers=auth()).status_code == 200
            assert app.state.status_snapshot.computed == reads
            register(SqlRegistrationStore(engine), [("late", named("w", "db.t/ds=2"))], DAY, cfg)
            waiting = c.get("/api/v1/status", headers=auth()).json()["waiting"]
            assert waiting == (3 if max_age == "0" else 2)  # within the max age: the shared snapshot
    finally:
        engine.dispose()


@pytest.mark.parametrize("path", ["/api/v1/status", "/metrics"])
@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}, {"Authorization": TOKEN}]
)
def test_everything_but_health_needs_the_token(cfg, engine, path: str, headers: dict[str, str]) -> None:
    r = client(cfg, engine).get(path, headers=headers)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert "bearer token" in r.json()["error"]


def test_without_a_configured_token_no_auth_is_asked(cfg, engine) -> None:
    assert client(cfg, engine, token=None).get("/api/v1/status").status_code == 200


@pytest.mark.parametrize(
    "method, path",
    [
        ("GET", "/api/v1/nope"),
        ("POST", "/api/v1/status"),
        ("GET", "/api/v1/status/../../etc/passwd"),
        ("GET", "/%00"),
        ("DELETE", "/metrics"),
    ],
)
def test_unknown_routes_and_methods_are_a_json_4xx(cfg, engine, method: str, path: str) -> None:
    r = client(cfg, engine).request(method, path, headers=auth())
    assert 400 <= r.status_code < 500 and set(r.json()) == {"error"}


def test_a_database_outage_is_503_with_the_reason_not_a_traceback(cfg, engine, tmp_path) -> None:
    down = make_engine(f"sqlite:///{tmp_path / 'home' / 'gone.db'}", home=tmp_path / "home")
    with down.begin() as conn:  # a database without our schema: every query fails
        conn.execute(text("CREATE TABLE unrelated (x INTEGER)"))
    api = client(cfg, down)
    health = api.get("/api/v1/health")
    assert health.status_code == 503 and health.json()["status"] == "unavailable"
    status = api.get("/api/v1/status", headers=auth())
    assert status.status_code == 503 and status.json()["error"].startswith("metadata database unavailable")
    assert "Traceback" not in status.text
    down.dispose()


def test_an_oversized_body_is_refused_before_it_is_read(cfg, engine) -> None:
    r = client(cfg, engine).post("/api/v1/tasks/states", headers=auth(), content=b"x" * (4 * 1024 * 1024 + 1))
    assert r.status_code == 413 and "request body over" in r.json()["error"]


def test_metrics_count_this_servers_requests_by_route(cfg, engine) -> None:
    c = client(cfg, engine)
    for _ in range(3):
        c.post("/api/v1/tasks/states", headers=auth(), json={"keys": []})
    c.get("/api/v1/status")  # 401
    c.get("/no/such/page")
    text_ = c.get("/metrics", headers=auth()).text
    assert 'smartsensor_api_requests{code="200",method="POST",route="/api/v1/tasks/states"} 3.0' in text_
    assert 'smartsensor_api_requests{code="401",method="GET",route="/api/v1/status"} 1.0' in text_
    assert 'smartsensor_api_requests{code="404",method="GET",route="other"} 1.0' in text_
