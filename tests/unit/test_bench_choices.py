"""What the benchmark decides before it measures anything (scripts/bench/): where its metastore service keeps its
tables, which strategies a run on Derby skips and says so, and which tables only a run over several workloads
prints. tests/process/test_bench.py runs the bench once, whole, on PostgreSQL (bench.sh --postgres); these are the
answers it would give on Derby, the default without a PostgreSQL server."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from scripts.bench import bench, metastore_db as bench_metastore, tables as bench_tables
from scripts.bench.metastore_load import MetastoreLoad
from smartsensor.adapters import metastore_db_setup

PG = "postgresql://smartsensor@127.0.0.1:5432/meta"


def test_without_a_postgresql_metadata_db_the_metastore_service_is_on_derby_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jar = tmp_path / "postgresql.jar"
    monkeypatch.setattr(metastore_db_setup, "JDBC_JAR", jar)
    assert bench_metastore.choose("auto", "sqlite:///bench.db") == ("derby", "auto: the metadata DB is not PostgreSQL")
    assert bench_metastore.choose("auto", PG) == ("derby", f"auto: no PostgreSQL JDBC driver at {jar}")
    assert bench_metastore.choose("derby", PG) == ("derby", "--metastore derby")
    with pytest.raises(ValueError, match="needs the PostgreSQL JDBC driver"):
        bench_metastore.choose("postgresql", PG)
    jar.write_bytes(b"")
    assert bench_metastore.choose("auto", PG) == ("postgresql", "auto: the metadata DB's server")
    with pytest.raises(ValueError, match="needs the metadata DB on PostgreSQL"):
        bench_metastore.choose("postgresql", "sqlite:///bench.db")


def test_a_run_on_derby_skips_the_metastore_db_strategies_and_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    chosen = list(bench.ALL_STRATEGIES)
    why = "auto: the metadata DB is not PostgreSQL"
    skipped = bench.skipped_strategies(chosen, False, why)
    assert list(skipped) == ["metastore-db", "metastore-db-lookup"]
    assert all("Derby" in reason and why in reason and "bench.sh --postgres" in reason for reason in skipped.values())
    assert bench.skipped_strategies(["incremental", "batched"], False, why) == {}  # not asked for: nothing to say
    assert bench.skipped_strategies(chosen, True, "auto: the metadata DB's server") == {}
    load = MetastoreLoad(None, os.getpid())  # no PostgreSQL under the metastore: its load is not measured, and why
    assert load.unavailable
    bench.print_skipped(skipped, load.unavailable)
    out = " ".join(capsys.readouterr().out.split())  # rich wraps at the console's width
    assert "metastore-db: skipped" in out and "metastore-db-lookup: skipped" in out  # said, not silent
    assert f"metastore database load: not measured: {load.unavailable}" in out


def test_on_derby_the_rounds_have_no_metastore_db_figures_but_the_service_cpu() -> None:
    load = MetastoreLoad(None, os.getpid())  # the service's CPU is read from /proc, on any database
    figures = MetastoreLoad.delta(load.snapshot(), load.snapshot())
    assert figures["statements"] is None and figures["exec_ms"] is None and figures["backend_cpu_ms"] is None
    assert figures["service_cpu_ms"] is not None


def test_without_a_metastore_db_lister_there_is_no_metastore_db_strategy() -> None:
    cfg: Any = SimpleNamespace(
        settings=SimpleNamespace(smart_sensor=SimpleNamespace(metastore_timeout=5)),
        shard_code_upper_limit=10_000,
        metastore_uris="thrift://127.0.0.1:9083",
    )
    args: Any = SimpleNamespace(triggerer_sample=300, fleet_processes=2)
    listers: Any = SimpleNamespace(thrift=None, parallel=None, db=None, db_lookup=None)
    every = bench.strategies(None, cfg, Path("airflow.cfg"), None, listers, {}, args)
    assert "metastore-db" not in every and "metastore-db-lookup" not in every
    assert {"per-hash", "batched", "incremental", "thrift-parallel", "fleet", "triggerer"} <= set(every)


def test_the_tables_over_the_workloads_need_two_workloads(capsys: pytest.CaptureFixture[str]) -> None:
    bench_tables.print_over_workloads([{"workload": "W1"}])  # one workload: nothing to compare it with
    assert capsys.readouterr().out == ""
