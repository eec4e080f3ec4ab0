"""scripts/bench/api.py with tiny numbers, on SQLite and PostgreSQL: it starts a real `smartsensor serve`, registers
and polls through it without an error or a wrong answer, prints its table with every field, and stops the server."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.support.proc_helpers import run_script

pytestmark = pytest.mark.slow

HEADER = (
    "| phase | requests | errors | req/s | keys/s | p50 ms | p95 ms | p99 ms | server CPU s | "
    "server CPU s / 1,000 keys | server RSS MB | client CPU s |"
)


@pytest.mark.timeout(300)
def test_bench_api_smoke(tmp_path: Path, db_url: str) -> None:
    out = tmp_path / "results" / "api.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SMARTSENSOR")}
    proc = run_script(
        [
            sys.executable,
            "-m",
            "scripts.bench.api",
            "--db-url",
            db_url,
            "--tasks",
            "120",
            "--partitions",
            "7",
            "--concurrency",
            "6",
            "--pollers",
            "4",
            "--keys-per-poller",
            "40",
            "--poll-interval",
            "0.5",
            "--poll-seconds",
            "2",
            "--json",
            str(out),
        ],
        env,
        timeout=280,
        tail=3000,
    )
    lines = proc.stdout.splitlines()
    assert HEADER in lines
    rows = {
        line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:-1]]
        for line in lines[lines.index(HEADER) + 2 :]
        if line.startswith("| ")
    }
    assert set(rows) == {"registration", "polling"} and all(len(cells) == 11 for cells in rows.values())
    assert rows["registration"][:2] == ["120", "0"]  # requests, errors

    data = json.loads(out.read_text())
    reg, polls = data["phases"]
    assert data["backend"] == db_url.split(":")[0].split("+")[0]
    assert reg["phase"] == "registration" and reg["keys"] == 120 and reg["wrong_answers"] == 0
    assert polls["phase"] == "polling" and polls["errors"] == 0 and polls["wrong_answers"] == 0
    assert polls["keys"] == 40 * polls["requests"] and polls["requests"] >= 4  # every poller asked at least once
    for phase in (reg, polls):
        assert phase["requests_per_s"] > 0 and phase["keys_per_s"] >= phase["requests_per_s"]
        assert 0 < phase["p50_ms"] <= phase["p95_ms"] <= phase["p99_ms"]
        assert phase["server_cpu_s"] >= 0 and phase["server_rss_mb"] > 0 and phase["client_cpu_s"] >= 0
    assert reg["server_cpu_s"] > 0 and reg["server_cpu_s_per_1k_keys"] > 0  # 120 registrations cost ticks
    assert not Path(f"/proc/{data['server_pid']}").exists()  # the server it started is stopped (and reaped)
