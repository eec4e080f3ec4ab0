"""Queries only the benchmark (``scripts/bench/bench.py``, ``status_scrape.py``) sends, on its own throwaway database:
its set-up, on the tables the schema defines (``smartsensor.schema.models``). They live beside it, not in the
installed package; the product itself is driven through its public seams (``tests/unit/test_bench_seams.py``)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Sequence

from sqlalchemy import Connection, Engine, bindparam, delete, insert, select, text, update

from smartsensor.domain.rows import TaskRow
from smartsensor.domain.states import State
from smartsensor.schema.models import external_task as EX, task_instance as TI

INSERT_CHUNK = 5000  # rows per executemany


def insert_tasks_for_benchmark(conn: Connection, rows: Sequence[TaskRow]) -> None:
    """Insert a workload's task rows (copies of rows ``register``'s ``build_row`` built: a million tasks are not
    registered one sensor at a time). 1 executemany per INSERT_CHUNK rows."""
    for i in range(0, len(rows), INSERT_CHUNK):
        conn.execute(insert(TI), [row.columns() for row in rows[i : i + INSERT_CHUNK]])


def waiting_attr_dicts_for_benchmark(conn: Connection) -> list[str]:
    """The attr_dict of every waiting task, in key order (the simulated triggerer's pokes). 1 statement."""
    query = select(TI.c.attr_dict).where(TI.c.state.in_(State.SMART_WAITING))
    return [a for (a,) in conn.execute(query.order_by(TI.c.dag_id, TI.c.task_id, TI.c.execution_date))]


def delete_all_tasks_for_benchmark(conn: Connection) -> int:
    """Empty task_instance (bench.py only, on its own throwaway database). 1 statement."""
    return conn.execute(delete(TI)).rowcount


def reset_to_waiting_for_benchmark(conn: Connection, now: datetime) -> int:
    """Every task waiting in its first try since ``now`` (bench.py only: the same state for each strategy)."""
    return conn.execute(
        update(TI).values(
            state=State.SMART_RUNNING, try_number=1, start_date=now, end_date=None, hostname=None, error=None
        )
    ).rowcount


def analyze_for_benchmark(conn: Connection) -> None:
    """ANALYZE task_instance on PostgreSQL (bench.py only: its statistics after a reset of every row)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("ANALYZE task_instance"))


def landed_hashcodes_for_benchmark(conn: Connection) -> list[int]:
    """Hashcodes of the tasks a landing round marked success (bench.py only). 1 statement."""
    return [h for (h,) in conn.execute(select(TI.c.hashcode).where(TI.c.state == State.SUCCESS).distinct())]


def raw_mark_for_benchmark(conn: Connection, hashcodes: list[int], now: datetime) -> int:
    """PostgreSQL's (or SQLite's) floor for marking these tasks: the plainest UPDATE of the same rows to the same
    values, without range, state guard or fence (bench.py only). 1 statement on PostgreSQL."""
    values = {"state": State.SUCCESS, "end_date": now, "updated_at": now}
    if conn.dialect.name == "postgresql":
        from sqlalchemy import BigInteger
        from sqlalchemy.dialects.postgresql import ARRAY

        stmt = update(TI).where(TI.c.hashcode == bindparam("h", type_=ARRAY(BigInteger)).any_()).values(**values)
        return conn.execute(stmt, {"h": hashcodes}).rowcount
    total = 0
    for i in range(0, len(hashcodes), 5000):
        total += conn.execute(update(TI).where(TI.c.hashcode.in_(hashcodes[i : i + 5000])).values(**values)).rowcount
    return total


def insert_ended_tries_for_benchmark(
    conn: Connection, first: int, count: int, registered_at: datetime, state: str = State.SUCCESS
) -> None:
    """``count`` tries of Airflow sensors as the external door registers them (a task instance like a
    NamedHivePartitionSensor's, and its Airflow key), numbered from ``first``, registered a second apart from
    ``registered_at``; ``state`` ended an hour after (a waiting state: not ended). 2 executemany per INSERT_CHUNK
    tries (prune.py only, on its own throwaway database)."""
    exec_dict = (
        '{"execution_timeout":null,"exponential_backoff":false,"max_wait":null,"poke_interval":300,"retries":0,'
        '"retry_delay":300,"soft_fail":false,"timeout":86400}'
    )
    waiting = state in State.SMART_WAITING
    for start in range(first, first + count, INSERT_CHUNK):
        tasks, keys = [], []
        for i in range(start, min(start + INSERT_CHUNK, first + count)):
            dag_id, task_id = f"etl_daily_{i % 500:03d}", f"wait_partition_{i // 500:05d}"
            at = registered_at + timedelta(seconds=i)
            ended = at + timedelta(hours=1)
            tasks.append(
                {
                    "dag_id": dag_id,
                    "task_id": task_id,
                    "execution_date": at,
                    "state": state,
                    "try_number": 1,
                    "max_tries": 0,
                    "start_date": at,
                    "end_date": None if waiting else ended,
                    "updated_at": at if waiting else ended,
                    "operator": "NamedHivePartitionSensor",
                    "classpath": "smartsensor.sensors.hive.NamedHivePartitionSensor",
                    "attr_dict": f'{{"partition_names":["warehouse.events_{i % 500:03d}/ds=2026-11-22"]}}',
                    "exec_dict": exec_dict,
                    "hashcode": (i * 2654435761) % (2**63),
                    "shardcode": (i * 2654435761) % 10000,
                }
            )
            keys.append(
                {
                    "dag_id": dag_id,
                    "task_id": task_id,
                    "run_id": f"scheduled__{at.date().isoformat()}T00:00:00+00:00",
                    "map_index": -1,
                    "try_number": 1,
                    "logical_date": at,
                    "ti_task_id": task_id,
                    "ti_execution_date": at,
                    "registered_at": at,
                }
            )
        conn.execute(insert(TI), tasks)
        conn.execute(insert(EX), keys)


def database_bytes_for_benchmark(conn: Connection) -> int:
    """The metadata DB's size on disk: SQLite's file (its write-ahead log checkpointed into it first), PostgreSQL's
    database (prune.py only)."""
    if conn.dialect.name == "sqlite":
        conn.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))
        size = conn.execute(text("PRAGMA page_size")).scalar_one()
        return int(size * conn.execute(text("PRAGMA page_count")).scalar_one())
    return int(conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one())


def vacuum_for_benchmark(engine: Engine, full: bool) -> None:
    """SQLite's VACUUM (the file rewritten without its free pages), or PostgreSQL's VACUUM (``full``: VACUUM FULL,
    the tables rewritten) and ANALYZE, outside a transaction (prune.py only)."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        if conn.dialect.name == "sqlite":
            conn.execute(text("VACUUM"))
        else:
            conn.execute(text("VACUUM FULL ANALYZE" if full else "VACUUM ANALYZE"))
