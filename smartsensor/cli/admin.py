"""Commands that administer the installation: `db`, `config`, `metastore`."""

from __future__ import annotations

import json
import os
import secrets
import sys
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import click

from smartsensor.adapters.sql import landings as landing_sql, tasks as task_sql
from smartsensor.adapters.sql.engine import init_db, normalize_url
from smartsensor.adapters.sql.status_store import SqlExpiredRows
from smartsensor.cli.app import App, UserError
from smartsensor.config import ConfigError, config_location, load_config
from smartsensor.config_keys import CATALOG_BACKENDS, render_config
from smartsensor.domain.clock import iso
from smartsensor.service.retention import prune

if TYPE_CHECKING:  # imported where used: the metastore commands only
    from smartsensor.adapters.metastore_service import MetastoreServiceStatus


@click.group()
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
    moved = task_sql.reshard_tasks(app.engine(), limit)
    tables = landing_sql.reshard_watches(app.engine(), limit)
    click.echo(f"{moved} task instance(s) moved to shardcode = hashcode mod {limit}")
    click.echo(f"{tables} watched table(s) moved, with their landings, to shardcodes below {limit}")


@db.command("prune")
@click.option(
    "--older-than",
    "older_than",
    type=click.FloatRange(1, 36500),
    default=None,
    help="Days; default [retention] max_age_days.",
)
@click.option("--batch-size", type=click.IntRange(100, 100_000), default=None, help="Default [retention] batch_size.")
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; delete nothing.")
@click.pass_obj
def db_prune(app: App, older_than: float | None, batch_size: int | None, dry_run: bool) -> None:
    """Delete ended task instances, their Airflow keys, the landings of tables no longer watched and idle worker
    rounds older than the age (never a waiting task or an undelivered landing; safe while workers run)."""
    settings = app.cfg.settings.retention
    days = settings.max_age_days if older_than is None else older_than
    report = prune(
        SqlExpiredRows(app.engine()), timedelta(days=days), batch_size or settings.batch_size, dry_run=dry_run
    )
    click.echo(f"older than {days:g} days (ended before {iso(report.cutoff)}Z):")
    for line in report.lines():
        click.echo(f"  {line}")


# -- config ----------------------------------------------------------------------------------


@click.group()
def config() -> None:
    """Write and inspect the configuration."""


