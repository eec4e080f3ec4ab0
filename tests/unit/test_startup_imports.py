"""What importing ``smartsensor.cli`` loads. Every CLI call and every process (workers, serve) pays at startup for
what ``smartsensor.cli`` imports: ``sqlalchemy.orm`` (the schema is Core tables, nothing maps rows to objects; about
0.2 s of CPU with the declarative classes it used to build), Alembic (only where a migration runs), rich (only the
Airflow report prints with it) and APScheduler (only where a periodic job runs) stay out of it."""

from __future__ import annotations

import json
import subprocess
import sys

# Loaded only by the code that uses them, never by importing the CLI.
LAZY = ("sqlalchemy.orm", "alembic", "rich", "apscheduler")


def test_importing_the_cli_leaves_the_heavy_packages_out() -> None:
    # A fresh interpreter: this one has imported them all already (other tests, pytest's plugins).
    code = "import json, sys; import smartsensor.cli; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert "smartsensor.cli" in loaded
    assert [m for m in loaded if any(m == name or m.startswith(name + ".") for name in LAZY)] == []
