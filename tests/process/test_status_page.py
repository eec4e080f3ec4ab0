"""The status page of a real `smartsensor serve`, rendered by Debian's headless Chromium: a screenshot is taken
(copied to $TMPDIR to be looked at), and the numbers in the DOM Chromium built equal `smartsensor status --json`
on the same database. The server's history sampler writes while it runs and stops cleanly on SIGTERM."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import tempfile
import urllib.error
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import pytest

from smartsensor.adapters.metastore_service_process import free_port
from smartsensor.adapters.sql import history as history_sql
from smartsensor.adapters.sql.engine import make_engine
from tests.support.common import make_cfg, override_env, wait_until
from tests.support.page_dom import external_references, page_numbers, populate_page_db, status_numbers
from tests.support.proc_helpers import CliProcess, cli_env, run_cli

pytestmark = pytest.mark.slow

OVERRIDES = {
    "smart_sensor__shards": "4",
    "smart_sensor__lease_timeout": "3600",
}  # the worker's heartbeat stays fresh however slow the test
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
WINDOW = (1400, 1800)


def chromium() -> str:
    """Debian's chromium, which scripts/test.sh installs (ensure_chromium): missing is a failure, not a skip."""
    found = shutil.which("chromium")
    if found is None:
        pytest.fail(
            "Debian's `chromium` is not installed, and this test renders the status page with it: run "
            "`apt-get install -y chromium` (scripts/test.sh tries to, see ensure_chromium in scripts/env.sh)"
        )
    return found


def headless(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    """Chromium headless on its own throwaway profile; fails showing its stderr unless it exits 0."""
    proc = subprocess.run(
        [
            chromium(),
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={profile}",
            "--no-first-run",
            "--disable-extensions",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, f"chromium {args} exited {proc.returncode}: {proc.stderr[-2000:]}"
    return proc


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status == 200
    except (OSError, urllib.error.URLError):
        return False


def sampled(engine) -> bool:
    with engine.connect() as conn:
        return bool(history_sql.load_samples(conn, datetime(2000, 1, 1, tzinfo=timezone.utc)))


def test_chromium_renders_the_page_with_the_numbers_of_status_json(tmp_path: Path, db_url: str) -> None:
    home = tmp_path / "home"
    cfg = make_cfg(home, db_url, **OVERRIDES)
    env = cli_env(home, db_url, **override_env(OVERRIDES))
    run_cli(["db", "init"], env, check=True)
    engine = make_engine(db_url)
    populate_page_db(cfg, engine)
    port = free_port()
    server = CliProcess(["serve", "--port", str(port)], env)
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_until(lambda: answers(f"{url}api/v1/health"), timeout=60)
        wait_until(lambda: sampled(engine), timeout=60)  # the server's sampler wrote its first bucket

        dom = headless(["--dump-dom", url], tmp_path / "profile-dom").stdout
        status = json.loads(run_cli(["status", "--json"], env, check=True).stdout)
        assert page_numbers(dom) == status_numbers(status)
        assert external_references(dom) == []
        assert status["tasks_by_state"]["smart_pending"] == 10 and status["leases"][1]["owner"] is None

        shot = tmp_path / "status-page.png"
        headless([f"--screenshot={shot}", f"--window-size={WINDOW[0]},{WINDOW[1]}", url], tmp_path / "profile-shot")
        data = shot.read_bytes()
        assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR"
        assert struct.unpack(">II", data[16:24]) == WINDOW
        assert len(data) > 30_000, f"a {len(data)}-byte screenshot: the page hardly rendered"
        kept = (
            Path(os.environ.get("TMPDIR") or tempfile.gettempdir())
            / f"smartsensor-status-page-{engine.dialect.name}.png"
        )
        shutil.copyfile(shot, kept)
        print(f"\nstatus page screenshot: {kept}")
    finally:
        server.stop()
        engine.dispose()
    assert server.proc.returncode == 0, server.stderr_tail()
    assert "Traceback" not in server.stderr_tail(200)
