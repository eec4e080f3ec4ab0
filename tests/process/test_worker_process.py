"""Worker processes as users run them: kill -9 and restart, the supervisor, status and metrics."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from smartsensor.adapters.metastore_service_process import free_port
from smartsensor.adapters.sql import status as status_sql, tasks as task_sql
from smartsensor.adapters.sql.registration_store import SqlRegistrationStore
from smartsensor.sensors import SuccessFileSensor
from smartsensor.standalone.registration import register
from tests.support.common import DAY, new_db, override_env
from tests.support.proc_helpers import CliProcess, cli_env, run_cli

pytestmark = pytest.mark.slow


def test_worker_killed_and_restarted_loses_nothing(tmp_path: Path, db_url: str) -> None:
    home = tmp_path / "home"
    cfg, engine = new_db(home, db_url)
    paths = [tmp_path / f"p{i}" / "_SUCCESS" for i in range(4)]
    register(
        SqlRegistrationStore(engine),
        [(f"dag{i}", SuccessFileSensor(task_id="s", path=paths[i % 4].as_uri(), poke_interval=0.5)) for i in range(20)],
        DAY,
        cfg,
    )
    env = cli_env(home, db_url)
    args = ["worker", "--shard-min", "0", "--shard-max", "10000", "--interval", "0.5", "--json"]
    first = CliProcess(args, env)
    try:
        first.wait_round(lambda r: r["loaded"] == 20 and r["groups_poked"] == 4)
    finally:
        first.stop(signal.SIGKILL)
    assert first.proc.returncode == -signal.SIGKILL
    for p in paths[:2]:
        p.parent.mkdir()
        p.write_text("")
    second = CliProcess(args, env)
    try:
        second.wait_round(lambda r: r.get("marked", {}).get("success") == 10)
        for p in paths[2:]:
            p.parent.mkdir()
            p.write_text("")
        second.wait_round(lambda r: r.get("marked", {}).get("success") == 10)
        second.wait_round(lambda r: r["loaded"] == 0)
    finally:
        assert second.stop() == 0  # SIGTERM: clean stop
    with engine.connect() as conn:
        rows = task_sql.list_tasks(conn)
        assert len(rows) == 20 and {r.state for r in rows} == {"success"}
        # the clean stop removed its status row; the killed worker's row stays (status shows its age)
        assert [w["pid"] for w in status_sql.worker_rounds(conn)] == [first.proc.pid]
    engine.dispose()


def test_worker_once_keeps_its_leases_through_a_round_longer_than_lease_timeout(tmp_path: Path, db_url: str) -> None:
    """issue 22, defect 3: `worker --once` did not heartbeat during its round, so a round longer than
    lease_timeout (a Spark start is enough) lost its lease, marked nothing and exited 4, alone."""
    from tests.support.custom_sensors import SlowSensor

    overrides = {
        "smart_sensor__sensor_modules": "tests.support.custom_sensors",
        "smart_sensor__sensors_enabled": "SlowSensor",
        "smart_sensor__lease_timeout": "1",
        "smart_sensor__heartbeat_interval": "0.2",
    }
    cfg, engine = new_db(tmp_path / "home", db_url, **overrides)
    register(
        SqlRegistrationStore(engine), [("d", SlowSensor(task_id="slow", seconds=4))], DAY, cfg
    )  # 4 lease_timeouts long
    with engine.connect() as conn:
        assert task_sql.get_task(conn, "d", "slow", DAY).state == "smart_pending"
    out = run_cli(
        ["worker", "--once", "--json"], cli_env(tmp_path / "home", db_url, **override_env(overrides)), timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert [json.loads(line)["marked"] for line in out.stdout.splitlines() if line.startswith("{")] == [{"success": 1}]
    with engine.connect() as conn:
        assert task_sql.get_task(conn, "d", "slow", DAY).state == "success"
    engine.dispose()


def test_supervisor_restarts_crashed_worker_and_stops_all(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path}/m.db"
    home = tmp_path / "home"
    new_db(home, db_url)[1].dispose()
    sup = CliProcess(["workers", "-n", "2", "--interval", "0.5"], cli_env(home, db_url))
    try:
        line = sup.wait_for(lambda ln: ln.startswith("started 2 workers"))
        assert line.count("leased pid") == 2
        pid = int(line.split("leased pid ")[1].split(",")[0])
        time.sleep(1)
        subprocess.run(["kill", "-9", str(pid)], check=True)
        sup.wait_for(lambda ln: "worker #0 leased exited with -9; restart #1" in ln, timeout=120)
    finally:
        code = sup.stop(timeout=120)  # it gives its workers up to 30 s, then kills them; a loaded machine is slow
    assert code == 0
    sup.wait_for(lambda ln: ln == "all workers stopped", timeout=5)  # raises if the supervisor never said so


def test_pinned_supervisor_splits_the_ranges(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path}/m.db"
    home = tmp_path / "home"
    new_db(home, db_url)[1].dispose()
    sup = CliProcess(["workers", "-n", "2", "--pinned", "--interval", "0.5"], cli_env(home, db_url))
    try:
        line = sup.wait_for(lambda ln: ln.startswith("started 2 workers"))
        assert "[0,4000) pid" in line and "[4000,10000) pid" in line
    finally:
        assert sup.stop() == 0


def test_status_and_metrics(tmp_path: Path, db_url: str) -> None:
    home = tmp_path / "home"
    cfg, engine = new_db(home, db_url)
    register(
        SqlRegistrationStore(engine),
        [
            (f"dag{i}", SuccessFileSensor(task_id="s", path=f"file:///nonexistent/{i % 3}", poke_interval=300))
            for i in range(9)
        ],
        DAY,
        cfg,
    )
    env = cli_env(home, db_url)
    port = free_port()
    worker = CliProcess(
        [
            "worker",
            "--shard-min",
            "0",
            "--shard-max",
            "10000",
            "--interval",
            "0.5",
            "--json",
            "--metrics-port",
            str(port),
        ],
        env,
    )
    try:
        worker.wait_round(lambda r: r["loaded"] == 9)
        worker.wait_round(lambda r: r["loaded"] == 9 and r["groups_poked"] == 0)
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert 'smartsensor_round_loaded{shard_max="10000",shard_min="0"} 9.0' in body
        assert "smartsensor_rounds_total" in body and "smartsensor_round_schema_calls" in body
        out = run_cli(["status", "--json"], env, timeout=60, check=True).stdout
        data = json.loads(out)
        assert data["tasks_by_state"] == {"smart_running": 9}
        assert data["waiting"] == 9 and data["distinct_hashes"] == 3 and data["dedup_ratio"] == 3.0
        assert sum(s["waiting"] for s in data["shards"]) == 9 and len(data["shards"]) == 5
        assert len(data["workers"]) == 1 and data["workers"][0]["age_seconds"] < 30
        text = run_cli(["status"], env, timeout=60, check=True).stdout
        assert "dedup ratio 3.0x" in text
    finally:
        worker.stop()
    engine.dispose()


def test_worker_whose_spark_jvm_died_is_restarted_and_loses_nothing(tmp_path: Path) -> None:
    """kill -9 of a worker's Spark driver JVM (an OOM kill): the worker stops with exit 3 and releases its
    lease, the supervisor restarts it with a new JVM, and the waiting task still succeeds."""
    db_url = f"sqlite:///{tmp_path}/m.db"
    home = tmp_path / "home"
    cfg, engine = new_db(home, db_url)
    flag = tmp_path / "landed" / "_SUCCESS"
    register(
        SqlRegistrationStore(engine),
        [("d", SuccessFileSensor(task_id="s", path=str(flag), poke_interval=0.5))],
        DAY,
        cfg,
    )
    sup = CliProcess(["workers", "-n", "1", "--interval", "0.5", "--json"], cli_env(home, db_url))
    try:
        pid = int(sup.wait_for(lambda ln: ln.startswith("started 1 workers")).split("leased pid ")[1])
        sup.wait_round(lambda r: r["fs_calls"] == 1)  # the JVM is up and has checked the flag
        java = subprocess.run(["pgrep", "-P", str(pid), "java"], capture_output=True, text=True).stdout.split()
        assert len(java) == 1, java
        subprocess.run(["kill", "-9", java[0]], check=True)
        sup.wait_for(lambda ln: "worker #0 leased exited with 3; restart #1" in ln, timeout=60)
        flag.parent.mkdir()
        flag.write_text("")
        sup.wait_round(lambda r: r["marked"].get("success") == 1, timeout=90)
    finally:
        assert sup.stop() == 0
    with engine.connect() as conn:
        assert [r.state for r in task_sql.list_tasks(conn)] == ["success"]
    engine.dispose()
