"""The standalone Hive metastore service: lifecycle, errors, and several Spark processes sharing it.

Spark runs only in subprocesses here (never the session-scoped ``spark`` fixture, whose embedded
Derby admits one JVM); each such process costs ~8 s, so checks are grouped into few of them.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from smartsensor.adapters import metastore_service
from smartsensor.adapters.metastore_service_process import free_port, port_answers
from smartsensor.config import Config
from tests.support.common import ROOT
from tests.support.metastore_service import service_cfg, spark_env

pytestmark = pytest.mark.slow

DS = "2026-11-22"

WRITER = r"""
import json, sys, time
from pathlib import Path
from smartsensor.config import load_config
from smartsensor.adapters.spark import get_spark
db, reader_done = sys.argv[1], Path(sys.argv[2])
spark = get_spark(load_config())
spark.sql(f"CREATE DATABASE {db}")
spark.sql(f"CREATE TABLE {db}.events (x INT) PARTITIONED BY (ds STRING, hr STRING) STORED AS PARQUET")
for hr in ("00", "01", "02"):
    spark.sql(f"ALTER TABLE {db}.events ADD PARTITION (ds='2026-11-22', hr='{hr}')")
# Keep this session open until the reader has seen the partitions: both clients live at once.
deadline = time.monotonic() + 300  # the reader's Spark may start late on a loaded machine
while not reader_done.exists() and time.monotonic() < deadline:
    time.sleep(0.2)
print(json.dumps({"reader_done": reader_done.exists()}), flush=True)
"""

READER = r"""
import json, sys, time
from pathlib import Path
from smartsensor.config import load_config
from smartsensor.adapters.spark import get_spark
db, reader_done = sys.argv[1], Path(sys.argv[2])
try:
    spark = get_spark(load_config())
    parts = []
    deadline = time.monotonic() + 300
    while len(parts) < 3 and time.monotonic() < deadline:
        if spark.catalog.tableExists(f"{db}.events"):
            parts = sorted(r.partition for r in spark.sql(f"SHOW PARTITIONS {db}.events").collect())
        else:
            time.sleep(0.3)
finally:
    reader_done.touch()
