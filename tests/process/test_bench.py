"""The benchmark's small version as a smoke test: it runs, and its counters say what the design claims. One run,
on PostgreSQL (bench.sh --postgres): the metastore-db strategies and the metastore database's load need it, and
every other strategy runs on it as on SQLite. What a run on Derby decides instead (metastore-db skipped, and why;
no load figures; no tables over one workload) is tested without running it: tests/unit/test_bench_choices.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from smartsensor.adapters import metastore_service
from smartsensor.config import load_config
from tests.support.common import ROOT
from tests.support.pg import needs_test_pg
from tests.support.proc_helpers import run_script

pytestmark = [pytest.mark.slow, pytest.mark.extended]  # minutes; the choices it makes: tests/unit/test_bench_choices.py


@needs_test_pg  # PostgreSQL's binaries (bench.sh --postgres starts a server of its own, with pg_stat_statements)
@pytest.mark.timeout(1800)  # ~2-3 min alone; a heavily loaded machine has taken 650 s for two workloads
def test_bench(tmp_path: Path) -> None:
    """bench.sh --postgres over W1 and W2 with every strategy: the round on each catalog backend against
    Airflow's per-hash checks, its triggerer and classic poking; the metastore service on PostgreSQL, the
    metastore-db strategy beside thrift and thrift-parallel, and the metastore database's own load per round from
    pg_stat_statements; latency with and without a signal; the growth from one workload to the next."""
    out = tmp_path / "results" / "bench.json"  # a folder that does not exist yet, as in the README
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SMARTSENSOR") or k == "SMARTSENSOR_VENV"}
    try:
        proc = run_script(
            [
                "bash",
                str(ROOT / "scripts" / "bench.sh"),
                "--postgres",
                "--workload",
                "W1,W2",  # 50 and 500 tasks: the triggerer's sample is all of W1's, a tenth of W2's (extrapolated)
                "--scale",
                "0.005",
                "--classic-sample",
                "1",
                "--triggerer-sample",
                "50",
                "--fleet-processes",
                "2",
                "--latency-samples",
                "2",
                "--latency-poll-interval",
                "2",
                "--worker-rss-once",  # a worker's RSS on Spark and on thrift, on W1 (the Spark one starts a JVM)
                "--profile",
                "--home",
                str(home),
                "--json",
                str(out),
            ],
            env,
            timeout=1700,
        )
    finally:  # a bench killed by the timeout cannot stop its own metastore JVM: stop it through its pid file
        if (home / "airflow.cfg").exists():
            metastore_service.stop(load_config(str(home / "airflow.cfg"), environ={"SMARTSENSOR_HOME": str(home)}))
    assert "the catalog term over the workloads" in proc.stdout and "growth over the workloads" in proc.stdout
    assert "metastore-db: skipped" not in proc.stdout
    assert "EXPLAIN (ANALYZE, BUFFERS)" in proc.stdout  # --profile printed
    data = json.loads(out.read_text())
    assert data["db"] == "postgresql" and data["metastore"] == "postgresql"
    assert data["skipped"] == {} and data["metastore_db_load_unmeasured"] is None
    assert [w["workload"] for w in data["workloads"]] == ["W1", "W2"]
    assert [w["shards"] for w in data["workloads"]] == [4, 4]
    rss = data["workloads"][0]["worker_rss"]
    assert rss["spark"]["jvm"] is True and rss["thrift"]["jvm"] is False
    assert rss["thrift"]["peak_rss_mb"] < rss["spark"]["peak_rss_mb"]
    assert data["workloads"][1]["worker_rss"] == {}
    for w in data["workloads"]:
        res = w["results"]
        waiting = {k: v[0] for k, v in res.items()}
        landing = {k: v[1] for k, v in res.items()}
        inc_w, inc_l = waiting["incremental"], landing["incremental"]  # the round on thrift
        assert waiting["batched"]["catalog_calls"] == w["tables"]  # one call per table per round
        assert inc_w["catalog_calls"] == w["tables"]  # the same, through thrift
        assert waiting["triggerer"]["catalog_calls"] == w["tasks"]  # Airflow's triggerer: one per task per poke
        trig = waiting["triggerer"]
        assert trig["extrapolated"] == (w["tasks"] > 50) and trig["extra"]["sample"] == min(w["tasks"], 50)
        assert trig["extra"]["peak_rss_mb"] > 0  # measured in its own process
        if not trig["extrapolated"]:
            assert inc_l["marked"] == landing["triggerer"]["marked"]
        assert inc_l["marked"] == landing["batched"]["marked"]
        assert inc_w["schema_calls"] == inc_l["schema_calls"] == 0  # warmed: steady state
        par_w, par_l = waiting["thrift-parallel"], landing["thrift-parallel"]  # 4 tables listed at once
        assert par_w["catalog_calls"] == par_l["catalog_calls"] == w["tables"] and par_w["extra"]["parallelism"] == 4
        assert par_w["schema_calls"] == 0 and par_l["marked"] == inc_l["marked"]
        assert par_l["extra"]["finish_wall_seconds"] > 0  # the landing round's marking part
        fleet = landing["fleet"]  # real workers owning equal shares of the shards, started together
        assert fleet["extra"]["processes"] == 2 and fleet["extra"]["jvm"] is False
        assert fleet["extra"]["loaded"] == w["tasks"] and fleet["marked"] == inc_l["marked"]
        assert w["tables"] <= waiting["fleet"]["catalog_calls"] <= 2 * w["tables"]  # one listing per table per process
        assert 0 < w["metastore_floor_seconds"] < 1
        assert waiting["per-hash"]["catalog_calls"] == w["partitions"]  # one per distinct hash
        assert waiting["classic"]["catalog_calls"] == w["tasks"] and waiting["classic"]["extrapolated"]
        assert landing["batched"]["marked"] == landing["per-hash"]["marked"] > 0
        assert w["classic_sample"]["sample"] == 1
        for name in ("per-hash", "batched", "incremental", "thrift-parallel"):  # the index built before, timed apart
            assert waiting[name]["extra"]["index_build_seconds"] > 0 and landing[name]["marked"] == inc_l["marked"]
            # the change feed per range, nothing to write (+ a reconciliation per range if 5 s passed since the build)
            assert waiting[name]["db_statements"] in (w["shards"], 2 * w["shards"])
            # the feed per range + at most one UPDATE per range that had landed tasks (+ a reconciliation per range)
            assert w["shards"] < landing[name]["db_statements"] <= 3 * w["shards"]
        assert inc_w["extra"]["checks"] == w["partitions"] and inc_w["extra"]["quiet_round_due"] == 0
        assert inc_w["extra"]["quiet_round_statements"] in (w["shards"], 2 * w["shards"])  # the feed (+ reconcile)
        # per range: one indexed query, and on PostgreSQL the oldest open transaction it reads from
        assert inc_w["extra"]["reconcile_statements"] == 2 * w["shards"]
        floor = inc_l["extra"]["raw_floor"]
        assert floor["rows"] == inc_l["marked"] and floor["us_per_row"] > 0 and par_l["extra"]["raw_floor"] == floor
        lat = w["latency"]
        assert len(lat["signal"]["samples"]) == 2 and len(lat["no_signal"]["samples"]) == 2
        assert lat["signal"]["p95"] < 5  # the signal wakes the worker; the probe's own interval is 600 s
        assert lat["no_signal"]["p95"] < 2 + 1 + 5  # poke interval + round interval + a round (loose: shared CPU)

        # the metastore's database (PostgreSQL), read directly by metastore-db
        for kind, (md, par) in enumerate(zip(res["metastore-db"], res["thrift-parallel"], strict=True)):
            inc = (inc_w, inc_l)[kind]
            # one statement per round for every due check, whatever the tables; thrift: one listing per table
            assert md["catalog_calls"] == md["extra"]["metastore_statements"] == 1 and md["schema_calls"] == 0
            assert inc["catalog_calls"] == par["catalog_calls"] == w["tables"] and par["extra"]["parallelism"] == 4
            assert md["marked"] == inc["marked"] == par["marked"]
            # what the metastore's database executed in the round: the service's JDBC queries (several per
            # listing) on thrift, ours (with the pool's ping and the transaction's BEGIN/ROLLBACK) on metastore-db
            md_db, inc_db, par_db = (m["extra"]["metastore_db"] for m in (md, inc, par))
            assert 1 <= md_db["statements"] <= 6 and md_db["exec_ms"] >= 0
            assert inc_db["statements"] >= w["tables"] and par_db["statements"] >= w["tables"]
            assert inc_db["exec_ms"] > 0 and par_db["exec_ms"] > 0
            assert all(d["backend_cpu_ms"] is not None for d in (md_db, inc_db))
            assert all(d["service_cpu_ms"] is not None for d in (md_db, inc_db, par_db))  # the service's own CPU
        for md, lookup in zip(res["metastore-db"], res["metastore-db-lookup"], strict=True):  # feed or look-ups
            assert md["marked"] == lookup["marked"] and lookup["extra"]["metastore_statements"] == 1
        cold = res["metastore-db"][0]["extra"]["cold_round"]  # the feed's first look at the workload, timed apart
        assert cold["statements"] == 1 and cold["seconds"] > 0
        assert res["metastore-db"][1]["extra"]["feed"]["high_water"] > 0
        assert inc_l["marked"] > 0 and res["metastore-db"][1]["extra"]["raw_floor"] == inc_l["extra"]["raw_floor"]
        assert res["metastore-db"][1]["extra"]["finish_wall_seconds"] > 0
        for m in res["metastore-db"]:
            prof = m["extra"]["profile"]
            assert "run_round" in prof["cumulative"] and "Execution Time" in prof["explain"]
