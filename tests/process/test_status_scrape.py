"""The status scrape benchmark (scripts/bench/status_scrape.py) at a small size: it runs, on SQLite and on
PostgreSQL, and its table has a row per statement of collect_status with the statements each sent."""

from __future__ import annotations

import os
import sys

import pytest

from scripts.bench.status_scrape import ROWS
from tests.support.pg import needs_test_pg
from tests.support.proc_helpers import run_script

# Statements per row: collect_status's 9 (no task past its time limit here), collect_stuck's 2, one for each query.
SENT = {"collect_status": 9, "collect_stuck": 2}


@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgres", marks=needs_test_pg)])
def test_status_scrape_prints_a_row_per_statement(db: str) -> None:
    args = ["--tasks", "2000", "--repeats", "2"] + (["--postgres"] if db == "postgres" else [])
    # ./scripts/test.sh's PostgreSQL server: --postgres makes a database of its own there
    proc = run_script([sys.executable, "-m", "scripts.bench.status_scrape", *args], dict(os.environ), timeout=300)
    lines = proc.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("statement"))
    assert (
        f"status scrape on {'postgresql' if db == 'postgres' else 'sqlite'}: 2,000 waiting tasks" in lines[header - 1]
    )
    assert "200 distinct checks, 2 landed (20 tasks stuck)" in lines[header - 1]
    table = [line.split() for line in lines[header + 1 : header + 1 + len(ROWS)]]
    assert [row[0] for row in table] == list(ROWS)
    for name, best_ms, sent in table:
        assert float(best_ms.replace(",", "")) > 0, name
        assert int(sent) == SENT.get(name, 1), name
    assert "stuck after landing: 20 (expected 20)" in proc.stdout
