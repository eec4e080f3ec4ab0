"""A shard worker's round from a real `smartsensor worker --once --json` process (SQLite and Postgres).
The round's logic in-process is tests/integration/test_worker.py."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from smartsensor.adapters.sql.engine import init_db, make_engine
from smartsensor.service.registration import register
from tests.conftest import make_cfg

pytestmark = pytest.mark.spark
DAY = datetime(2026, 11, 22)
T0 = datetime(2026, 11, 22, 6, 0, 0)


class Clock:
    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_worker_json_round_via_cli(tmp_path, db_url, spark_home, clock) -> None:
    """`worker --once --json` in its own process, with a SuccessFileSensor (file system, no metastore)."""
    import os
    import subprocess
    import sys
    from smartsensor.sensors import SuccessFileSensor
    cfg = make_cfg(tmp_path / "home", db_url)
    engine = make_engine(cfg.sql_alchemy_conn)
    init_db(engine)
    flag = tmp_path / "_SUCCESS"
    flag.write_text("")
    register(engine, [(f"d{i}", SuccessFileSensor(task_id="s", path=str(flag))) for i in range(4)], DAY, cfg)
    env = dict(os.environ, SMARTSENSOR_HOME=str(tmp_path / "home"), SMARTSENSOR__CORE__SQL_ALCHEMY_CONN=db_url)
    out = subprocess.run([sys.executable, "-m", "smartsensor.cli", "worker", "--shard-min", "0", "--shard-max",
                          "10000", "--once", "--json"], env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout.strip().splitlines()[-1])
    for key in ("loaded", "distinct_hashes", "groups_poked", "catalog_calls", "db_statements", "marked", "seconds"):
        assert key in data
    assert data["loaded"] == 4 and data["distinct_hashes"] == 1 and data["fs_calls"] == 1
    assert data["marked"] == {"success": 4}
    engine.dispose()
