"""A worker on the thrift catalog backend answers partition checks (and file:// paths) without a JVM:
no java process under it at any time, pyspark never imported, and its tasks succeed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from smartsensor.adapters.sql.engine import init_db, make_engine
from smartsensor.adapters.sql.registration_store import SqlRegistrationStore
from smartsensor.config import Config
from smartsensor.sensors import HivePartitionSensor, NamedHivePartitionSensor, SuccessFileSensor
from smartsensor.standalone.registration import register
from tests.support.catalog_cases import DB, SETUP
from tests.support.common import DAY, ROOT, make_cfg
from tests.support.metastore_service import run_spark
from tests.support.proc_helpers import cli_env

pytestmark = pytest.mark.slow

LAND = r"""
from smartsensor.config import load_config
from smartsensor.adapters.spark import get_spark
from tests.support.catalog_cases import SETUP
spark = get_spark(load_config())
for sql in SETUP:
    spark.sql(sql)
"""

# The CLI in a process that reports, as it exits, whether pyspark was ever imported.
CLI = (
    "import atexit, sys\n"
    "atexit.register(lambda: print('PYSPARK_IMPORTED=%s' % ('pyspark' in sys.modules), file=sys.stderr))\n"
    "from smartsensor.cli import main\n"
    "main()\n"
)


def descendants(pid: int) -> list[tuple[int, str]]:
    """(pid, command name) of every process below ``pid``."""
    rows = subprocess.run(["ps", "-e", "-o", "pid=,ppid=,comm="], capture_output=True, text=True).stdout
    children: dict[int, list[tuple[int, str]]] = {}
    for line in rows.splitlines():
        child, parent, comm = line.split(None, 2)
        children.setdefault(int(parent), []).append((int(child), comm.strip()))
    out: list[tuple[int, str]] = []
    todo = [pid]
    while todo:
        for entry in children.get(todo.pop(), []):
            out.append(entry)
            todo.append(entry[0])
    return out


def test_worker_on_thrift_backend_starts_no_jvm(service: Config, tmp_path: Path) -> None:
    assert SETUP  # tables, partitions (typed int/date, escaped values) landed through Spark, elsewhere
    run_spark(service, LAND)

    home, db_url = tmp_path / "home", f"sqlite:///{tmp_path}/w.db"
    uris = service.get("spark", "metastore_uris")
    cfg = make_cfg(home, db_url, spark__metastore_uris=uris, smart_sensor__catalog_backend="thrift")
    engine = make_engine(db_url)
    init_db(engine)
    flag = tmp_path / "landed" / "_SUCCESS"
    flag.parent.mkdir()
    flag.write_text("")
    sensors = [
        NamedHivePartitionSensor(task_id="typed", partition_names=[f"{DB}.typed/ds=2026-1-5/hr=00"]),
        NamedHivePartitionSensor(task_id="escaped", partition_names=[f"{DB}.esc/ds=a%2Fb/hr=00"]),
        HivePartitionSensor(task_id="partial", table=f"{DB}.esc", partition={"ds": "ü日本"}),
        SuccessFileSensor(task_id="flag", path=flag.as_uri()),
    ]
    register(SqlRegistrationStore(engine), [(f"dag_{s.task_id}", s) for s in sensors], DAY, cfg)
    engine.dispose()

    env = cli_env(
        home,
        db_url,
        SMARTSENSOR__SPARK__METASTORE_URIS=uris,
        SMARTSENSOR__SMART_SENSOR__CATALOG_BACKEND="thrift",
        PYTHONPATH=str(ROOT),
    )
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-c", CLI, "worker", "--once", "--json", "--shard-min", "0", "--shard-max", "10000"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: set[str] = set()
    while proc.poll() is None:
        seen.update(comm for _, comm in descendants(proc.pid))
        time.sleep(0.02)
    out, err = proc.communicate()
    took = time.monotonic() - started
    assert proc.returncode == 0, err[-3000:]
    assert "java" not in seen, seen
    assert "PYSPARK_IMPORTED=False" in err, err[-3000:]
    rounds = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert sum(r.get("marked", {}).get("success", 0) for r in rounds) == len(sensors), rounds
    assert sum(r["catalog_calls"] for r in rounds) == 2 and sum(r["fs_calls"] for r in rounds) == 1, rounds
    assert took < 30, took
