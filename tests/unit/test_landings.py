"""The landing publisher's pure rules (``domain.landings``) and its Airflow client's reading of answers and failures
(``adapters.airflow_assets``, over httpx's in-process transport): no database, no Airflow."""

from __future__ import annotations

import http.server
import json
import random
import re
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest

from smartsensor.adapters.airflow_assets import AirflowApiError, AirflowAssets
from smartsensor.config import ConfigError
from smartsensor.domain.landings import (
    CLOCK_SKEW,
    MAX_KEY_LENGTH,
    backoff,
    key_problem,
    lookup_window,
    outcome_of_status,
    parse_hive_uri,
    partition_key,
    table_shardcode,
)
from tests.support.common import make_cfg


def test_partition_keys_are_the_unescaped_values_in_column_order() -> None:
    assert partition_key("ds=2026-11-27") == "2026-11-27"
    assert partition_key("ds=2026-11-27/hr=03") == "2026-11-27|03"
    assert partition_key("ds=10%3A00/region=eu%2Fwest") == "10:00|eu/west"
    with pytest.raises(ValueError):
        partition_key("no-equals-sign")


def test_keys_airflow_refuses_are_named() -> None:
    assert key_problem("2026-11-27") is None
    assert key_problem(" ") == "the partition key is blank"
    assert key_problem("x" * MAX_KEY_LENGTH) is None
    problem = key_problem("x" * (MAX_KEY_LENGTH + 1))
    assert problem is not None and "251 characters" in problem


def test_hive_uris_name_a_host_a_database_and_a_table() -> None:
    assert parse_hive_uri("hive://Meta:10000/Sales/Orders") == ("meta:10000", "sales", "orders")
    for other in (
        "s3://bucket/key",
        "hive:///db/t",
        "hive://h:1/db",
        "hive://h:1/db/t/extra",
        "hive://h:1/db/t?x=1",
        "hive://h:1//t",
    ):
        assert parse_hive_uri(other) is None, other


def test_a_tables_shardcode_is_stable_and_in_range() -> None:
    codes = {table_shardcode("db", f"t{i}", 10000) for i in range(200)}
    assert all(0 <= c < 10000 for c in codes) and len(codes) > 150
    assert table_shardcode("db", "t1", 10000) == table_shardcode("db", "t1", 10000)


