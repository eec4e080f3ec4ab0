"""Classic `run-task` processes on an install without the `spark` extra (issue 31, item 6): a sensor that needs no
Spark runs to its end without starting it; one that needs it fails its try once, saying how to install PySpark.

PySpark stays installed: the processes get a ``pyspark`` package first on PYTHONPATH whose import fails as a
missing module does, and notes every attempt in a file (an attempt to import it is an attempt to start Spark).
No JVM is started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from smartsensor.adapters.sql import tasks as task_sql
from smartsensor.domain.rows import TaskRow
from smartsensor.domain.states import State
from tests.support.common import DAY, ROOT, new_db
from tests.support.proc_helpers import cli_env, run_cli

DATE = f"{DAY:%Y-%m-%d}"  # the execution date on the command line

HIDDEN_PYSPARK = """
import os
with open(os.environ["PYSPARK_IMPORTS"], "a") as attempts:
    attempts.write("import pyspark\\n")
raise ModuleNotFoundError("No module named 'pyspark'", name="pyspark")
"""

# A user's own sensor in a DAG file: its poke() looks at a local file (no Spark) and notes every poke.
LOCAL_FILE_DAG = """
import os
from smartsensor.sensors import BaseSensor

class LocalFileSensor(BaseSensor):
    persist_fields = ("path", "pokes")
    def __init__(self, task_id, path, pokes, **kw):
        super().__init__(task_id=task_id, **kw)
        self.path, self.pokes = path, pokes
    def poke(self, context):
        with open(self.pokes, "a") as log:
            log.write("poke\\n")
        return os.path.exists(self.path)

wait = LocalFileSensor(task_id="wait", path={path!r}, pokes={pokes!r}, poke_interval=0.2, timeout=120, retries=2)
"""

# Sensors that need Spark: a partition (classic runs list partitions through Spark), and a user's poke() that reads
# context['spark'] and swallows whatever that raises.
NEEDS_SPARK_DAGS = {
    "partition": """
from smartsensor.sensors import NamedHivePartitionSensor

wait = NamedHivePartitionSensor(
    task_id="wait", partition_names=["demo.events/ds={{ ds }}/hr=00"], poke_interval=0.2, timeout=120, retries=2
)
""",
    "user_spark": """
from smartsensor.sensors import BaseSensor

class SparkQuerySensor(BaseSensor):
    persist_fields = ("table",)
    def __init__(self, task_id, table, **kw):
        super().__init__(task_id=task_id, **kw)
        self.table = table
    def poke(self, context):
        try:
            return context["spark"].catalog.tableExists(self.table)
        except Exception:
            return False

wait = SparkQuerySensor(task_id="wait", table="demo.events", poke_interval=0.2, timeout=120, retries=2)
""",
}


def without_pyspark(tmp_path: Path, home: Path, db_url: str) -> tuple[dict[str, str], Path]:
    """A CLI environment where ``import pyspark`` fails as on an install without the extra, and the file that
    gets a line per attempt to import it."""
    hidden = tmp_path / "hidden"
    (hidden / "pyspark").mkdir(parents=True)
    (hidden / "pyspark" / "__init__.py").write_text(HIDDEN_PYSPARK)
    attempts = tmp_path / "pyspark_imports"
    path = os.pathsep.join(p for p in (str(hidden), str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = cli_env(
        home,
        db_url,
        SMARTSENSOR__SMART_SENSOR__USE_SMART_SENSOR="False",
        PYTHONPATH=path,
        PYSPARK_IMPORTS=str(attempts),
    )
    return env, attempts


def submit(dag: Path, env: dict[str, str]) -> None:
    out = run_cli(["submit", str(dag), "-d", DATE, "--json"], env, timeout=60, check=True)
    assert [r["state"] for r in json.loads(out.stdout)] == [State.SCHEDULED], out.stdout


def until(predicate: Callable[[], bool], proc: subprocess.Popen[bytes], stderr: Path, timeout: float) -> None:
    """Poll ``predicate`` until true; fail at ``timeout`` or as soon as ``proc`` exits, showing its stderr."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"run-task exited {proc.returncode}:\n{stderr.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached in {timeout} s; stderr:\n{stderr.read_text()[-3000:]}")
        time.sleep(0.05)


def task_row(engine: Any, dag_id: str) -> TaskRow:
    with engine.connect() as conn:
        row = task_sql.get_task(conn, dag_id, "wait", DAY)
    assert row is not None
    return row


def test_user_poke_on_a_local_file_needs_no_pyspark(tmp_path: Path) -> None:
    """It used to log 'cannot start Spark, poking again later: PySpark is not installed' every poke, for ever."""
    home, db_url = tmp_path / "home", f"sqlite:///{tmp_path}/m.db"  # the same on any DB: SQLite alone
    _, engine = new_db(home, db_url, smart_sensor__use_smart_sensor="False")
    env, attempts = without_pyspark(tmp_path, home, db_url)
    flag, pokes = tmp_path / "landed" / "_SUCCESS", tmp_path / "pokes"
    dag = tmp_path / "local_pipeline.py"
    dag.write_text(LOCAL_FILE_DAG.format(path=str(flag), pokes=str(pokes)))
    submit(dag, env)
    out, err = tmp_path / "run.out", tmp_path / "run.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "smartsensor.cli", "run-task", "local_pipeline", "wait", DATE, "--json"],
            env=env,
            stdout=stdout,
            stderr=stderr,
        )
    try:
        until(lambda: pokes.exists() and "poke" in pokes.read_text(), proc, err, timeout=60)  # it waits
        flag.parent.mkdir()
        flag.write_text("")
        assert proc.wait(timeout=60) == 0, err.read_text()[-3000:]  # it ends once the file is there
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    result = json.loads(out.read_text())
    assert (result["state"], result["error"]) == (State.SUCCESS, None), err.read_text()[-3000:]
    assert result["pokes"] >= 2 and result["catalog_calls"] == 0, result  # not landed at the first poke
    row = task_row(engine, "local_pipeline")
    assert (row.state, row.try_number, row.error) == (State.SUCCESS, 1, None)
    assert not attempts.exists(), "Spark was started for a sensor that does not need it"
    assert "Spark" not in err.read_text(), err.read_text()[-3000:]
    engine.dispose()


@pytest.mark.parametrize("dag_id", sorted(NEEDS_SPARK_DAGS))
def test_a_sensor_that_needs_spark_fails_its_try_once_without_pyspark(tmp_path: Path, dag_id: str) -> None:
    """Not a wait until the timeout (7 days by default), and not up_for_retry: no try on this host could do better."""
    home, db_url = tmp_path / "home", f"sqlite:///{tmp_path}/m.db"
    _, engine = new_db(home, db_url, smart_sensor__use_smart_sensor="False")
    env, attempts = without_pyspark(tmp_path, home, db_url)
    dag = tmp_path / f"{dag_id}.py"
    dag.write_text(NEEDS_SPARK_DAGS[dag_id])
    submit(dag, env)
    run = run_cli(["run-task", dag_id, "wait", DATE, "--json"], env, timeout=60)  # killed past it
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout)
    assert (result["state"], result["pokes"]) == (State.FAILED, 1), (result, run.stderr[-3000:])
    assert "PySpark is not installed: pip install 'smartsensor[spark]'" in result["error"], result
    row = task_row(engine, dag_id)
    assert (row.state, row.try_number, row.error) == (State.FAILED, 1, result["error"])
    assert attempts.exists()  # it did try to start Spark: the sensor needs it
    assert run.stderr.count("cannot start Spark") == 1, run.stderr[-3000:]
    engine.dispose()
