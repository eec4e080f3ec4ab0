"""Commands on task instances: `submit`, `tasks`, `set-state`, `run-task`, `signal`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from smartsensor.adapters.sql import tasks as task_sql
from smartsensor.adapters.sql.registration_store import SqlRegistrationStore
from smartsensor.cli.app import App, UserError, jsonable, parse_day, parse_task_date
from smartsensor.domain.keys import TaskKey
from smartsensor.domain.states import State
from smartsensor.sensors.validation import check_utf8
from smartsensor.standalone.dagfile import load_sensor_file
from smartsensor.standalone.registration import register

# The states as the plain strings a user types: click (8.2+) would match an Enum member by its name (SUCCESS).
STATE_VALUES = [s.value for s in State.ALL]


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--execution-date", "-d", required=True, help="YYYY-MM-DD")
@click.option("--clear", is_flag=True, help="Reset task instances that already exist (even finished ones).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def submit(app: App, file: str, execution_date: str, clear: bool, as_json: bool) -> None:
    """Register every module-level sensor in FILE for one execution date."""
    when = parse_day(execution_date)
    check_utf8("sensor file path", file)
    sensors = load_sensor_file(file, timeout=app.cfg.settings.core.dag_file_import_timeout)
    results = register(
        SqlRegistrationStore(app.engine()), sensors, when, app.cfg, clear=clear, fileloc=str(Path(file).resolve())
    )
    if as_json:
        click.echo(
            json.dumps(
                [
                    jsonable(
                        {
                            "dag_id": r.dag_id,
                            "task_id": r.task_id,
                            "execution_date": r.execution_date,
                            "state": r.state,
                            "hashcode": r.hashcode,
                            "shardcode": r.shardcode,
                            "created": r.created,
                            "reason": r.reason,
                        }
                    )
                    for r in results
                ]
            )
        )
        return
    width = max([len(r.dag_id) for r in results] + [6])
    twidth = max([len(r.task_id) for r in results] + [7])
    click.echo(f"{'dag_id':<{width}}  {'task_id':<{twidth}}  {'state':<13}  {'shardcode':>9}  note")
    for r in results:
        click.echo(f"{r.dag_id:<{width}}  {r.task_id:<{twidth}}  {r.state:<13}  {r.shardcode:>9}  {r.reason}")


TASK_FIELDS = (
    "dag_id",
    "task_id",
    "execution_date",
    "state",
    "try_number",
    "max_tries",
    "hashcode",
    "shardcode",
    "operator",
    "classpath",
    "start_date",
    "end_date",
    "hostname",
    "error",
    "attr_dict",
    "exec_dict",
)


@click.command()
@click.option("--state", type=click.Choice(STATE_VALUES), default=None, help="Only this state.")
@click.option("--dag-id", default=None, help="Only this DAG.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.pass_obj
def tasks(app: App, state: str | None, dag_id: str | None, as_json: bool) -> None:
    """List task instances."""
    rows = task_sql.read_tasks(app.engine(), state=state, dag_id=dag_id)
    if as_json:
        click.echo(json.dumps([jsonable({k: getattr(r, k) for k in TASK_FIELDS}) for r in rows]))
        return
    click.echo(f"{'dag_id':<24} {'task_id':<28} {'execution_date':<19} {'state':<13} {'try':>3} {'shard':>5}  error")
    for r in rows:
        error = (r.error or "").splitlines()[0][:60] if r.error else ""
        click.echo(
            f"{r.dag_id:<24} {r.task_id:<28} {r.execution_date:%Y-%m-%d %H:%M:%S} "
            f"{r.state or '':<13} {r.try_number:>3} "
            f"{r.shardcode if r.shardcode is not None else '':>5}  {error}"
        )


@click.command("set-state")
@click.argument("dag_id")
@click.argument("task_id")
@click.argument("execution_date")
@click.argument("state", type=click.Choice(STATE_VALUES))
@click.pass_obj
def set_state_cmd(app: App, dag_id: str, task_id: str, execution_date: str, state: str) -> None:
    """Set a task instance's state by hand (workers never overwrite it)."""
    if not task_sql.set_state_by_hand(app.engine(), TaskKey(dag_id, task_id, parse_task_date(execution_date)), state):
        raise UserError(f"no task instance {dag_id}.{task_id} on {execution_date}")
    click.echo(f"{dag_id}.{task_id} {execution_date} → {state}")


@click.command("run-task")
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
    from smartsensor.roots.scheduler import run_classic
    from smartsensor.standalone.classic import TaskRunError

    try:
        result = run_classic(app.engine(), app.cfg, dag_id, task_id, parse_task_date(execution_date), claimed)
    except TaskRunError as exc:
        raise UserError(str(exc)) from None
    if as_json:
        click.echo(json.dumps(result.__dict__))
    else:
        click.echo(
            f"{dag_id}.{task_id} {execution_date}: {result.state} after {result.pokes} poke(s), "
            f"{result.seconds:.1f} s" + (f" ({result.error})" if result.error else "")
        )


@click.command("signal")
@click.argument("partition_names", nargs=-1, required=True)
@click.pass_obj
def signal_cmd(app: App, partition_names: tuple[str, ...]) -> None:
    """Tell the workers that partitions landed (db.table/k=v/...): the owner checks them at once."""
    from smartsensor.adapters.sql.signals import SqlLandingSignals
    from smartsensor.service.signals import send_signal

    engine = app.engine()
    for name in partition_names:
        click.echo(f"signalled {send_signal(SqlLandingSignals(engine), name)}")
