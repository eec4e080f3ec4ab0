"""What every command shares: the per-invocation App (config, engine), one-line errors, argument parsers,
and the ``smartsensor`` group the commands are added to (``smartsensor.cli``)."""

from __future__ import annotations

import logging
import math
import re
import sys
from datetime import datetime
from typing import Any

import click

from smartsensor.adapters.sql.engine import (
    DatabaseUrlError,
    current_revision,
    make_engine,
    normalize_url,
    schema_problem,
)
from smartsensor.adapters.sql.store_errors import database_problem
from smartsensor.config import Config, ConfigError, load_config
from smartsensor.domain.clock import as_utc, iso
from smartsensor.ports import StoreError
from smartsensor.sensors.errors import (
    CheckError,
    SensorDefinitionError,
    SensorModuleUnavailable,
    UnknownSensorClass,
    first_line,
)
from smartsensor.standalone.dagfile import DagFileError
from smartsensor.standalone.registration import validate_execution_date

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
        """The metadata DB engine. PostgreSQL ends this process's sessions that sit idle inside a transaction for
        lease_timeout, so a paused worker, or a `serve` whose COMMIT was lost on its way (the transaction left open
        on the server, its locks held), cannot hold the locks others need for longer. On PostgreSQL every call waits
        at most ``[core] sql_call_timeout`` for its answer (``make_engine``'s ``call_timeout``). `db init`
        (``require_schema`` off) has neither: a migration may run long."""
        if self._engine is None:
            # `db init` (require_schema=False) alone runs without either bound: a migration may run long.
            idle = self.cfg.settings.smart_sensor.lease_timeout if require_schema else None
            bound = self.cfg.settings.core.sql_call_timeout if require_schema else None
            self._engine = make_engine(
                self.cfg.sql_alchemy_conn, idle_in_transaction_timeout=idle, home=self.cfg.home, call_timeout=bound
            )
        if require_schema:
            problem = schema_problem(current_revision(self._engine))
            if problem:
                raise UserError(f"the metadata database {self.safe_url()} {problem}")
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
        except Exception as exc:  # the one place errors become messages
            app = ctx.obj if isinstance(ctx.obj, App) else None
            if app is not None and app.verbose:
                raise
            raise UserError(describe_error(exc, app)) from None


def describe_error(exc: BaseException, app: App | None) -> str:
    """One line for the user. A store's error (``ports.StoreError``) is told as the adapter's error it stands for."""
    if isinstance(exc, StoreError) and exc.__cause__ is not None:
        exc = exc.__cause__
    if isinstance(exc, DagFileError):  # only `submit` reads DAG files itself; it registers a file all or nothing
        return f"{first_line(exc)}; nothing was registered"
    if isinstance(
        exc,
        (
            ConfigError,
            SensorDefinitionError,
            DagFileError,
            UnknownSensorClass,
            CheckError,
            DatabaseUrlError,
            SensorModuleUnavailable,
        ),
    ):
        return first_line(exc)
    problem = database_problem(exc)
    if problem is not None:
        unusable, reason = problem
        if not unusable:
            return f"metadata database error: {reason}"
        url = app.safe_url() if app is not None and app._cfg is not None else "?"
        return f"metadata database {url} unreachable or unusable: {reason}"
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
        return as_utc(datetime.strptime(value, fmt))
    except ValueError:
        raise UserError(f"execution date {value!r} is not a real date") from None


def jsonable(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (iso(v) if isinstance(v, datetime) else v) for k, v in row.items()}


@click.group(cls=SmartSensorGroup)
@click.version_option(package_name="smartsensor", prog_name="smartsensor")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Config file (else $SMARTSENSOR_CONFIG, else $SMARTSENSOR_HOME/airflow.cfg).",
)
@click.option("--verbose", "-v", is_flag=True, help="Debug logging and full tracebacks.")
@click.pass_context
def main(ctx: click.Context, config_path: str | None, verbose: bool) -> None:
    """smartsensor: consolidate thousands of waiting Spark/Hive sensors into a few shard workers."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not verbose:
        for noisy in ("py4j", "alembic"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    ctx.obj = App(config_path, verbose)


def global_args(app: App) -> list[str]:
    """Options a child process needs to see the same configuration."""
    return ["--config", app.config_path] if app.config_path else []


class Seconds(click.FloatRange):
    """A finite number of seconds within bounds (click's FloatRange lets NaN through)."""

    name = "seconds"

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        number = super().convert(value, param, ctx)
        if number is not None and not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return number


INTERVAL = Seconds(min=0.05, max=86400)