@config.command("init")
@click.option(
    "--db-url",
    default=None,
    metavar="URL",
    help="[core] sql_alchemy_conn, e.g. postgresql://user:pw@db-host:5432/smartsensor (default: SQLite "
    "under the home folder, one host only).",
)
@click.option(
    "--metastore-uris",
    default="",
    metavar="URIS",
    help="[spark] metastore_uris: thrift://host:port of your Hive metastore, comma separated.",
)
@click.option(
    "--catalog-backend",
    type=click.Choice(CATALOG_BACKENDS),
    default="auto",
    show_default=True,
    help="[smart_sensor] catalog_backend (auto: thrift when metastore URIs are given, else spark).",
)
@click.option(
    "--token-file",
    default=None,
    metavar="PATH",
    help="[api] token_file; created with a new random token (mode 0600) if it does not exist "
    "[default: api-token beside the config].",
)
@click.option("--shards", type=click.IntRange(1, 100_000), default=None, help="[smart_sensor] shards.")
@click.option("--force", is_flag=True, help="Overwrite an existing config file.")
@click.pass_obj
def config_init(
    app: App,
    db_url: str | None,
    metastore_uris: str,
    catalog_backend: str,
    token_file: str | None,
    shards: int | None,
    force: bool,
) -> None:
    """Write a commented config (every key, its help and allowed range) with this deployment's values, where
    the other commands look for it: --config, else $SMARTSENSOR_CONFIG, else $SMARTSENSOR_HOME/airflow.cfg.

    Nothing is written unless the result loads and validates."""
    home, path = config_location(app.config_path)
    if path.exists() and not force:
        raise UserError(f"{path} already exists (--force overwrites it)")
    token_path = Path(token_file).expanduser() if token_file else path.parent / "api-token"
    values = {
        ("smart_sensor", "catalog_backend"): catalog_backend,
        ("spark", "metastore_uris"): metastore_uris,
        ("api", "token_file"): str(token_path.resolve()),
    }
    if db_url is not None:
        normalize_url(db_url)  # DatabaseUrlError: one line naming the URL
        values[("core", "sql_alchemy_conn")] = db_url
    if shards is not None:
        values[("smart_sensor", "shards")] = str(shards)
    text = render_config(values, header=INIT_HEADER)
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(path.name + ".new")
    draft.unlink(missing_ok=True)
    with os.fdopen(os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as out:
        out.write(text)  # owner-only: it holds the database URL, password included
    try:
        cfg = load_config(str(draft), environ={"SMARTSENSOR_HOME": str(home)})  # refuses a broken result
    except ConfigError:
        draft.unlink()
        raise
    created = _ensure_token_file(token_path)
    draft.replace(path)
    click.echo(f"wrote {path}")
    click.echo(f"  database: {normalize_url(cfg.sql_alchemy_conn).render_as_string(hide_password=True)}")
    click.echo(f"  catalog:  {cfg.resolved_catalog_backend}" + (f" ({metastore_uris})" if metastore_uris else ""))
    click.echo(f"  token:    {token_path}" + (" (new random token)" if created else " (kept)"))
    if path != config_location(None)[1]:
        click.echo(f"the commands find it with --config {path} or SMARTSENSOR_CONFIG={path}")
    click.echo("next: smartsensor db init")


INIT_HEADER = """\
# smartsensor configuration, written by `smartsensor config init`: every key with its help and allowed range.
# Env SMARTSENSOR__<SECTION>__<KEY> overrides the file, e.g. SMARTSENSOR__SMART_SENSOR__SHARDS=8.
# {SMARTSENSOR_HOME} is replaced by the home folder ($SMARTSENSOR_HOME, default ~/smartsensor).
"""


def _ensure_token_file(path: Path) -> bool:
    """Create ``path`` with a new random token, readable by its owner only; False if it already exists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_urlsafe(32) + "\n")
    return True


@config.command("shards")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def config_shards(app: App, as_json: bool) -> None:
    """Print the effective shard ranges."""
    ranges = app.cfg.resolved_shard_ranges
    limit = app.cfg.shard_code_upper_limit
    if as_json:
        click.echo(
            json.dumps(
                {
                    "shard_code_upper_limit": limit,
                    "ranges": [{"shard": i, "min": r.lo, "max": r.hi} for i, r in enumerate(ranges)],
                }
            )
        )
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


@click.group("metastore")
def metastore_service() -> None:
    """A local Hive metastore service shared by the pipeline and N worker processes."""


def _print_metastore_service(st: MetastoreServiceStatus, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"running": st.running, "pid": st.pid, "uri": st.uri, "log": str(st.log)}))
    elif st.running:
        click.echo(f"metastore running: pid {st.pid}, {st.uri} (log {st.log})")
    else:
        click.echo(f"metastore not running ({st.uri})")


@metastore_service.command("start")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def metastore_service_start(app: App, as_json: bool) -> None:
    """Start the service (idempotent). Point [spark] metastore_uris at the printed URI."""
    from smartsensor.adapters.metastore_service import MetastoreServiceError, start

    try:
        _print_metastore_service(start(app.cfg), as_json)
    except MetastoreServiceError as exc:
        raise UserError(str(exc)) from None


@metastore_service.command("stop")
@click.pass_obj
def metastore_service_stop(app: App) -> None:
    """Stop the service."""
    from smartsensor.adapters.metastore_service import stop

    click.echo("metastore stopped" if stop(app.cfg) else "metastore was not running")


@metastore_service.command("status")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def metastore_service_status(app: App, as_json: bool) -> None:
    """Is the service running? Exit 1 if not."""
    from smartsensor.adapters.metastore_service import status as ms_status

    st = ms_status(app.cfg)
    _print_metastore_service(st, as_json)
    if not st.running:
        sys.exit(1)
