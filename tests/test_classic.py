"""Classic poke mode (`run-task`) and the scheduler that launches it."""

from __future__ import annotations

import threading
import time
from datetime import datetime
from typing import Any

import pytest

from schema.models import State
from sensors import NamedHivePartitionSensor
from smartsensor import queries
from smartsensor.classic import TaskRunError, run_task
from smartsensor.registration import register
from tests.conftest import make_cfg
from tests.hive_helpers import create_table, land

pytestmark = pytest.mark.spark
DAY = datetime(2026, 11, 22)


@pytest.fixture
def cfg(tmp_path, db_url):
    """Overrides conftest's cfg (and so its engine): smart mode off, every task runs the classic way."""
    return make_cfg(tmp_path / "home", db_url, smart_sensor__use_smart_sensor="False")


def run(engine: Any, cfg: Any, spark: Any, task_id: str, **kw: Any):
    return run_task(engine, cfg, "d", task_id, DAY, spark_provider=lambda: spark, **kw)


def test_run_task_success_after_landing(engine, cfg, spark, hive_db) -> None:
    create_table(spark, hive_db, "t")
    register(engine, [("d", NamedHivePartitionSensor(
        task_id="w", partition_names=[f"{hive_db}.t/ds={{{{ ds }}}}/hr=00"], poke_interval=0.2, timeout=30))],
        DAY, cfg)
    timer = threading.Timer(1.0, lambda: land(spark, hive_db, "t", ds="2026-11-22", hr="00"))
    timer.start()
    result = run(engine, cfg, spark, "w")
    timer.join()
    assert result.state == State.SUCCESS and result.pokes >= 2 and result.catalog_calls == result.pokes
    with engine.connect() as conn:
        row = queries.get_task(conn, "d", "w", DAY)
    assert row["state"] == "success" and row["end_date"] is not None


@pytest.mark.parametrize("retries,soft_fail,expected", [(1, False, State.UP_FOR_RETRY), (0, False, State.FAILED),
                                                        (0, True, State.SKIPPED)])
def test_run_task_timeouts(engine, cfg, spark, hive_db, retries, soft_fail, expected) -> None:
    create_table(spark, hive_db, "t")
    register(engine, [("d", NamedHivePartitionSensor(
        task_id="w", partition_names=[f"{hive_db}.t/ds=never/hr=00"], poke_interval=0.3, timeout=1,
        retries=retries, soft_fail=soft_fail))], DAY, cfg)
    started = time.monotonic()
    result = run(engine, cfg, spark, "w")
    assert result.state == expected
    assert 0.9 <= time.monotonic() - started < 10
    assert result.pokes >= 2


def test_run_task_refuses_unscheduled_and_respects_manual_change(engine, cfg, spark, hive_db) -> None:
    create_table(spark, hive_db, "t")
    register(engine, [("d", NamedHivePartitionSensor(
        task_id="w", partition_names=[f"{hive_db}.t/ds=never/hr=00"], poke_interval=0.2, timeout=60))],
        DAY, cfg)
    with pytest.raises(TaskRunError, match="no task instance"):
        run_task(engine, cfg, "d", "nope", DAY)

    def mark_by_hand() -> None:
        with engine.begin() as conn:
            queries.set_state(conn, ("d", "w", DAY), State.SUCCESS)
    threading.Timer(1.0, mark_by_hand).start()
    result = run(engine, cfg, spark, "w")
    assert result.state == State.SUCCESS
    with pytest.raises(TaskRunError, match="not scheduled"):
        run(engine, cfg, spark, "w")


def test_scheduler_runs_scheduled_tasks_in_child_processes(tmp_path, db_url) -> None:
    """`scheduler --once` launches real `run-task` processes (SuccessFileSensor: no metastore needed)."""
    import os
    import subprocess
    import sys
    from sensors import SuccessFileSensor
    from smartsensor.db import init_db, make_engine
    home = tmp_path / "home"
    cfg = make_cfg(home, db_url, smart_sensor__use_smart_sensor="False", scheduler__parallelism="2")
    engine = make_engine(cfg.sql_alchemy_conn)
    init_db(engine)
    flag = tmp_path / "_SUCCESS"
    flag.write_text("")
    register(engine, [("d", SuccessFileSensor(task_id="ok", path=str(flag), poke_interval=0.2, timeout=60)),
                      ("d", SuccessFileSensor(task_id="never", path=str(tmp_path / "nope"), poke_interval=0.2,
                                              timeout=1))], DAY, cfg)
    env = dict(os.environ, SMARTSENSOR_HOME=str(home), SMARTSENSOR__CORE__SQL_ALCHEMY_CONN=db_url,
               SMARTSENSOR__SMART_SENSOR__USE_SMART_SENSOR="False")
    out = subprocess.run([sys.executable, "-m", "smartsensor.cli", "scheduler", "--once", "--json"], env=env,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    assert '"launched": 2' in out.stdout
    with engine.connect() as conn:
        got = {r["task_id"]: r["state"] for r in queries.list_tasks(conn)}
    assert got == {"ok": "success", "never": "failed"}
    engine.dispose()
