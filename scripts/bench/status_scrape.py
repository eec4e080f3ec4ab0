"""Status scrape benchmark: what one ``smartsensor status`` (``service.status.collect_status``, also behind the page,
/metrics and /api/v1/status) costs over many waiting tasks, in all and statement by statement.

The workload is W3-like: ``--tasks`` waiting task instances (``smart_running``, started hours ago), 10 per distinct
check (``--per-check``), the checks spread over 100 partitions per table and over the shard ranges by their hash
(``workload.task_rows``, the rows bench.py registers). One check in ``--landed-every`` has landed: a task of it is in
``success`` since an hour ago, so its waiting tasks are stuck (``collect_stuck``'s after_landing) and the stuck query
has work. ``--finished`` more tasks of other checks ended long ago (the history a metadata DB keeps). Each row of the
table is the best of ``--repeats`` runs, with the statements it sent. Run it against the tree to measure, e.g.

    .venv/bin/python -m scripts.bench.status_scrape --postgres --tasks 1000000
    .venv/bin/python -m scripts.bench.status_scrape --tasks 20000            # SQLite in a temp folder

``--postgres`` runs on a throwaway PostgreSQL 15 (scripts/pg.sh), or on a new database of the server
./scripts/test.sh started when its SMARTSENSOR_TEST_PG_ADMIN_URL is set. ``--db-url URL --reuse`` measures a
database a previous run filled (``--keep``) again, e.g. from a checkout of another revision.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

from sqlalchemy import Connection, Engine, func, select, text

from scripts.bench.sql import analyze_for_benchmark, insert_tasks_for_benchmark
from scripts.bench.workload import task_rows
from scripts.harness.databases import on_a_database
from smartsensor.adapters.sql import leases as lease_sql, status as status_sql, tasks as task_sql
from smartsensor.adapters.sql.engine import init_db, make_engine, statement_count
from smartsensor.adapters.sql.status_store import SqlStatusReads
from smartsensor.config import Config, load_config
from smartsensor.domain.rows import TaskRow
from smartsensor.domain.states import State
from smartsensor.schema.models import task_instance as TI
from smartsensor.service.status import collect_status, collect_stuck

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)  # the scrape's clock: every row's times are relative to it
DAY = datetime(2025, 12, 31, tzinfo=timezone.utc)

# The table's rows, in order: collect_status as a whole, then each named query it sends (the first two together
# are collect_stuck; count_started_before and oldest_started_before only run when a task is past its time limit).
ROWS = (
    "collect_status",
    "collect_stuck",
    "waiting_after_landing",
    "waiting_start_by_exec",
    "count_by_state",
    "waiting_by_range",
    "worker_rounds",
    "load_leases",
    "list_workers",
    "load_zombies",
    "stranded_count",
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000, help="Waiting task instances (default 100,000).")
    parser.add_argument("--per-check", type=int, default=10, help="Waiting tasks per distinct check (W3: 10).")
    parser.add_argument("--landed-every", type=int, default=100, help="One check in this many has landed.")
    parser.add_argument(
        "--finished", type=int, default=None, help="Ended tasks of other checks (default: a tenth of --tasks)."
    )
    parser.add_argument("--shards", type=int, default=8, help="Shard ranges (W3: 8).")
    parser.add_argument("--repeats", type=int, default=3, help="Runs per row; the best is shown.")
    parser.add_argument("--postgres", action="store_true", help="A throwaway PostgreSQL (scripts/pg.sh).")
    parser.add_argument("--db-url", default=None, help="This database instead (SQLite in a temp folder by default).")
    parser.add_argument("--reuse", action="store_true", help="Measure the tasks already in --db-url, no fill.")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="Keep the database --postgres creates on ./scripts/test.sh's server (prints its URL; a throwaway "
        "server of this script's own goes at exit).",
    )
    return parser.parse_args(argv)


def write_config(home: Path, db_url: str, shards: int) -> Config:
    path = home / "airflow.cfg"
    path.write_text(f"[core]\nsql_alchemy_conn = {db_url}\n[smart_sensor]\nshards = {shards}\n")
    return load_config(str(path), environ={"SMARTSENSOR_HOME": str(home)})


def workload_rows(cfg: Config, args: argparse.Namespace) -> Iterator[list[TaskRow]]:
    """The task rows in chunks: the waiting ones, one landed task per ``landed_every``-th check, the history."""
    checks = max(1, args.tasks // args.per_check)
    tables = max(1, checks // 100)
    landed_at = NOW - timedelta(hours=1)
    for chunk in task_rows(cfg, "bench", args.tasks, checks, tables, DAY):
        waiting, extra = [], []
        for row in chunk:
            i = int(row.task_id[4:])
            since = NOW - timedelta(hours=2, seconds=i % 3600)
            waiting.append(row._replace(state=State.SMART_RUNNING, start_date=since, updated_at=since))
            if i < checks and i % args.landed_every == 0:
                extra.append(
                    waiting[-1]._replace(
                        task_id=f"landed{i:07d}", state=State.SUCCESS, end_date=landed_at, updated_at=landed_at
                    )
                )
        yield waiting + extra
    finished = args.tasks // 10 if args.finished is None else args.finished
    ended_at = NOW - timedelta(days=1)
    for chunk in task_rows(cfg, "history", finished, max(1, finished), max(1, finished // 100), DAY):
        yield [
            row._replace(task_id="done" + row.task_id[4:], state=State.SUCCESS, start_date=ended_at, end_date=ended_at)
            for row in chunk
        ]


def fill(engine: Engine, cfg: Config, args: argparse.Namespace) -> float:
    started = time.perf_counter()
    for chunk in workload_rows(cfg, args):
        with engine.begin() as conn:
            insert_tasks_for_benchmark(conn, chunk)
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM task_instance"))  # the visibility map, as autovacuum would leave it
    with engine.begin() as conn:
        analyze_for_benchmark(conn)
    return time.perf_counter() - started


def statements(cfg: Config) -> dict[str, Callable[[Engine], object]]:
    """Each row's work, on a connection of its own, as collect_status sends it."""
    bound = cfg.convergence_bound
    cutoff = NOW - timedelta(seconds=bound)
    ranges = [(r.lo, r.hi) for r in cfg.resolved_shard_ranges]
    zombie_cutoff = NOW - timedelta(seconds=cfg.settings.scheduler.zombie_threshold)

    def on_conn(fn: Callable[[Connection], object]) -> Callable[[Engine], object]:
        def run(engine: Engine) -> object:
            with engine.connect() as conn:
                return fn(conn)

        return run

    return {
        "collect_status": lambda engine: collect_status(SqlStatusReads(engine), cfg, NOW),
        "collect_stuck": lambda engine: collect_stuck(SqlStatusReads(engine), bound, NOW),
        "waiting_after_landing": on_conn(lambda conn: status_sql.waiting_after_landing(conn, cutoff)),
        "waiting_start_by_exec": on_conn(status_sql.waiting_start_by_exec),
        "count_by_state": on_conn(status_sql.count_by_state),
        "waiting_by_range": on_conn(lambda conn: status_sql.waiting_by_range(conn, ranges)),
        "worker_rounds": on_conn(status_sql.worker_rounds),
        "load_leases": on_conn(lease_sql.load_leases),
        "list_workers": on_conn(status_sql.list_workers),
        "load_zombies": on_conn(lambda conn: task_sql.load_zombies(conn, zombie_cutoff)),
        "stranded_count": on_conn(lambda conn: status_sql.stranded_count(conn, cfg.shard_code_upper_limit)),
    }