print(json.dumps({"partitions": parts}), flush=True)
"""

CHECKER = r"""
import json, sys
from smartsensor.config import load_config
from smartsensor.adapters.spark import get_spark
table = sys.argv[1]
spark = get_spark(load_config())
parts = sorted(r.partition for r in spark.sql(f"SHOW PARTITIONS {table}").collect())
rows = spark.sql(f"SELECT count(*) AS n FROM {table}").collect()[0]["n"]
print(json.dumps({"partitions": parts, "rows": rows}), flush=True)
"""


class Procs:
    """Subprocesses of one test, each in its own process group, all killed at teardown."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[str]] = []

    def spawn(self, args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            args, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        self.started.append(proc)
        return proc

    def python(self, code: str, *args: str, env: dict[str, str]) -> subprocess.Popen[str]:
        return self.spawn([sys.executable, "-c", code, *args], env)

    def kill_all(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)  # the group holds the Spark JVM too
                proc.wait()


def finish(proc: subprocess.Popen[str], timeout: float = 420) -> tuple[str, str]:
    """Wait for a subprocess; fail with its stderr tail if it does not exit 0."""
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{out}\nstderr tail:\n{err[-3000:]}"
    return out, err


def last_json(out: str) -> dict:
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


@pytest.fixture
def procs() -> Iterator[Procs]:
    p = Procs()
    yield p
    p.kill_all()


# -- lifecycle -------------------------------------------------------------------------------------


def test_start_runs_service_and_is_idempotent(service: Config) -> None:
    st = metastore_service.status(service)
    port = service.get("metastore", "port")
    assert st.running and st.pid is not None
    assert (st.host, st.port, st.uri) == ("127.0.0.1", port, f"thrift://127.0.0.1:{port}")
    assert metastore_service.thrift_uri(service) == st.uri
    assert st.log == service.home / "metastore_service" / "metastore.log"
    assert (service.home / "metastore_service" / "metastore.pid").read_text().strip() == str(st.pid)
    assert (service.home / "metastore_service" / "metastore_db").is_dir()
    assert port_answers("127.0.0.1", port)

    started = time.monotonic()
    again = metastore_service.start(service)
    assert again.pid == st.pid and again.running
    assert time.monotonic() - started < 2  # no second JVM


def test_stop_ends_the_service(tmp_path: Path) -> None:
    cfg = service_cfg(tmp_path / "home", free_port())
    pid = metastore_service.start(cfg).pid
    assert pid is not None
    try:
        assert metastore_service.stop(cfg) is True
        st = metastore_service.status(cfg)
        assert not st.running and st.pid is None
        assert not port_answers("127.0.0.1", cfg.get("metastore", "port"))
        assert not (cfg.home / "metastore_service" / "metastore.pid").exists()
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        assert metastore_service.stop(cfg) is False
    finally:
        metastore_service.stop(cfg)


def test_stale_pid_file_means_not_running(tmp_path: Path) -> None:
    cfg = service_cfg(tmp_path / "home", free_port())
    dead = subprocess.Popen(["true"])
    dead.wait()
    (cfg.home / "metastore_service").mkdir(parents=True)
    (cfg.home / "metastore_service" / "metastore.pid").write_text(f"{dead.pid}\n")
    st = metastore_service.status(cfg)
    assert not st.running and st.pid is None
    assert metastore_service.stop(cfg) is False
    assert not (cfg.home / "metastore_service" / "metastore.pid").exists()


# -- errors ----------------------------------------------------------------------------------------


def test_port_taken_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        cfg = service_cfg(tmp_path / "home", port)
        with pytest.raises(metastore_service.MetastoreServiceError, match=f"127.0.0.1:{port}"):
            metastore_service.start(cfg)
    assert metastore_service.status(cfg).pid is None


def test_missing_java_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    cfg = service_cfg(tmp_path / "home", free_port())
    with pytest.raises(metastore_service.MetastoreServiceError, match=r"Java 17\+"):
        metastore_service.start(cfg)
    assert metastore_service.status(cfg).pid is None


def test_jvm_dying_at_startup_reports_the_log_tail(tmp_path: Path) -> None:
    cfg = service_cfg(tmp_path / "home", free_port(), metastore__java_opts="-Xmx1k")
    with pytest.raises(metastore_service.MetastoreServiceError, match="exited during startup") as err:
        metastore_service.start(cfg)
    assert "Too small maximum heap" in str(err.value)
    assert metastore_service.status(cfg).pid is None


# -- several Spark processes on one catalog --------------------------------------------------------


@pytest.mark.extended  # two Spark JVMs; the service shared by processes is held in CI by tests/process/test_hosts.py
def test_two_spark_processes_share_the_catalog(service: Config, procs: Procs, tmp_path: Path) -> None:
    db = f"t_{uuid.uuid4().hex[:10]}"
    reader_done = tmp_path / "reader-done"
    env = spark_env(service)
    writer = procs.python(WRITER, db, str(reader_done), env=env)
    reader = procs.python(READER, db, str(reader_done), env=env)

    reader_out, _ = finish(reader)
    writer_out, _ = finish(writer)
    assert last_json(reader_out)["partitions"] == [f"ds={DS}/hr=00", f"ds={DS}/hr=01", f"ds={DS}/hr=02"]
    assert last_json(writer_out) == {"reader_done": True}  # the writer's session was open throughout


def test_pipeline_lands_partitions_and_success_file(service: Config, procs: Procs) -> None:
    db = f"t_{uuid.uuid4().hex[:10]}"
    env = spark_env(service)
    pipeline = procs.spawn(
        [
            sys.executable,
            "-m",
            "scripts.demo.pipeline",
            "--table",
            f"{db}.events",
            "--ds",
            DS,
            "--hours",
            "0-1",
            "--every",
            "0",
            "--rows",
            "3",
        ],
        env,
    )
    out, _ = finish(pipeline)
    lines = out.splitlines()
    assert [line for line in lines if line.startswith("landed ")] == [
        f"landed {db}.events/ds={DS}/hr=00",
        f"landed {db}.events/ds={DS}/hr=01",
    ]
    success = [line.split(" ", 1)[1] for line in lines if line.startswith("success-file ")]
    expected = Path(service.get("spark", "warehouse_dir")) / f"{db}.db" / "events" / f"ds={DS}" / "_SUCCESS"
    assert success == [f"file:{expected}"]
    assert expected.is_file() and expected.stat().st_size == 0
    # Only our end-of-day marker: the committer's per-insert _SUCCESS files are switched off.
    assert sorted(p.name for p in expected.parents[1].rglob("_SUCCESS")) == ["_SUCCESS"]

    checker_out, _ = finish(procs.python(CHECKER, f"{db}.events", env=env))
    assert last_json(checker_out) == {"partitions": [f"ds={DS}/hr=00", f"ds={DS}/hr=01"], "rows": 6}


def test_pipeline_validates_everything_that_reaches_sql() -> None:
    from scripts.demo import pipeline

    assert pipeline.parse_hours("0-3,7,2") == [0, 1, 2, 3, 7]
    assert pipeline.parse_hours("5") == [5]
    assert pipeline.parse_table("demo.events") == ("demo", "events")
    for bad in ("3-1", "0-24", "x", "1-", "-1", ""):
        with pytest.raises(ValueError):
            pipeline.parse_hours(bad)
    for bad in ("events", "a.b.c", "demo.ev-ents", "demo.`x`"):
        with pytest.raises(ValueError):
            pipeline.parse_table(bad)
    for bad in ("2026-1-1", "2026-13-01", "2026-11-22' OR '1'='1"):
        with pytest.raises(ValueError):
            pipeline.parse_ds(bad)
    # Rejected before Spark is touched (spark=None would fail on first use).
    with pytest.raises(ValueError):
        pipeline.land_partition(None, "demo", "events; DROP TABLE x", DS, 1, 3)
    with pytest.raises(ValueError):
        pipeline.land_partition(None, "demo", "events", DS, "1'", 3)
    with pytest.raises(ValueError):
        pipeline.write_success_file(None, "demo", "events", "2026-11-22/..")
    with pytest.raises(SystemExit):
        pipeline.parse_args(["--table", "demo.events", "--ds", DS, "--hours", "0-99"])
