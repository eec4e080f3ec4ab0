"""A stand-in for Airflow 3.3's REST API on the several-host bed's client host (tests/process/test_hosts.py),
speaking exactly the calls the landing publisher makes (smartsensor.adapters.airflow_assets): ``POST /auth/token``,
``GET /api/v2/assets``, ``GET /api/v2/dags?paused=true`` (none paused),
``POST /api/v2/assets/events`` (every one recorded, with its body and the address it came
from) and ``GET /api/v2/assets/events`` (the look-up of a post whose outcome was lost: by asset, from a time, in
pages).

The test drives it from the root namespace through ``/_bed/`` endpoints: ``POST /_bed/hold`` with ``{"commit":
bool}`` makes the next posted event wait for its answer until ``POST /_bed/release``, recorded first (``commit``:
Airflow took it, only its answer is late) or not at all (the post is lost with its connection, which is then closed
unanswered); ``GET /_bed/state`` answers ``{"events": [...], "held": [...], "lookups": n}``.

Run as ``python -m tests.support.airflow_assets_host '{"address", "port", "assets": [{"id", "uri"}]}'``; it prints
``ready`` once it listens, and serves until killed.
"""

from __future__ import annotations

import json
import sys
import threading
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

HOLD_BOUND = 300.0  # seconds a held answer waits for its release at most


class Stand:
    """What the stand-in holds: its assets, the events taken, the held posts and the switches."""

    def __init__(self, assets: list[dict[str, Any]]) -> None:
        self.assets = assets
        self.events: list[dict[str, Any]] = []
        self.held: list[dict[str, Any]] = []
        self.hold: bool | None = None  # the next post is held: recorded first (True) or lost (False)
        self.release = threading.Event()
        self.lookups = 0
        self.posts = 0  # every post's id is its number, a lost one's too: an id is never given twice
        self.lock = threading.Lock()


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _page(items: list[dict[str, Any]], query: dict[str, list[str]], key: str) -> dict[str, Any]:
    offset, limit = int(query.get("offset", ["0"])[0]), int(query.get("limit", ["100"])[0])
    return {key: items[offset : offset + limit], "total_entries": len(items)}


def _assets(stand: Stand, query: dict[str, list[str]]) -> list[dict[str, Any]]:
    """The assets under the query's ``uri_prefix_pattern``, each with a DAG scheduled on it."""
    prefix = query.get("uri_prefix_pattern", [""])[0]
    return [
        {**a, "scheduled_dags": [{"dag_id": f"consumer_{a['id']}"}]}
        for a in stand.assets
        if a["uri"].startswith(prefix)
    ]


def _events(stand: Stand, query: dict[str, list[str]]) -> list[dict[str, Any]]:
    """The events taken of the query's ``asset_id`` from its ``timestamp_gte`` on, oldest first."""
    asset_id = int(query["asset_id"][0])
    since = datetime.fromisoformat(query["timestamp_gte"][0].replace("Z", "+00:00"))
    if since.tzinfo is None:
        since = since.replace(tzinfo=timezone.utc)
    return [e for e in stand.events if e["asset_id"] == asset_id and datetime.fromisoformat(e["timestamp"]) >= since]


class Server(ThreadingHTTPServer):
    """The stand-in's server: its ``stand`` shared by its requests' threads."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], stand: Stand) -> None:
        super().__init__(address, Handler)
        self.stand = stand


class Handler(BaseHTTPRequestHandler):
    """One request to the stand-in (``Server.stand``)."""

    server: Server
    protocol_version = "HTTP/1.1"  # connections kept, as Airflow's api-server keeps them

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}")

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        stand = self.server.stand
        with stand.lock:
            if parts.path == "/_bed/state":
                self._answer(
                    200,
                    {
                        "events": stand.events,
                        "held": stand.held,
                        "lookups": stand.lookups,
                    },
                )
            elif parts.path == "/api/v2/assets":
                self._answer(200, _page(_assets(stand, query), query, "assets"))
            elif parts.path == "/api/v2/dags":  # the paused DAGs (``paused=true``): none here
                self._answer(200, _page([], query, "dags"))
            elif parts.path == "/api/v2/assets/events":
                stand.lookups += 1
                self._answer(200, _page(_events(stand, query), query, "asset_events"))
            else:
                self._answer(404, {"detail": f"no {parts.path} here"})

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        body = self._body()
        stand = self.server.stand
        if path == "/auth/token":
            self._answer(201, {"access_token": "bed-token"})
        elif path == "/_bed/hold":
            with stand.lock:
                stand.hold, stand.release = bool(body["commit"]), threading.Event()
            self._answer(200, {})
        elif path == "/_bed/release":
            stand.release.set()
            self._answer(200, {})
        elif path == "/api/v2/assets/events":
            self._post_event(body)
        else:
            self._answer(404, {"detail": f"no {path} here"})

    def _post_event(self, body: dict[str, Any]) -> None:
        stand = self.server.stand
        with stand.lock:
            hold, stand.hold = stand.hold, None
            release = stand.release
            stand.posts += 1
            event = {
                "id": stand.posts,
                "asset_id": int(body["asset_id"]),
                "partition_key": body.get("partition_key"),
                "extra": body.get("extra") or {},
                "timestamp": _now().isoformat(),
                "client": self.client_address[0],
            }
            if hold is not None:
                stand.held.append({**event, "committed": hold})
            if hold is None or hold:
                stand.events.append(event)
        if hold is not None:
            release.wait(HOLD_BOUND)
            if not hold:  # lost with its connection: closed unanswered
                self.close_connection = True
                return
        self._answer(200, event)


def main(args: dict[str, Any]) -> None:
    stand = Stand(args["assets"])
    server = Server((args["address"], int(args["port"])), stand)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
