"""The status page at ``/`` in-process (FastAPI's TestClient) on SQLite and PostgreSQL: its numbers are
`status --json`'s, it references nothing outside itself, its history comes from the sampler the app's lifespan
runs, and with a token it asks for it (bearer header, or the cookie the login form sets)."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from smartsensor.adapters.sql import history as history_sql, leases as lease_sql
from smartsensor.adapters.sql.registration_store import SqlRegistrationStore
from smartsensor.roots.serve import create_app
from smartsensor.service.history import sample_once
from smartsensor.service.status import collect_status
from smartsensor.standalone.registration import register
from tests.support.common import DAY, named, wait_until
from tests.support.page_dom import external_references, page_numbers, populate_page_db, status_numbers

TOKEN = "s3cret-token"


@pytest.fixture
def cfg_overrides() -> dict[str, str]:
    return {"smart_sensor__shards": "4"}


def client(cfg: Any, engine: Any, token: str | None = None) -> TestClient:
    return TestClient(create_app(cfg, engine, token), raise_server_exceptions=False)


def test_the_page_states_the_numbers_of_status_json(cfg, engine) -> None:
    populate_page_db(cfg, engine)
    html = client(cfg, engine).get("/").text
    expected = collect_status(engine, cfg).as_json()
    assert page_numbers(html) == status_numbers(expected)
    assert expected["stranded"] == 1 and expected["problems"] and len(expected["tasks_by_state"]) == 4
    assert any(lease["expired"] for lease in expected["leases"])
    assert expected["waiting"] == 10
    assert '<span class="num" data-metric="waiting" data-value=\'10\'>10</span>' in html


def test_the_page_references_nothing_outside_itself(cfg, engine) -> None:
    populate_page_db(cfg, engine)
    r = client(cfg, engine).get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert external_references(r.text) == []
    assert "<svg" in r.text and "<style>" in r.text and '<meta http-equiv="refresh" content="30">' in r.text
    assert external_references('<img src="https://cdn.example/x.png">') != []  # the check itself sees one


def test_tables_landings_and_history_are_on_the_page(cfg, engine) -> None:
    now = populate_page_db(cfg, engine)
    sample_once(engine, 60, 3600, now - timedelta(minutes=2))
    sample_once(engine, 60, 3600, now - timedelta(minutes=1))
    html = client(cfg, engine).get("/").text
    tables = dict(re.findall(r'data-table="([^"]+)" data-waiting="(\d+)"', html))
    assert tables == {"db0.t0": "1", "db0.t1": "1", "db0.t2": "2", "db1.t0": "2", "db1.t1": "2", "db1.t2": "2"}
    landings = re.findall(r'data-landing="([^"]+)"', html)
    assert sorted(landings) == sorted(f"d{i}.w{j}" for i in (0, 1) for j in range(3))
    assert "db0.t0/ds=2026-11-22" in html
    assert "2 sample(s) in the window" in html and html.count("<polygon") == 4  # one band per state


def test_an_empty_database_renders(cfg, engine) -> None:
    r = client(cfg, engine).get("/")
    assert r.status_code == 200 and "nothing waits" in r.text and "no worker has reported a round" in r.text
    assert page_numbers(r.text)["metrics"] == {
        "waiting": 0,
        "distinct_hashes": 0,
        "dedup_ratio": None,
        "stranded": 0,
        "zombies": 0,
        "problems": 0,
    }


def test_the_lifespan_samples_history_while_the_app_runs(cfg, engine) -> None:
    register(SqlRegistrationStore(engine), [("a", named("w", "db.t/ds=1"))], DAY, cfg)
    with TestClient(create_app(cfg, engine, None)):
        wait_until(lambda: bool(_samples(engine)), timeout=30)
    assert _samples(engine)[0][1:] == ("smart_pending", 1)


def _samples(engine: Any) -> list[tuple[datetime, str, int]]:
    with engine.connect() as conn:
        return history_sql.load_samples(conn, datetime(2000, 1, 1, tzinfo=timezone.utc))


def test_with_a_token_the_page_asks_for_it_and_the_login_sets_a_cookie(cfg, engine) -> None:
    api = client(cfg, engine, TOKEN)
    r = api.get("/", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/login"
    assert api.get("/", headers={"Authorization": "Bearer wrong"}, follow_redirects=False).status_code == 303
    form = api.get("/login")
    assert form.status_code == 200 and 'name="token"' in form.text and external_references(form.text) == []
    wrong = api.post("/login", data={"token": "nope"}, follow_redirects=False)
    assert wrong.status_code == 401 and "not the token" in wrong.text and "set-cookie" not in wrong.headers
    api.cookies.set("smartsensor_session", "nope")
    assert api.get("/", follow_redirects=False).status_code == 303
    api.cookies.clear()
    right = api.post("/login", data={"token": TOKEN}, follow_redirects=False)
    assert right.status_code == 303 and right.headers["location"] == "/"
    cookie = right.headers["set-cookie"]
    assert cookie.startswith("smartsensor_session=") and TOKEN not in cookie  # signed, never the token itself
    assert {"httponly", "samesite=strict", "path=/", "max-age=43200"} <= {p.strip().lower() for p in cookie.split(";")}
    page = api.get("/", follow_redirects=False)  # the client sends the cookie back
    assert page.status_code == 200 and 'data-metric="waiting"' in page.text
    bearer = client(cfg, engine, TOKEN).get("/", headers={"Authorization": f"Bearer {TOKEN}"})
    assert bearer.status_code == 200 and 'data-metric="waiting"' in bearer.text
    assert client(cfg, engine, TOKEN).get("/api/v1/status").status_code == 401  # the cookie is for the page only


def test_without_a_token_the_page_is_open_and_login_leads_to_it(cfg, engine) -> None:
    api = client(cfg, engine, None)
    assert api.get("/").status_code == 200
    r = api.get("/login", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/"
    assert api.post("/login", data={"token": "x"}, follow_redirects=False).status_code == 303


def test_hostile_values_are_escaped(cfg, engine) -> None:
    register(SqlRegistrationStore(engine), [("d", named("w", "db.t/ds=1"))], DAY, cfg)
    now = datetime.now(timezone.utc)
    evil = "<script>alert(1)</script>\"'"
    with engine.begin() as conn:
        lease_sql.ensure_leases(conn, cfg.resolved_shard_ranges)
        lease_sql.claim_lease(conn, 0, 0, evil, now, now + timedelta(hours=1))
        conn.execute(
            text("UPDATE task_instance SET state = 'success', end_date = :e, attr_dict = :a"),
            {"e": now, "a": json.dumps({"partition_names": [evil]})},
        )
    html = client(cfg, engine).get("/").text
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert page_numbers(html)["leases"][0]["owner"] == evil
