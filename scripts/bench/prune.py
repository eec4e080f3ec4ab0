"""Retention benchmark: the metadata DB's size with ``--tries`` ended tries in it, and after ``smartsensor db prune``
(``service.retention.prune``) deleted them, with the rows it deleted, its seconds and its statements.

The tries are Airflow sensors' as the external door registers them (a task instance like a NamedHivePartitionSensor's
and its Airflow key: ``sql.insert_ended_tries_for_benchmark``), ended two months ago; ``--waiting`` more tries,
registered now and waiting, must stay. The table shows the size on disk before, after the prune (a deleted row's
space is free for new rows, the file does not shrink), and after a VACUUM (SQLite's; PostgreSQL's VACUUM FULL):
what the live rows take. Run it against the tree, e.g.

    .venv/bin/python -m scripts.bench.prune --tries 1000000            # SQLite in a temp folder
    .venv/bin/python -m scripts.bench.prune --postgres --tries 1000000

``--postgres`` runs on a throwaway PostgreSQL 15 (scripts/pg.sh), or on a new database of the server
./scripts/test.sh started when its SMARTSENSOR_TEST_PG_ADMIN_URL is set.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timedelta, timezone

from sqlalchemy import Engine, func, select

from scripts.bench.sql import database_bytes_for_benchmark, insert_ended_tries_for_benchmark, vacuum_for_benchmark
from scripts.harness.databases import on_a_database
from smartsensor.adapters.sql.engine import init_db, make_engine
from smartsensor.adapters.sql.status_store import SqlExpiredRows
from smartsensor.domain.states import State
from smartsensor.schema.models import external_task as EX, task_instance as TI
from smartsensor.service.retention import prune

MB = 1024 * 1024


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=1_000_000, help="Ended tries (default 1,000,000).")
    parser.add_argument("--waiting", type=int, default=10_000, help="Waiting tries that stay (default 10,000).")
    parser.add_argument("--batch-size", type=int, default=5000, help="[retention] batch_size (default 5000).")
    parser.add_argument("--postgres", action="store_true", help="A throwaway PostgreSQL (scripts/pg.sh).")
    parser.add_argument("--db-url", default=None, help="This empty database instead (SQLite in a temp folder).")
    return parser.parse_args(argv)


def rows(engine: Engine) -> tuple[int, int]:
    with engine.connect() as conn:
        return (
            conn.execute(select(func.count()).select_from(TI)).scalar_one(),
            conn.execute(select(func.count()).select_from(EX)).scalar_one(),
        )


def size(engine: Engine) -> int:
    with engine.connect() as conn:
        return database_bytes_for_benchmark(conn)


def run(db_url: str, args: argparse.Namespace) -> int:
    engine = make_engine(db_url)
    init_db(engine)
    now = datetime.now(timezone.utc)
    started = time.perf_counter()
    with engine.begin() as conn:
        insert_ended_tries_for_benchmark(conn, 0, args.tries, now - timedelta(days=60, seconds=args.tries))
        insert_ended_tries_for_benchmark(conn, args.tries, args.waiting, now, State.SMART_PENDING)
    vacuum_for_benchmark(engine, full=False)  # statistics, and PostgreSQL's visibility map
    filled = time.perf_counter() - started
    before, counted = size(engine), rows(engine)
    print(
        f"{engine.dialect.name}: {counted[0]:,} task instances, {counted[1]:,} Airflow keys, filled in {filled:.0f} s"
    )
    report = prune(SqlExpiredRows(engine), timedelta(days=30), args.batch_size, now=now)
    after = size(engine)
    vacuum_for_benchmark(engine, full=True)
    vacuumed = size(engine)
    left = rows(engine)
    statements = sum(t.statements for t in report.tables.values())
    seconds = sum(t.seconds for t in report.tables.values())
    print(
        f"{'ended tries':>12} {'before MB':>10} {'after prune MB':>15} {'after VACUUM MB':>16} "
        f"{'rows deleted':>13} {'seconds':>8} {'statements':>11}"
    )
    print(
        f"{args.tries:>12,} {before / MB:>10,.1f} {after / MB:>15,.1f} {vacuumed / MB:>16,.1f} "
        f"{report.rows:>13,} {seconds:>8,.1f} {statements:>11,}"
    )
    for line in report.lines():
        print(f"  {line}")
    print(f"left: {left[0]:,} task instances, {left[1]:,} Airflow keys (the waiting ones)")
    engine.dispose()
    return 0 if left == (args.waiting, args.waiting) and report.rows == 2 * args.tries else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    return on_a_database(argv, args, "scripts.bench.prune", run)


if __name__ == "__main__":
    sys.exit(main())