def test_backoff_doubles_up_to_its_ceiling_and_jitter_only_shortens_it() -> None:
    assert [backoff(n, 1.0, 10.0) for n in (1, 2, 3, 4, 5, 6)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    rng = random.Random(7)
    for attempts in range(1, 12):
        full = backoff(attempts, 0.5, 60.0)
        jittered = backoff(attempts, 0.5, 60.0, rng)
        assert 0.75 * full <= jittered <= full


def test_http_statuses_map_to_what_the_outbox_does() -> None:
    assert outcome_of_status(201, "", 5).kind == "delivered"
    for status in (401, 403, 404, 408, 409, 429, 500, 502, 503):
        assert outcome_of_status(status, "x").kind == "retry", status
    for status in (400, 405, 413, 422):
        assert outcome_of_status(status, "x").kind == "rejected", status


def _airflow(handler: Any) -> AirflowAssets:
    return AirflowAssets("http://airflow:8080/", "u", "p", 5.0, transport=httpx.MockTransport(handler))


def _token_then(answer: Any) -> tuple[Any, list[httpx.Request]]:
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if request.url.path == "/auth/token":
            return httpx.Response(201, json={"access_token": f"tok{len(calls)}"})
        return answer(request)

    return handler, calls


def test_assets_are_read_page_by_page_keeping_the_scheduled_hive_ones() -> None:
    pages = {
        0: [
            {"id": 1, "uri": "hive://meta:10000/db/a", "scheduled_dags": [{"dag_id": "c"}]},
            {"id": 2, "uri": "hive://meta:10000/db/b", "scheduled_dags": []},  # nobody consumes it
        ],
        2: [
            {"id": 3, "uri": "hive://meta:10000/db/c/d", "scheduled_dags": [{"dag_id": "c"}]},  # not a table
            {"id": 4, "uri": "hive://meta:10000/db/d", "scheduled_dags": [{"dag_id": "c"}]},
        ],
    }

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.headers["Authorization"].startswith("Bearer tok")
        assert request.url.params["uri_prefix_pattern"] == "hive://meta:10000/"
        offset = int(request.url.params["offset"])
        return httpx.Response(200, json={"assets": pages.get(offset, []), "total_entries": 4})

    handler, calls = _token_then(answer)
    found = _airflow(handler).consumed_hive_assets("hive://meta:10000/")
    assert [(a.asset_id, a.db, a.table, a.consumers) for a in found] == [(1, "db", "a", ("c",)), (4, "db", "d", ("c",))]
    assert [c.url.path for c in calls] == ["/auth/token", "/api/v2/assets", "/api/v2/assets"]


def test_an_expired_token_is_taken_again_once() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.headers["Authorization"] == "Bearer tok1":
            return httpx.Response(401, json={"detail": "expired"})
        body = json.loads(request.content)
        assert body == {"asset_id": 9, "partition_key": "2026-11-27", "extra": {"hive_partition": "ds=2026-11-27"}}
        return httpx.Response(200, json={"id": 77})

    handler, calls = _token_then(answer)
    outcome = _airflow(handler).post_event(9, "2026-11-27", {"hive_partition": "ds=2026-11-27"})
    assert (outcome.kind, outcome.event_id) == ("delivered", 77)
    assert [c.url.path for c in calls] == [
        "/auth/token",
        "/api/v2/assets/events",
        "/auth/token",
        "/api/v2/assets/events",
    ]


def test_a_post_that_may_have_reached_airflow_is_unknown_one_that_never_left_is_a_retry() -> None:
    def timeout(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("read timed out", request=request)

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    def unavailable(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, text="down for maintenance")

    def invalid(request: httpx.Request) -> httpx.Response:
        return httpx.Response(422, json={"detail": [{"msg": "String should have at most 250 characters"}]})

    for answer, kind, said in (
        (timeout, "unknown", "ReadTimeout"),
        (refused, "retry", "ConnectError"),
        (unavailable, "retry", "HTTP 503: down for maintenance"),
        (invalid, "rejected", "HTTP 422: [{'msg': 'String should have at most 250 characters'}]"),
    ):
        handler, _ = _token_then(answer)
        outcome = _airflow(handler).post_event(1, "k", {})
        assert outcome.kind == kind and said in outcome.detail, (answer.__name__, outcome)


def test_a_landing_s_events_are_looked_up_by_its_id_page_by_page_and_a_500_cannot_tell() -> None:
    """``find_events``: the asset's events from ``since``, oldest first, page by page, those whose ``extra`` names
    the landing; a 500 (3.3.2's answer while a run an event created has not started), a failure or more events than
    the pages hold is "cannot tell", never "absent"."""
    since = datetime(2026, 11, 27, 3, 0, tzinfo=timezone.utc)
    events = [
        {"id": 10 + i, "extra": {"smartsensor_landing_id": i % 4, "hive_partition": f"ds={i % 4}"}} for i in range(150)
    ]

    def answer(request: httpx.Request) -> httpx.Response:
        params = request.url.params
        assert request.headers["Connection"] == "close"  # never reused: 3.3.2 resets a connection after its 500
        assert (params["asset_id"], params["timestamp_gte"], params["order_by"]) == (
            "7",
            "2026-11-27T03:00:00Z",
            "timestamp",
        )
        offset, limit = int(params["offset"]), int(params["limit"])
        return httpx.Response(200, json={"asset_events": events[offset : offset + limit], "total_entries": len(events)})

    handler, calls = _token_then(answer)
    found = _airflow(handler).find_events(7, since, None, {"smartsensor_landing_id": 3, "hive_partition": "ds=3"})
    assert found.answered and found.event_ids == tuple(10 + i for i in range(150) if i % 4 == 3)
    assert [c.url.params.get("offset") for c in calls] == [None, "0", "100"]
    absent = _airflow(_token_then(answer)[0]).find_events(7, since, None, {"smartsensor_landing_id": 9})
    assert absent.answered and absent.event_ids == ()

    def started_none(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, json={"detail": "Internal Server Error"})

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    def endless(request: httpx.Request) -> httpx.Response:
        offset = int(request.url.params["offset"])
        return httpx.Response(200, json={"asset_events": events[:100], "total_entries": 10_000 + offset})

    for failing, said in ((started_none, "HTTP 500"), (refused, "ConnectError"), (endless, "more than 1000 events")):
        lookup = _airflow(_token_then(failing)[0]).find_events(7, since, None, {"smartsensor_landing_id": 1})
        assert not lookup.answered and said in lookup.detail, (failing.__name__, lookup)


def test_no_token_means_nothing_was_posted_and_the_assets_call_raises() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(403, json={"detail": "Invalid credentials"})

    airflow = _airflow(handler)
    outcome = airflow.post_event(1, "k", {})
    assert outcome.kind == "retry" and "POST /auth/token: HTTP 403: Invalid credentials" in outcome.detail
    with pytest.raises(AirflowApiError, match="POST /auth/token: HTTP 403"):
        airflow.consumed_hive_assets("hive://meta:10000/")


def test_publishing_needs_airflow_the_user_and_a_hive_prefix(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    assert make_cfg(tmp_path, url).settings.landings.publish is False
    good = {
        "landings__publish": "true",
        "landings__airflow_url": "http://airflow:8080",
        "landings__airflow_username": "smartsensor",
        "landings__airflow_password_file": str(tmp_path / "pw"),
        "landings__asset_uri_prefix": "hive://meta:10000/",
    }
    assert make_cfg(tmp_path, url, **good).settings.landings.asset_uri_prefix == "hive://meta:10000/"
    for name, value, said in (
        ("landings__airflow_url", "", "airflow_url is required"),
        ("landings__airflow_url", "airflow:8080", "must start with http://"),
        ("landings__asset_uri_prefix", "hive://meta:10000", "must be hive://host:port/"),
        ("landings__asset_uri_prefix", "s3://bucket/", "must be hive://host:port/"),
        ("landings__retry_max", "0.5", "retry_max (0.5) must be at least retry_base (1)"),
        ("landings__request_timeout", "14", "request_timeout (14) must be under [smart_sensor] lease_timeout (15)"),
    ):
        with pytest.raises(ConfigError, match=re.escape(said)):
            make_cfg(tmp_path, url, **{**good, name: value})


def test_a_look_up_is_bounded_at_both_ends_when_it_can_be() -> None:
    """Issue 67, defect 2: a look-up's window ends a claim and a request after the outcome became unknown (with the
    clock skew), so the events of a busy asset taken later never fill its pages."""
    unknown = datetime(2026, 11, 27, 3, 0, tzinfo=timezone.utc)
    since, until = lookup_window(unknown, unknown, 15.0, 10.0)
    assert since == unknown - timedelta(seconds=15 + CLOCK_SKEW)
    assert until == unknown + timedelta(seconds=25 + CLOCK_SKEW)
    assert lookup_window(None, unknown, 15.0, 10.0) == (unknown - timedelta(seconds=CLOCK_SKEW), None)
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"asset_events": [], "total_entries": 0})

    assert _airflow(_token_then(answer)[0]).find_events(7, since, until, {"smartsensor_landing_id": 1}).answered
    assert seen[-1].url.params["timestamp_lte"] == "2026-11-27T03:05:25Z"


def test_redirects_to_the_same_route_on_the_same_host_are_followed_with_the_same_post(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 67, defect 5: an http → https 308 (or a proxy's path prefix) is followed with the same method, body and
    token, the move logged once; a redirect elsewhere (a maintenance page, another host) is not followed and the
    post is retried, never refused for good."""
    posted: list[httpx.Request] = []
    calls: list[httpx.Request] = []

    def moved(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if request.url.scheme == "http":  # every old URL, the token's too
            return httpx.Response(308, headers={"location": f"https://airflow:8443/airflow{request.url.path}"})
        if request.url.path == "/airflow/auth/token":
            assert json.loads(request.content) == {"username": "u", "password": "p"}
            return httpx.Response(201, json={"access_token": "tok1"})
        posted.append(request)
        return httpx.Response(200, json={"id": 41})

    airflow = _airflow(moved)
    for _ in range(2):
        outcome = airflow.post_event(3, "2026-11-27", {"hive_partition": "ds=2026-11-27"})
        assert (outcome.kind, outcome.event_id) == ("delivered", 41)
    assert [(r.method, r.url.path) for r in posted] == [("POST", "/airflow/api/v2/assets/events")] * 2
    assert [(c.url.scheme, c.url.path) for c in calls][:2] == [
        ("http", "/auth/token"),
        ("https", "/airflow/auth/token"),
    ]
    assert json.loads(posted[0].content)["partition_key"] == "2026-11-27"
    assert posted[0].headers["Authorization"].startswith("Bearer tok")
    assert sum("moved" in r.getMessage() for r in caplog.records) == 2  # the token's route and the events

    for location in ("http://airflow:8080/maintenance.html", "https://elsewhere:8443/api/v2/assets/events"):

        def away(request: httpx.Request, location: str = location) -> httpx.Response:
            return httpx.Response(302, headers={"location": location}, text="<html>see elsewhere</html>")

        outcome = _airflow(_token_then(away)[0]).post_event(3, "k", {})
        assert outcome.kind == "retry" and f"redirected to {location}" in outcome.detail, outcome


def test_only_airflows_own_answers_refuse_an_event_for_good() -> None:
    """Issue 67, defect 5: a proxy's 400 or 413 page is retried; Airflow's own 422 is a rejection; a 2xx that is not
    Airflow's answer to a post is of unknown outcome (looked up before a second post); a token endpoint that answers
    a page is a failure to retry, never an exception out of ``post_event``."""
    for status, answer, kind in (
        (400, httpx.Response(400, text="<html>Bad Request</html>"), "retry"),
        (413, httpx.Response(413, text="<html>Request Entity Too Large</html>"), "retry"),
        (422, httpx.Response(422, json={"detail": [{"msg": "invalid"}]}), "rejected"),
        (200, httpx.Response(200, text="<html>maintenance</html>"), "unknown"),
    ):
        handler, _ = _token_then(lambda request, answer=answer: answer)
        assert _airflow(handler).post_event(1, "k", {}).kind == kind, status

    def page(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="<html>login</html>")

    outcome = _airflow(page).post_event(1, "k", {})
    assert outcome.kind == "retry" and "not Airflow's answer" in outcome.detail


def test_a_key_whose_value_holds_the_delimiter_is_not_published() -> None:
    """Issue 67, defect 9: ``region=eu|us/ds=…`` would be three fields for two columns."""
    name = "region=eu%7Cus/ds=2026-11-27"
    assert key_problem(partition_key(name), name) is not None and "delimiter" in str(
        key_problem(partition_key(name), name)
    )
    assert key_problem(partition_key("ds=a%7Cb"), "ds=a%7Cb") is None  # one column: the whole value is the key
    assert key_problem("2026-11-27|eu", "ds=2026-11-27/region=eu") is None


def test_the_paused_dags_are_read_page_by_page() -> None:
    """Issue 67, defect 8: ``GET /api/v2/dags?paused=true``, every page."""
    dags = [{"dag_id": f"d{i}", "is_paused": True} for i in range(150)]

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/v2/dags" and request.url.params["paused"] == "true"
        offset = int(request.url.params["offset"])
        return httpx.Response(200, json={"dags": dags[offset : offset + 100], "total_entries": len(dags)})

    handler, calls = _token_then(answer)
    assert _airflow(handler).paused_dags() == {f"d{i}" for i in range(150)}
    assert [c.url.params.get("offset") for c in calls] == [None, "0", "100"]


class _Trickling(http.server.BaseHTTPRequestHandler):
    """Airflow's answers over a real socket: the token at once, a post's answer one byte every 0.1 s (a proxy or an
    api-server that stalls mid-answer: each read arrives well inside a read timeout)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps({"access_token": "t"} if self.path == "/auth/token" else {"id": 7}).encode()
        body = body.ljust(60)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        step = 0.1 if self.path != "/auth/token" else 0.0
        for i in range(len(body)):
            self.wfile.write(body[i : i + 1])
            self.wfile.flush()
            time.sleep(step)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_call_is_bounded_by_its_timeout_as_a_whole_however_its_answer_trickles() -> None:
    """A post's answer arrives a byte every 0.1 s (6 s in all): each read is far inside the 1 s timeout, yet the
    call is abandoned at about 1 s, of unknown outcome (it was sent), not read for 6 s."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Trickling)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    assets = AirflowAssets(f"http://127.0.0.1:{server.server_address[1]}", "u", "p", timeout=1.0)
    try:
        started = time.monotonic()
        outcome = assets.post_event(1, "2026-12-01", {"smartsensor_landing_id": 1})
        took = time.monotonic() - started
    finally:
        assets.close()
        server.shutdown()
        server.server_close()
    assert outcome.kind == "unknown" and "longer than 1 s" in outcome.detail, outcome
    assert took < 4.0, f"the call took {took:.1f} s, its answer 6 s"
