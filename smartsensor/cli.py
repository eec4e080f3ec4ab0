"""The `smartsensor` command line. Thin: parses arguments, calls the service modules, prints."""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime
from typing import Any

import click
from sqlalchemy.exc import OperationalError, ProgrammingError, SQLAlchemyError

from schema.models import State
from sensors.errors import CheckError, SensorDefinitionError, UnknownSensorClass
from smartsensor import queries
from smartsensor.config import Config, ConfigError, load_config
from smartsensor.dagfile import DagFileError, load_sensor_file
from smartsensor.db import current_revision, init_db, make_engine
from smartsensor.registration import register

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

    def engine(self, require_schema: bool = True) -> Any:
        if self._engine is None:
            self._engine = make_engine(self.cfg.sql_alchemy_conn)
        if require_schema and current_revision(self._engine) is None:
            raise UserError(f"the metadata database {self.safe_url()} is not initialised: run `smartsensor db init`")
        return self._engine

    def safe_url(self) -> str:
        from sqlalchemy.engine import make_url
        return make_url(self.cfg.sql_alchemy_conn).render_as_string(hide_password=True)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


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
    if isinstance(exc, (ConfigError, SensorDefinitionError, DagFileError, UnknownSensorClass, CheckError)):
        return _first_line(exc)
    if isinstance(exc, (OperationalError, ProgrammingError)):
        url = app.safe_url() if app is not None and app._cfg is not None else "?"
        return f"metadata database {url} unreachable or unusable: {_first_line(exc.orig or exc)}"
    if isinstance(exc, SQLAlchemyError):
        return f"metadata database error: {_first_line(exc)}"
    return f"{type(exc).__name__}: {_first_line(exc)}"


def parse_date(value: str) -> datetime:
    """YYYY-MM-DD (or full ISO timestamp) → naive datetime."""
    for fmt in ("%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S"):
        try:
            return datetime.strptime(value, fmt)
        except ValueError:
            continue
    raise UserError(f"execution date {value!r} is not YYYY-MM-DD")


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
    when = parse_date(execution_date)
    from pathlib import Path
    sensors = load_sensor_file(file)
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
        if not queries.set_state(conn, (dag_id, task_id, parse_date(execution_date)), state):
            raise UserError(f"no task instance {dag_id}.{task_id} on {execution_date}")
    click.echo(f"{dag_id}.{task_id} {execution_date} → {state}")


if __name__ == "__main__":  # pragma: no cover
    main()