def measure(engine: Engine, fn: Callable[[Engine], object], repeats: int) -> tuple[float, int, object]:
    """(best seconds, statements sent per run, the last result)."""
    best, sent, result = float("inf"), 0, None
    for _ in range(repeats):
        before = statement_count(engine)
        started = time.perf_counter()
        result = fn(engine)
        best = min(best, time.perf_counter() - started)
        sent = statement_count(engine) - before
    return best, sent, result


def run(db_url: str, args: argparse.Namespace) -> int:
    home = Path(tempfile.mkdtemp(prefix="smartsensor-status-scrape-"))
    cfg = write_config(home, db_url, args.shards)
    engine = make_engine(db_url)
    init_db(engine)
    with engine.connect() as conn:
        present = conn.execute(select(func.count()).select_from(TI)).scalar_one()
    if args.reuse:
        print(f"reusing {present:,} task rows")
    elif present:
        print(f"the database already holds {present:,} task rows: use --reuse to measure them", file=sys.stderr)
        return 2
    else:
        print(f"filled in {fill(engine, cfg, args):.1f} s")
    with engine.connect() as conn:
        by_state = status_sql.count_by_state(conn)
    checks = max(1, args.tasks // args.per_check)
    landed = len(range(0, checks, args.landed_every))
    waiting = by_state.get(State.SMART_RUNNING, 0)
    print(
        f"status scrape on {engine.dialect.name}: {waiting:,} waiting tasks, {checks:,} distinct checks, "
        f"{landed:,} landed ({landed * args.per_check:,} tasks stuck), "
        f"{by_state.get(State.SUCCESS, 0):,} ended, {args.shards} shard ranges; best of {args.repeats}"
    )
    print(f"{'statement':<24}{'best ms':>12}{'statements':>12}")
    results: dict[str, Any] = {}
    for name, fn in statements(cfg).items():
        seconds, sent, results[name] = measure(engine, fn, args.repeats)
        print(f"{name:<24}{seconds * 1000:>12,.1f}{sent:>12}")
    stuck, _oldest = results["waiting_after_landing"]
    expected = min(landed * args.per_check, waiting)
    print(f"stuck after landing: {stuck:,} (expected {expected:,})")
    engine.dispose()
    return 0 if stuck == expected or args.reuse else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    return on_a_database(argv, args, "scripts.bench.status_scrape", run, keep=args.keep)


if __name__ == "__main__":
    sys.exit(main())
