"""Commands that administer the installation: `db`, `config`, `metastore`."""

from __future__ import annotations

import json
import sys

import click

from smartsensor.adapters.sql import tasks as task_sql
from smartsensor.adapters.sql.engine import init_db
from smartsensor.cli.app import App, UserError


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
    with app.engine().begin() as conn:
        moved = task_sql.reshard(conn, limit)
    click.echo(f"{moved} task instance(s) moved to shardcode = hashcode mod {limit}")


# -- config ----------------------------------------------------------------------------------

@click.group()
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


@click.group()
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
    from smartsensor.adapters.metastore import MetastoreError, start
    try:
        _print_metastore(start(app.cfg), as_json)
    except MetastoreError as exc:
        raise UserError(str(exc)) from None


@metastore.command("stop")
@click.pass_obj
def metastore_stop(app: App) -> None:
    """Stop the service."""
    from smartsensor.adapters.metastore import stop
    click.echo("metastore stopped" if stop(app.cfg) else "metastore was not running")


@metastore.command("status")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def metastore_status(app: App, as_json: bool) -> None:
    """Is the service running? Exit 1 if not."""
    from smartsensor.adapters.metastore import status as ms_status
    st = ms_status(app.cfg)
    _print_metastore(st, as_json)
    if not st.running:
        sys.exit(1)
