"""Workload set-up for the benchmark (bench.py), fast enough for W3 (1,000 tables, 100,000 partitions, 1,000,000 tasks).

Tables: the first one is created by Spark SQL (a real Parquet table, the shape a pipeline makes); the others
are copies of its metastore definition made through the thrift API (``create_table``), ~100x faster than
one Spark DDL each. Landings: ``add_partitions`` through thrift, one call per table per 500 partitions
(``ALTER TABLE … ADD PARTITION`` through Spark costs ~2 s per 100). Task rows: one ``build_row`` per distinct
partition (the check, hash and shard do not depend on the task), copied per task with its own dag/task id,
inserted in chunks so a million rows never sit in memory at once. Only generated names, no user text.
"""

from __future__ import annotations

import copy
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, Iterator

from hmsclient.genthrift.hive_metastore.ttypes import AddPartitionsRequest, AlreadyExistsException, Partition

from scripts.bench import sql as bench_sql
from smartsensor.adapters.catalog.thrift_catalog import ThriftCatalog
from smartsensor.domain.rows import TaskRow
from smartsensor.sensors import NamedHivePartitionSensor
from smartsensor.standalone.registration import build_row

INSERT_CHUNK = 20_000
DAG_IDS = [f"dag{d:02d}" for d in range(50)]  # task i is in DAG_IDS[i % 50]
LAND_CHUNK = 500


def partition_of(i: int, tables: int) -> tuple[str, str]:
    """Partition i → (table, ds): partitions are spread round-robin over the tables."""
    return f"t{i % tables:03d}", f"d{i // tables:05d}"


def create_tables(spark: Any, catalog: ThriftCatalog, db: str, tables: int) -> None:
    """db.t000 … by Spark SQL for the first, thrift copies of its definition for the rest (idempotent)."""
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {db}")
    first = partition_of(0, tables)[0]
    spark.sql(f"CREATE TABLE IF NOT EXISTS {db}.{first} (x INT) PARTITIONED BY (ds STRING) STORED AS PARQUET")
    template = catalog.call("reading the template", "get_table", db, first)
    base = template.sd.location.rsplit("/", 1)[0]
    existing = set(catalog.call("listing tables", "get_all_tables", db))
    for t in range(tables):
        name = partition_of(t, tables)[0]
        if name in existing:
            continue
        table = copy.deepcopy(template)
        table.tableName = name
        table.sd.location = f"{base}/{name}"
        table.parameters = {k: v for k, v in (template.parameters or {}).items() if not k.startswith("transient")}
        try:
            catalog.call(f"creating {db}.{name}", "create_table", table)
        except AlreadyExistsException:
            pass


def land(catalog: ThriftCatalog, db: str, partitions: list[int], tables: int, threads: int = 1) -> float:
    """Add the given partitions (``add_partitions``, ifNotExists): what a pipeline's commit does, on ``threads``
    tables at once (the catalog needs as many connections). Seconds."""
    started = time.perf_counter()
    by_table: dict[str, list[str]] = {}
    for p in partitions:
        table, ds = partition_of(p, tables)
        by_table.setdefault(table, []).append(ds)

    def land_table(item: tuple[str, list[str]]) -> None:
        table, values = item
        sd = catalog.call(f"reading {db}.{table}", "get_table", db, table).sd
        for i in range(0, len(values), LAND_CHUNK):
            parts = []
            for ds in values[i : i + LAND_CHUNK]:
                psd = copy.deepcopy(sd)
                psd.location = f"{sd.location}/ds={ds}"
                parts.append(Partition(values=[ds], dbName=db, tableName=table, sd=psd, parameters={}))
            request = AddPartitionsRequest(dbName=db, tblName=table, parts=parts, ifNotExists=True, needResult=False)
            catalog.call(f"landing on {db}.{table}", "add_partitions_req", request)

    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        list(pool.map(land_table, by_table.items()))
    return time.perf_counter() - started


def task_rows(cfg: Any, db: str, tasks: int, parts: int, tables: int, day: datetime) -> Iterator[list[TaskRow]]:
    """The workload's task rows in chunks: task i waits for partition i % parts (so tasks/parts share each)."""
    by_partition: dict[int, TaskRow] = {}
    chunk: list[TaskRow] = []
    for i in range(tasks):
        p = i % parts
        row = by_partition.get(p)
        if row is None:
            table, ds = partition_of(p, tables)
            sensor = NamedHivePartitionSensor(
                task_id="template", partition_names=[f"{db}.{table}/ds={ds}"], poke_interval=60, timeout=24 * 3600
            )
            row = by_partition[p] = build_row(sensor, "template", day, cfg)[0]
        chunk.append(row._replace(dag_id=DAG_IDS[i % len(DAG_IDS)], task_id=f"task{i:07d}"))
        if len(chunk) == INSERT_CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def create_workload(
    spark: Any,
    catalog: ThriftCatalog,
    engine: Any,
    cfg: Any,
    db: str,
    tasks: int,
    parts: int,
    tables: int,
    day: datetime,
) -> float:
    """Tables in the metastore and task instances in the DB. Returns seconds."""
    started = time.perf_counter()
    create_tables(spark, catalog, db, tables)
    for chunk in task_rows(cfg, db, tasks, parts, tables, day):
        with engine.begin() as conn:
            bench_sql.insert_tasks_for_benchmark(conn, chunk)
    return time.perf_counter() - started
