"""`smartsensor serve` as a real process: it answers over HTTP, asks for the token, and without a token
it listens on 127.0.0.1 only and says so."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from smartsensor.adapters.metastore import free_port
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
