"""A worker process against the metastore service: the service stops mid-run and comes back."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.harness.hive_tables import Metastore
from smartsensor.adapters import metastore_service
from smartsensor.adapters.metastore_service_process import free_port
from smartsensor.adapters.sql import tasks as task_sql
from smartsensor.adapters.sql.registration_store import SqlRegistrationStore
from smartsensor.sensors import NamedHivePartitionSensor
from smartsensor.standalone.registration import register
from tests.support.common import DAY, new_db, override_env
from tests.support.proc_helpers import CliProcess, cli_env

pytestmark = [pytest.mark.slow, pytest.mark.fault]


def test_metastore_outage_fails_nothing_early_and_rounds_resume(tmp_path: Path) -> None:
    home = tmp_path / "home"
    port = free_port()
    db_url = f"sqlite:///{tmp_path}/meta.db"
    overrides = {
        "metastore__port": str(port),
        "spark__metastore_uris": f"thrift://127.0.0.1:{port}",
        "spark__warehouse_dir": str(home / "warehouse"),
    }
    cfg, engine = new_db(home, db_url, **overrides)
    register(
        SqlRegistrationStore(engine),
        [
            (
                f"d{i}",
                NamedHivePartitionSensor(
                    task_id="w", partition_names=["demo.t/ds=2026-11-22/hr=00"], poke_interval=1, timeout=600
                ),
            )
            for i in range(5)
        ],
        DAY,
        cfg,
    )
    env = cli_env(home, db_url, **override_env(overrides))
    worker = None
    try:  # everything that starts a process is inside: a timeout anywhere still stops them
        metastore_service.start(cfg, die_with_parent=True)
        worker = CliProcess(["worker", "--shard-min", "0", "--shard-max", "10000", "--interval", "1", "--json"], env)
        worker.wait_round(
            lambda r: r["loaded"] == 5 and r["catalog_calls"] == 1 and not r["transient_errors"], timeout=120
        )
        assert metastore_service.stop(cfg)
        worker.wait_round(lambda r: r["transient_errors"] >= 1, timeout=120)
        worker.wait_round(lambda r: r["transient_errors"] >= 1, timeout=120)
        with engine.connect() as conn:
            assert {r.state for r in task_sql.list_tasks(conn)} == {"smart_running"}
        metastore_service.start(cfg, die_with_parent=True)
        # The partition lands as a pipeline's commit does, over thrift (the Spark pipeline itself lands in
        # test_metastore.py): no Spark JVM here.
        pipeline = Metastore(cfg, db="demo")
        try:
            pipeline.create_tables(["t"], columns=("ds", "hr"))
            pipeline.land("t", "2026-11-22", "00")
        finally:
            pipeline.close()
        worker.wait_round(lambda r: r["marked"].get("success") == 5, timeout=120)
    finally:
        if worker is not None:
            worker.stop()
        metastore_service.stop(cfg)
    with engine.connect() as conn:
        assert {r.state for r in task_sql.list_tasks(conn)} == {"success"}
    engine.dispose()
