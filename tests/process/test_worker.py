"""A shard worker's round from a real `smartsensor worker --once --json` process (SQLite and Postgres).
The round's logic in-process is tests/integration/test_worker.py."""

from __future__ import annotations

import json

import pytest

from smartsensor.adapters.sql.registration_store import SqlRegistrationStore
from smartsensor.standalone.registration import register
from tests.support.common import DAY, new_db
from tests.support.proc_helpers import cli_env, run_cli

pytestmark = pytest.mark.spark


@pytest.mark.slow  # more than 3 s: in the full suite, not in the fast one
def test_worker_json_round_via_cli(tmp_path, db_url, spark_home, clock) -> None:
    """`worker --once --json` in its own process, with a SuccessFileSensor (file system, no metastore)."""
    from smartsensor.sensors import SuccessFileSensor

    cfg, engine = new_db(tmp_path / "home", db_url)
    flag = tmp_path / "_SUCCESS"
    flag.write_text("")
    register(
        SqlRegistrationStore(engine),
        [(f"d{i}", SuccessFileSensor(task_id="s", path=flag.as_uri())) for i in range(4)],
        DAY,
        cfg,
    )
    out = run_cli(
        ["worker", "--shard-min", "0", "--shard-max", "10000", "--once", "--json"],
        cli_env(tmp_path / "home", db_url),
        timeout=180,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout.strip().splitlines()[-1])
    for key in ("loaded", "distinct_hashes", "groups_poked", "catalog_calls", "db_statements", "marked", "seconds"):
        assert key in data
    assert data["loaded"] == 4 and data["distinct_hashes"] == 1 and data["fs_calls"] == 1
    assert data["marked"] == {"success": 4}
    engine.dispose()
