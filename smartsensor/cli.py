"""The `smartsensor` command line. Thin: parses arguments, calls the service modules, prints."""

from __future__ import annotations

import json
import logging
import math
import re
import sys
from datetime import datetime
from typing import Any

import click
from sqlalchemy.exc import OperationalError, ProgrammingError, SQLAlchemyError

from schema.models import State
from sensors.base import check_utf8
from sensors.errors import CheckError, SensorDefinitionError, SensorModuleUnavailable, UnknownSensorClass, first_line
from smartsensor import queries
from smartsensor.config import Config, ConfigError, load_config
from smartsensor.dagfile import DagFileError, load_sensor_file
from smartsensor.db import DatabaseUrlError, current_revision, init_db, known_revisions, make_engine, normalize_url
from smartsensor.registration import register, validate_execution_date

log = logging.getLogger("smartsensor")


class UserError(click.ClickException):
    """An error shown as one line, without a traceback."""


class App:
    """Per-invocation state: options, the loaded config and a lazily created engine."""

    def __init__(self, config_path: str | None, verbose: bool) -> None:
        self.config_path = config_path
        self.verbose = verbose
        self._cfg: Config | None = None
        self._engine: Any = None

    @property
    def cfg(self) -> Config:
        if self._cfg is None:
            self._cfg = load_config(self.config_path)
        return self._cfg

    def engine(self, require_schema: bool = True, worker: bool = False) -> Any:
        """The metadata DB engine. ``worker``: Postgres ends this process's sessions that sit idle inside
        a transaction for lease_timeout, so a paused worker cannot hold the locks survivors need."""
        if self._engine is None:
            idle = self.cfg.get("smart_sensor", "lease_timeout") if worker else None
            self._engine = make_engine(self.cfg.sql_alchemy_conn, idle_in_transaction_timeout=idle, home=self.cfg.home)
        if require_schema:
            revision = current_revision(self._engine)
            if revision is None:
                raise UserError(f"the metadata database {self.safe_url()} is not initialised: run `smartsensor db init`")
            known = known_revisions()  # newest first
            if revision != known[0]:  # a host upgraded before (or after) the database: say which side to upgrade
                if revision in known:
                    raise UserError(f"the metadata database {self.safe_url()} is at schema revision {revision}, this "
                                    f"smartsensor needs {known[0]}: run `smartsensor db init` to upgrade it")
                raise UserError(f"the metadata database {self.safe_url()} is at schema revision {revision}, newer "
                                f"than this smartsensor knows ({known[0]}): upgrade smartsensor on this host")
        return self._engine

    def safe_url(self) -> str:
        try:
            return normalize_url(self.cfg.sql_alchemy_conn).render_as_string(hide_password=True)
        except DatabaseUrlError:
            return "(unparseable URL)"


