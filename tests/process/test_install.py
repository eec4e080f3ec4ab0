"""A service host on the thrift backend: the smartsensor wheel installed without its spark extra, into a fresh
venv (its dependencies from a cached one), run from the checkout root (whose source tree must not shadow the
install). No PySpark, no JVM, and the commands a deployment needs work; the ones that need Spark say which extra to
install."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from smartsensor.config import Config
from tests.support.common import ROOT
from tests.support.packaging import build_wheel, venv_with_wheel

pytestmark = pytest.mark.slow

DAG = """
from smartsensor.sensors import NamedHivePartitionSensor, SuccessFileSensor

flag = SuccessFileSensor(task_id="flag", path="{flag}", poke_interval=1)
table = NamedHivePartitionSensor(task_id="table", partition_names=["nowhere.events/ds={{{{ ds }}}}"], poke_interval=1)
"""


@pytest.fixture(scope="module")
def thrift_host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv with this tree's smartsensor wheel and its default dependencies only: the wheel is built and
    installed on every run, the dependencies come from a venv cached while the wheel declares the same ones, and
    ``pip check`` proves they are what it declares (tests.support.packaging.venv_with_wheel)."""
    tmp = tmp_path_factory.mktemp("install")
    return venv_with_wheel(build_wheel(tmp), tmp / "venv")


def test_thrift_service_host_needs_neither_pyspark_nor_java(thrift_host: Path, service: Config, tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SMARTSENSOR", "PYTHON", "VIRTUAL_ENV", "PYSPARK", "SPARK"))
    }
    env.update(SMARTSENSOR_HOME=str(tmp_path / "home"), PATH=f"{thrift_host / 'bin'}:/usr/bin:/bin")

    def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(thrift_host / "bin" / "smartsensor"), *args],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert not check or proc.returncode == 0, (args, proc.stdout[-2000:], proc.stderr[-3000:])
        return proc

    no_spark = subprocess.run([str(thrift_host / "bin" / "python"), "-c", "import pyspark"], capture_output=True)
    assert no_spark.returncode != 0  # the default install leaves the ~580 MB extra out
    cli("config", "init", "--metastore-uris", service.get("spark", "metastore_uris"))
    cli("db", "init")
    flag = tmp_path / "landed" / "_SUCCESS"
    flag.parent.mkdir()
    flag.write_text("")
    dag = tmp_path / "team_dag.py"
    dag.write_text(DAG.format(flag=flag.as_uri()))
    cli("submit", str(dag), "--execution-date", "2026-11-22")
    out = cli("worker", "--once", "--json", "--shard-min", "0", "--shard-max", "10000").stdout
    rounds = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert sum(r.get("marked", {}).get("success", 0) for r in rounds) == 1, rounds  # the flag; the table waits
    assert sum(r["catalog_calls"] for r in rounds) == 1, rounds  # answered over thrift, without Spark
    states = {r["task_id"]: r["state"] for r in json.loads(cli("tasks", "--json").stdout)}
    assert states == {"flag": "success", "table": "smart_running"}, states

    refused = cli("metastore", "start", check=False)
    assert refused.returncode != 0 and "pip install 'smartsensor[spark]'" in refused.stderr, refused.stderr
