"""An HTTP proxy in front of Airflow's api-server that moved it under a path prefix and is slow (issue 67): every
request outside ``PREFIX`` is answered ``308`` to the same path and query under it (as a proxy that puts Airflow
behind ``/airflow`` answers the old URLs); under it, a request is forwarded with the prefix taken off. Look-ups of
asset events (``GET …/api/v2/assets/events``) are held ``lookup_delay`` seconds before they are forwarded (Airflow
answering slowly); the first ``slow_posts`` posts of asset events are forwarded at once (Airflow commits them) and
their answers held ``post_delay`` seconds (longer than the poster's timeout: an outcome it never learns).

Used by tests/airflow/test_landings_in_airflow.py; a ``ThreadingHTTPServer`` on 127.0.0.1 from construction until
``close()``.
"""

from __future__ import annotations

import http.client
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

PREFIX = "/airflow"
EVENTS = "/api/v2/assets/events"
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection", "host"}


class RedirectingProxy:
    """The proxy; ``via(url)`` points it at Airflow and returns the URL the workers are given."""

    def __init__(self, lookup_delay: float, slow_posts: int, post_delay: float) -> None:
        self.lookup_delay, self.slow_posts, self.post_delay = lookup_delay, slow_posts, post_delay
        self.target: tuple[str, int] | None = None
        self.lock = threading.Lock()
        self.redirects = 0  # 308s answered
        self.lookups = 0  # look-ups forwarded, each after lookup_delay
        self.posts = 0  # posts of asset events forwarded
        self.held_posts = 0  # of which answered only after post_delay
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: the test counts what matters."""

            def do_GET(self) -> None:
                proxy.handle(self)

            def do_POST(self) -> None:
                proxy.handle(self)

            def do_PATCH(self) -> None:
                proxy.handle(self)

            def do_DELETE(self) -> None:
                proxy.handle(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, name="redirecting-proxy", daemon=True)
        self.thread.start()

    def via(self, url: str) -> str:
        """Forward to Airflow at ``url`` (``http://host:port``); the URL the workers are given (the old one: every
        call is redirected once)."""
        parts = urlsplit(url)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 80)
        return self.url

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    def __enter__(self) -> RedirectingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        """Redirect, or forward (slowly where asked)."""
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else b""
        path = request.path
        if not path.startswith(PREFIX + "/"):
            with self.lock:
                self.redirects += 1
            request.send_response(308)
            request.send_header("Location", PREFIX + path)
            request.send_header("Content-Length", "0")
            request.end_headers()
            return
        upstream_path = path[len(PREFIX) :]
        route = upstream_path.split("?", 1)[0]
        held = 0.0
        if request.command == "GET" and route == EVENTS:
            with self.lock:
                self.lookups += 1
            time.sleep(self.lookup_delay)
        elif request.command == "POST" and route == EVENTS:
            with self.lock:
                self.posts += 1
                if self.held_posts < self.slow_posts:
                    self.held_posts += 1
                    held = self.post_delay
        status, headers, answer = self.forward(request.command, upstream_path, request.headers, body)
        time.sleep(held)  # Airflow committed it; the poster times out before this answer comes
        try:
            request.send_response(status)
            for name, value in headers:
                if name.lower() not in HOP_BY_HOP and name.lower() != "content-length":
                    request.send_header(name, value)
            request.send_header("Content-Length", str(len(answer)))
            request.end_headers()
            request.wfile.write(answer)
        except OSError:
            pass  # the poster gave up: its outcome is unknown to it

    def forward(self, method: str, path: str, headers: Any, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        """One call to Airflow: its status, headers and body (a 502 when it cannot be reached)."""
        if self.target is None:
            return 502, [], b"Airflow not up yet"
        conn = http.client.HTTPConnection(*self.target, timeout=60)
        try:
            sent = {k: v for k, v in headers.items() if k.lower() not in HOP_BY_HOP}
            conn.request(method, path, body=body or None, headers=sent)
            response = conn.getresponse()
            return response.status, response.getheaders(), response.read()
        except OSError as exc:
            return 502, [], f"proxy: {exc}".encode()
        finally:
            conn.close()