class SmartSensorGroup(click.Group):
    """Turns known failures into one clear line and a non-zero exit (traceback with --verbose)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as exc:  # noqa: BLE001 - the one place errors become messages
            app = ctx.obj if isinstance(ctx.obj, App) else None
            if app is not None and app.verbose:
                raise
            raise UserError(describe_error(exc, app)) from None


def describe_error(exc: BaseException, app: App | None) -> str:
    """One line for the user."""
    if isinstance(exc, DagFileError):  # only `submit` reads DAG files itself; it registers a file all or nothing
        return f"{first_line(exc)}; nothing was registered"
    if isinstance(exc, (ConfigError, SensorDefinitionError, DagFileError, UnknownSensorClass, CheckError,
                        DatabaseUrlError, SensorModuleUnavailable)):
        return first_line(exc)
    if isinstance(exc, (OperationalError, ProgrammingError)):
        url = app.safe_url() if app is not None and app._cfg is not None else "?"
        return f"metadata database {url} unreachable or unusable: {first_line(exc.orig or exc)}"
    if isinstance(exc, SQLAlchemyError):
        return f"metadata database error: {first_line(exc)}"
    return f"{type(exc).__name__}: {first_line(exc)}"


_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}")


def parse_day(value: str) -> datetime:
    """An execution date to register: exactly YYYY-MM-DD, a real day between 1900-01-01 and 2999-12-31."""
    if not _DAY.fullmatch(value):
        raise UserError(f"execution date {value[:40]!r} is not YYYY-MM-DD (a day, without a time)")
    try:
        when = datetime.strptime(value, "%Y-%m-%d")
    except ValueError:
        raise UserError(f"execution date {value!r} is not a real day") from None
    try:
        return validate_execution_date(when)
    except SensorDefinitionError as exc:
        raise UserError(str(exc)) from None


def parse_task_date(value: str) -> datetime:
    """The execution date of an existing task instance: YYYY-MM-DD, or YYYY-MM-DDTHH:MM:SS for rows
    registered with a time of day by earlier versions (the scheduler passes that form)."""
    if _DAY.fullmatch(value):
        fmt = "%Y-%m-%d"
    elif _TIMESTAMP.fullmatch(value):
        fmt = "%Y-%m-%dT%H:%M:%S" if "T" in value else "%Y-%m-%d %H:%M:%S"
    else:
        raise UserError(f"execution date {value[:40]!r} is not YYYY-MM-DD (or YYYY-MM-DDTHH:MM:SS)")
    try:
        return datetime.strptime(value, fmt)
    except ValueError:
        raise UserError(f"execution date {value!r} is not a real date") from None


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in row.items()}


@click.group(cls=SmartSensorGroup)
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Config file (else $SMARTSENSOR_CONFIG, else $SMARTSENSOR_HOME/airflow.cfg).")
@click.option("--verbose", "-v", is_flag=True, help="Debug logging and full tracebacks.")
@click.pass_context
def main(ctx: click.Context, config_path: str | None, verbose: bool) -> None:
    """smartsensor: consolidate thousands of waiting Spark/Hive sensors into a few shard workers."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if not verbose:
        for noisy in ("py4j", "apscheduler", "alembic"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    ctx.obj = App(config_path, verbose)


# -- db --------------------------------------------------------------------------------------

@main.group()
def db() -> None:
    """Metadata database."""


@db.command("init")
@click.pass_obj
def db_init(app: App) -> None:
    """Create the schema or upgrade it to the newest migration (idempotent)."""
    before, head = init_db(app.engine(require_schema=False))
    if before == head:
        click.echo(f"database {app.safe_url()} already at revision {head}")
    else:
        click.echo(f"database {app.safe_url()} upgraded from {before or 'empty'} to {head}")


@db.command("reshard")
@click.pass_obj
def db_reshard(app: App) -> None:
    """Recompute shardcodes after shard_code_upper_limit changed (safe while workers run)."""
    limit = app.cfg.shard_code_upper_limit
    with app.engine().begin() as conn:
        moved = queries.reshard(conn, limit)
    click.echo(f"{moved} task instance(s) moved to shardcode = hashcode mod {limit}")


# -- config ----------------------------------------------------------------------------------

@main.group()
def config() -> None:
    """Inspect the effective configuration."""


@config.command("shards")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def config_shards(app: App, as_json: bool) -> None:
    """Print the effective shard ranges."""
    ranges = app.cfg.shard_ranges
    limit = app.cfg.shard_code_upper_limit
    if as_json:
        click.echo(json.dumps({"shard_code_upper_limit": limit,
                               "ranges": [{"shard": i, "min": r.lo, "max": r.hi} for i, r in enumerate(ranges)]}))
        return
    click.echo(f"{'shard':>5}  {'min (incl.)':>11}  {'max (excl.)':>11}  {'share':>6}")
    for i, r in enumerate(ranges):
        click.echo(f"{i:>5}  {r.lo:>11}  {r.hi:>11}  {100 * (r.hi - r.lo) / limit:>5.1f}%")


@config.command("show")
@click.pass_obj
def config_show(app: App) -> None:
    """Print every effective setting and where the file was looked for."""
    cfg = app.cfg
    click.echo(f"# file: {cfg.path} ({'found' if cfg.file_found else 'not found, defaults used'})")
    section = None
    for (sec, name), value in cfg.values.items():
        if sec != section:
            click.echo(f"[{sec}]")
            section = sec
        shown = ", ".join(value) if isinstance(value, list) else value
        click.echo(f"{name} = {shown}")


# -- tasks -----------------------------------------------------------------------------------

@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--execution-date", "-d", required=True, help="YYYY-MM-DD")
@click.option("--clear", is_flag=True, help="Reset task instances that already exist (even finished ones).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def submit(app: App, file: str, execution_date: str, clear: bool, as_json: bool) -> None:
    """Register every module-level sensor in FILE for one execution date."""
    when = parse_day(execution_date)
    from pathlib import Path
    check_utf8("sensor file path", file)
    sensors = load_sensor_file(file, timeout=app.cfg.get("core", "dag_file_import_timeout"))
    results = register(app.engine(), sensors, when, app.cfg, clear=clear, fileloc=str(Path(file).resolve()))
    if as_json:
        click.echo(json.dumps([_jsonable({"dag_id": r.dag_id, "task_id": r.task_id,
                                          "execution_date": r.execution_date, "state": r.state,
                                          "hashcode": r.hashcode, "shardcode": r.shardcode,
                                          "created": r.created, "reason": r.reason}) for r in results]))
        return
    width = max([len(r.dag_id) for r in results] + [6])
    twidth = max([len(r.task_id) for r in results] + [7])
    click.echo(f"{'dag_id':<{width}}  {'task_id':<{twidth}}  {'state':<13}  {'shardcode':>9}  note")
    for r in results:
        click.echo(f"{r.dag_id:<{width}}  {r.task_id:<{twidth}}  {r.state:<13}  {r.shardcode:>9}  {r.reason}")


TASK_FIELDS = ("dag_id", "task_id", "execution_date", "state", "try_number", "max_tries", "hashcode", "shardcode",
               "operator", "classpath", "start_date", "end_date", "hostname", "error", "attr_dict", "exec_dict")


@main.command()
@click.option("--state", type=click.Choice(State.ALL), default=None, help="Only this state.")
@click.option("--dag-id", default=None, help="Only this DAG.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.pass_obj
def tasks(app: App, state: str | None, dag_id: str | None, as_json: bool) -> None:
    """List task instances."""
    with app.engine().connect() as conn:
        rows = queries.list_tasks(conn, state=state, dag_id=dag_id)
    if as_json:
        click.echo(json.dumps([_jsonable({k: r[k] for k in TASK_FIELDS}) for r in rows]))
        return
    click.echo(f"{'dag_id':<24} {'task_id':<28} {'execution_date':<19} {'state':<13} {'try':>3} {'shard':>5}  error")
    for r in rows:
        error = (r["error"] or "").splitlines()[0][:60] if r["error"] else ""
        click.echo(f"{r['dag_id']:<24} {r['task_id']:<28} {r['execution_date']:%Y-%m-%d %H:%M:%S} "
                   f"{r['state'] or '':<13} {r['try_number']:>3} {r['shardcode'] if r['shardcode'] is not None else '':>5}  {error}")


@main.command("set-state")
@click.argument("dag_id")
@click.argument("task_id")
@click.argument("execution_date")
@click.argument("state", type=click.Choice(State.ALL))
@click.pass_obj
def set_state_cmd(app: App, dag_id: str, task_id: str, execution_date: str, state: str) -> None:
    """Set a task instance's state by hand (workers never overwrite it)."""
    with app.engine().begin() as conn:
        if not queries.set_state(conn, (dag_id, task_id, parse_task_date(execution_date)), state):
            raise UserError(f"no task instance {dag_id}.{task_id} on {execution_date}")
    click.echo(f"{dag_id}.{task_id} {execution_date} → {state}")


# -- running -----------------------------------------------------------------------------------

def _global_args(app: App) -> list[str]:
    """Options a child process needs to see the same configuration."""
    return ["--config", app.config_path] if app.config_path else []


@main.command("run-task")
@click.argument("dag_id")
@click.argument("task_id")
@click.argument("execution_date")
@click.option("--claimed", is_flag=True, hidden=True, help="The scheduler already set the task running.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@click.pass_obj
def run_task_cmd(app: App, dag_id: str, task_id: str, execution_date: str, claimed: bool, as_json: bool) -> None:
    """Run one task instance the classic way (its own process, its own pokes).

    SIGTERM/SIGINT end it at the next poke and hand the task back to `scheduled`, its try going on.
    """
    import signal
    import threading
    from smartsensor.classic import TaskRunError, run_task
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        result = run_task(app.engine(), app.cfg, dag_id, task_id, parse_task_date(execution_date), claimed=claimed,
                          stop=stop)
    except TaskRunError as exc:
        raise UserError(str(exc)) from None
    if as_json:
        click.echo(json.dumps(result.__dict__))
    else:
        click.echo(f"{dag_id}.{task_id} {execution_date}: {result.state} after {result.pokes} poke(s), "
                   f"{result.seconds:.1f} s" + (f" ({result.error})" if result.error else ""))


class Seconds(click.FloatRange):
    """A finite number of seconds within bounds (click's FloatRange lets NaN through)."""

    name = "seconds"

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        number = super().convert(value, param, ctx)
        if number is not None and not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return number


INTERVAL = Seconds(min=0.05, max=86400)
EXIT_ROUND_FAILED = 1
EXIT_NOTHING_WRITTEN = 4  # worker --once: the round lost its lease, or claimed no range at all


@main.command()
@click.option("--shard-min", type=click.IntRange(min=0), default=None,
              help="Pin: first shardcode owned (inclusive). Default: claim leases.")
@click.option("--shard-max", type=click.IntRange(min=1), default=None, help="Pin: end of the range (exclusive).")
@click.option("--once", is_flag=True, help="Run one round and exit (leased: claim, round, release). Exit status 1: "
              "the round failed; 4: it claimed no range or lost its lease, so it wrote nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per round.")
@click.option("--interval", type=INTERVAL, default=None,
              help="Seconds between rounds, 0.05-86400 (default [smart_sensor] poke_interval).")
@click.option("--metrics-port", type=click.IntRange(1, 65535), default=None,
              help="Serve Prometheus metrics on 127.0.0.1:PORT.")
@click.option("--no-signals", is_flag=True, help="Do not listen for landing signals.")
@click.pass_obj
def worker(app: App, shard_min: int | None, shard_max: int | None, once: bool, as_json: bool,
           interval: float | None, metrics_port: int | None, no_signals: bool) -> None:
    """Run a shard worker until SIGTERM: leased ranges (default, with failover) or a pinned range."""
    from sensors.base import import_sensor_modules, smart_class_names
    from smartsensor.worker import ShardWorker
    from smartsensor.worker_loop import LeasedWorker, PinnedWorker, RoundMetrics, run_worker
    limit = app.cfg.shard_code_upper_limit
    engine = app.engine(worker=True)
    if (shard_min is None) != (shard_max is None):
        raise UserError("give both --shard-min and --shard-max (a pinned range), or neither (leases)")
    if shard_min is not None and shard_max is not None:
        if not 0 <= shard_min < shard_max <= limit:
            raise UserError(f"shard range [{shard_min}, {shard_max}) must satisfy 0 <= min < max <= {limit}")
        runner: Any = PinnedWorker(ShardWorker(engine, app.cfg, shard_min, shard_max))
    else:
        runner = LeasedWorker(engine, app.cfg)
    failures = import_sensor_modules(app.cfg.sensor_modules)
    for module, why in failures.items():
        click.echo(f"WARNING: [smart_sensor] sensor_modules: {module!r} cannot be imported on this host ({why}); "
                   f"tasks of its classes wait (within their own timeouts) until it can, every other task is "
                   f"served", err=True)
    unknown = sorted(set(app.cfg.sensors_enabled) - smart_class_names())
    if unknown:
        click.echo(f"WARNING: [smart_sensor] sensors_enabled names {', '.join(unknown)}, which no built-in or "
                   f"configured sensor module defines as a @smart_eligible class"
                   + (" (perhaps the module that fails to import)" if failures else ""), err=True)
    metrics = RoundMetrics(metrics_port) if metrics_port else None
    results = []

    def emit(result) -> None:  # type: ignore[no-untyped-def]
        if once:
            results.append(result)
        if as_json:
            click.echo(result.to_json())
        else:
            marked = ", ".join(f"{k} {v}" for k, v in sorted(result.marked.items())) or "nothing"
            click.echo(f"[{result.shard_min},{result.shard_max}) loaded {result.loaded}, "
                       f"{result.distinct_hashes} distinct, poked {result.groups_poked}, catalog calls "
                       f"{result.catalog_calls}, marked {marked}, {result.seconds:.2f} s"
                       + (f" ERROR {result.error}" if result.error else ""))
        sys.stdout.flush()

    status = run_worker(runner, engine, app.cfg, interval or app.cfg.poke_interval, once, emit, metrics,
                        signals=not no_signals)
    if status:
        click.echo("Error: the Spark driver JVM died; the worker stopped and released its leases "
                   "(restart it, or run it under `smartsensor workers`, which does)", err=True)
        sys.exit(status)
    if once:
        _report_once(results)


def _report_once(results: list[Any]) -> None:
    """`worker --once` says what its round did when that was not a normal round, with a distinct exit status."""
    if not results:
        click.echo("Error: this worker claimed no shard range: every range is leased by a live worker (they check "
                   "those tasks); nothing was checked or written", err=True)
        sys.exit(EXIT_NOTHING_WRITTEN)
    failed = [r for r in results if r.error]
    if failed:
        click.echo(f"Error: the round failed: {failed[0].error}", err=True)
        sys.exit(EXIT_ROUND_FAILED)
    fenced = [r for r in results if r.fenced_out]
    if fenced:
        click.echo("Error: this worker lost its lease during the round (another worker took the range over, e.g. "
                   "after a pause past lease_timeout): its results were not written; the new owner checks these "
                   "tasks", err=True)
        sys.exit(EXIT_NOTHING_WRITTEN)


@main.command()
@click.option("-n", "count", type=click.IntRange(1, 1000), default=None,
              help="Worker processes (default: one per shard range).")
@click.option("--interval", type=INTERVAL, default=None, help="Seconds between rounds (0.05-86400).")
@click.option("--json", "as_json", is_flag=True, help="Workers print one JSON object per round.")
@click.option("--pinned", is_flag=True, help="Fixed contiguous blocks of the ranges instead of leases.")
@click.pass_obj
def workers(app: App, count: int | None, interval: float | None, as_json: bool, pinned: bool) -> None:
    """Start N shard workers (leases: extras stand by); restart crashed ones; stop all on SIGTERM."""
    from smartsensor.worker_loop import supervise_workers
    app.engine()  # fail fast with a clear message if the DB is not ready
    if count is not None and count < 1:
        raise UserError("-n must be at least 1")
    extra = (["--interval", str(interval)] if interval else []) + (["--json"] if as_json else [])
    supervise_workers(app.cfg, count, _global_args(app), extra_args=extra, pinned=pinned)


@main.command()
@click.option("--once", is_flag=True, help="One pass, wait for the classic tasks it started, exit.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per pass.")
@click.pass_obj
def scheduler(app: App, once: bool, as_json: bool) -> None:
    """Re-queue retries after retry_delay; run scheduled tasks in classic mode (at most [scheduler] parallelism);
    end classic runs that stopped heartbeating (zombies)."""
    from smartsensor.scheduler import Scheduler

    def emit(summary: dict[str, Any]) -> None:
        if as_json:
            click.echo(json.dumps(summary))
        elif any(summary.get(k) for k in ("requeued_smart", "requeued_classic", "failed_bad_rows", "zombies",
                                          "launched", "finished", "error")):
            click.echo(" ".join(f"{k}={v}" for k, v in summary.items()))
        sys.stdout.flush()
    Scheduler(app.engine(), app.cfg, _global_args(app)).run(once, emit)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def status(app: App, as_json: bool) -> None:
    """Tasks per state and shard range, dedup ratio, workers' last rounds."""
    from smartsensor.status import collect_status, status_lines
    data = collect_status(app.engine(), app.cfg)
    if as_json:
        click.echo(json.dumps(data))
        return
    for line in status_lines(data, app.cfg.shard_code_upper_limit):
        click.echo(line)


@main.command("signal")
@click.argument("partition_names", nargs=-1, required=True)
@click.pass_obj
def signal_cmd(app: App, partition_names: tuple[str, ...]) -> None:
    """Tell the workers that partitions landed (db.table/k=v/...): the owner checks them at once."""
    from smartsensor.signals import send_signal
    engine = app.engine()
    for name in partition_names:
        click.echo(f"signalled {send_signal(engine, name)}")


# -- metastore service ---------------------------------------------------------------------------

@main.group()
def metastore() -> None:
    """A local Hive metastore service shared by the pipeline and N worker processes."""


def _print_metastore(st, as_json: bool) -> None:  # type: ignore[no-untyped-def]
    if as_json:
        click.echo(json.dumps({"running": st.running, "pid": st.pid, "uri": st.uri, "log": str(st.log)}))
    elif st.running:
        click.echo(f"metastore running: pid {st.pid}, {st.uri} (log {st.log})")
    else:
        click.echo(f"metastore not running ({st.uri})")


@metastore.command("start")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def metastore_start(app: App, as_json: bool) -> None:
    """Start the service (idempotent). Point [spark] metastore_uris at the printed URI."""
    from smartsensor.metastore import MetastoreError, start
    try:
        _print_metastore(start(app.cfg), as_json)
    except MetastoreError as exc:
        raise UserError(str(exc)) from None


@metastore.command("stop")
@click.pass_obj
def metastore_stop(app: App) -> None:
    """Stop the service."""
    from smartsensor.metastore import stop
    click.echo("metastore stopped" if stop(app.cfg) else "metastore was not running")


@metastore.command("status")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def metastore_status(app: App, as_json: bool) -> None:
    """Is the service running? Exit 1 if not."""
    from smartsensor.metastore import status as ms_status
    st = ms_status(app.cfg)
    _print_metastore(st, as_json)
    if not st.running:
        sys.exit(1)


if __name__ == "__main__":  # pragma: no cover
    main()
