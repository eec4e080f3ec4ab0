"""`smartsensor serve` as a real process: it answers over HTTP, asks for the token, and without a token
it listens on 127.0.0.1 only and says so."""

from __future__ import annotations

import json
import select
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from smartsensor.adapters.metastore_service_process import free_port
from smartsensor.adapters.sql.engine import known_revisions
from tests.support.common import wait_until
from tests.support.proc_helpers import CliProcess, cli_env, run_cli


def get(url: str, token: str | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def answers(url: str) -> bool:
    try:
        get(url)
        return True
    except OSError:
        return False


def test_serve_answers_and_guards_with_the_token(tmp_path: Path, db_url: str) -> None:
    home = tmp_path / "home"
    (tmp_path / "token").write_text("s3cret\n")
    env = cli_env(home, db_url, SMARTSENSOR__API__TOKEN_FILE=str(tmp_path / "token"))
    assert run_cli(["db", "init"], env).returncode == 0
    port = free_port()
    server = CliProcess(["serve", "--port", str(port)], env)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: answers(f"{base}/api/v1/health"), timeout=60)
        assert get(f"{base}/api/v1/health") == (200, {"status": "ok", "schema_revision": known_revisions()[0]})
        assert get(f"{base}/api/v1/status")[0] == 401
        status, body = get(f"{base}/api/v1/status", "s3cret")
        assert status == 200 and body["tasks_by_state"] == {}
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.stderr_tail()


def test_sigint_and_sigterm_end_it_gracefully_and_a_port_in_use_is_one_clear_line(tmp_path: Path) -> None:
    """The process's one stop (issue 56): SIGINT or SIGTERM ends the server (its lifespan's shutdown run: its
    notification hub closed) and the process exits 0; a port another server holds is an error, not a hang."""
    import signal

    db_url = f"sqlite:///{tmp_path}/m.db"
    env = cli_env(tmp_path / "home", db_url)
    assert run_cli(["db", "init"], env).returncode == 0
    for sig in (signal.SIGINT, signal.SIGTERM):
        port = free_port()
        server = CliProcess(["serve", "--port", str(port)], env)
        try:
            health = f"http://127.0.0.1:{port}/api/v1/health"
            wait_until(lambda: answers(health), timeout=60)  # noqa: B023 - called here, in this pass of the loop
            with socket.create_server(("127.0.0.1", 0)) as taken:  # a second server on a port in use
                busy = run_cli(["serve", "--port", str(taken.getsockname()[1])], env)
            assert busy.returncode != 0 and "cannot serve on 127.0.0.1:" in busy.stderr, busy.stderr[-2000:]
        finally:
            code = server.stop(sig, timeout=60)
        assert code == 0, server.stderr_tail()


def test_without_a_token_it_listens_on_loopback_only_and_says_so(tmp_path: Path, db_url: str) -> None:
    home = tmp_path / "home"
    env = cli_env(home, db_url)
    assert run_cli(["db", "init"], env).returncode == 0
    port = free_port()
    server = CliProcess(["serve", "--host", "0.0.0.0", "--port", str(port)], env)
    try:
        wait_until(lambda: answers(f"http://127.0.0.1:{port}/api/v1/health"), timeout=60)
        wait_until(lambda: "serving on 127.0.0.1 only, not on 0.0.0.0" in server.stderr_tail(), timeout=10)
        outside = _an_address_of_this_host_that_is_not_loopback()
        if outside is not None:
            with socket.socket() as s:
                s.settimeout(2)
                assert s.connect_ex((outside, port)) != 0  # not listening there
    finally:
        server.stop()


def _an_address_of_this_host_that_is_not_loopback() -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: nothing is sent, the OS just picks a source address
            address = s.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


def _send_chunked(port: int, path: str, token: str, total: int, chunk: int = 1 << 20) -> tuple[int, bytes]:
    """POST a chunked body of up to ``total`` bytes, stopping once the server answers or stops reading. Returns
    (bytes written to the socket, the answer's head)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(
        (
            f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        ).encode()
    )
    sock.setblocking(False)
    frame = f"{chunk:x}\r\n".encode() + b"[" + b" " * (chunk - 1) + b"\r\n"
    sent, answer, pending, deadline = 0, b"", b"", time.monotonic() + 120
    try:
        while b"\r\n\r\n" not in answer and time.monotonic() < deadline:
            if not pending and sent < total:
                pending = frame  # whole frames only: a partial write continues where it stopped
            readable, writable, _ = select.select([sock], [sock] if pending else [], [], 5)
            if readable:
                data = sock.recv(4096)
                if not data:
                    break
                answer += data
            if writable and pending:
                try:
                    n = sock.send(pending)
                except (BrokenPipeError, ConnectionResetError):
                    pending, total = b"", sent  # the server closed its side: read what it answered
                    continue
                pending, sent = pending[n:], sent + n
        return sent, answer
    finally:
        sock.close()


def test_body_limits_hold_for_chunked_bodies_and_parse_errors_are_json(tmp_path: Path) -> None:
    env = cli_env(tmp_path / "home", f"sqlite:///{tmp_path}/s.db", SMARTSENSOR__API__TOKEN="s3cret")
    assert run_cli(["db", "init"], env).returncode == 0
    port = free_port()
    server = CliProcess(["serve", "--port", str(port)], env)
    try:
        wait_until(lambda: answers(f"http://127.0.0.1:{port}/api/v1/health"), timeout=60)
        for path in ("/api/v1/tasks/states", "/login"):
            sent, answer = _send_chunked(port, path, "s3cret", total=100 << 20)
            assert answer.startswith(b"HTTP/1.1 413"), (path, answer[:200])
            assert sent < 24 << 20, (path, sent)  # refused after the limit (4 MiB) plus what sockets buffer
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        sock.sendall(b"POST /api/v1/tasks/states HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n")
        raw = b""
        while chunk := sock.recv(4096):
            raw += chunk
        sock.close()
        head, _, body = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400") and b"application/json" in head, raw[:300]
        assert json.loads(body)["error"].startswith("malformed HTTP request"), body
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.stderr_tail()
