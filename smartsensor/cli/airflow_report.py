"""`smartsensor airflow report`: before switching smartsensor on, what an Airflow installation's Hive sensors
cost (read-only, from its metadata database) and what smartsensor would make of the same waits."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from smartsensor.adapters.sql.store_errors import database_problem
from smartsensor.cli.app import INTERVAL, App, UserError
from smartsensor.ports import StoreUnavailable

if TYPE_CHECKING:  # rich is imported by the command that prints with it: every other command starts without it
    from rich.table import Table

TASKS_HEADING = "Hive sensor tasks in Airflow"
COMPARE_HEADING = "Airflow's own sensors against smartsensor, same waits"


@click.group()
def airflow() -> None:
    """Look at an Airflow installation (read-only)."""


@airflow.command()
@click.option(
    "--airflow-db",
    "url",
    required=True,
    metavar="URL",
    help="Airflow's metadata database, read-only: postgresql://user:pw@host:5432/airflow or sqlite:////path.db.",
)
@click.option("--days", type=click.IntRange(1, 3650), default=7, show_default=True, help="The period: the last N days.")
@click.option(
    "--interval",
    type=INTERVAL,
    default=None,
    help="Seconds between smartsensor's rounds in the comparison (default [smart_sensor] poke_interval, 5).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_obj
def report(app: App, url: str, days: int, interval: float | None, as_json: bool) -> None:
    """The Hive sensor tasks of the last N days (NamedHivePartitionSensor, HivePartitionSensor,
    MetastorePartitionSensor): tasks against distinct checks, worker-slot hours, Airflow's metastore calls, and
    smartsensor's for the same waits."""
    from smartsensor.adapters.sql.airflow_history import AirflowDbError, open_airflow_db, safe_url
    from smartsensor.adapters.sql.status_store import SqlAirflowHistory
    from smartsensor.service.savings import savings_report

    every = interval or app.cfg.poke_interval
    engine = None
    try:
        engine = open_airflow_db(url)
        figures = savings_report(SqlAirflowHistory(engine), days, every)
    except AirflowDbError as exc:
        raise UserError(f"--airflow-db {safe_url(url)}: {exc}") from None
    except Exception as exc:
        cause = (exc.__cause__ or exc) if isinstance(exc, StoreUnavailable) else exc
        problem = database_problem(cause)
        if problem is None:
            raise
        raise UserError(f"--airflow-db {safe_url(url)}: unreachable or not readable: {problem[1]}") from None
    finally:
        if engine is not None:
            engine.dispose()
    data = {"airflow_db": safe_url(url), **figures.as_json()}
    if as_json:
        click.echo(json.dumps(data))
        return
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=False)
    console.print(tasks_table(data))
    console.print(compare_table(data))
    if not data["sensor_tasks"]:
        console.print(f"No Hive sensor task ran in the last {days} day(s).")
    console.print("Assumptions:\n" + "\n".join(f"- {a}" for a in data["assumptions"]), markup=False)


def _hours(hours: float) -> str:
    return f"{hours:.2f} h" if hours >= 1 else f"{hours:.3f} h ({hours * 3600:.0f} s)"


def tasks_table(d: dict[str, Any]) -> Table:
    """What ran: tasks, tries, checks and partitions, slot time."""
    from rich.table import Table

    table = Table(
        title=f"{TASKS_HEADING}, last {d['days']} days (since {d['since'][:16].replace('T', ' ')} UTC; "
        f"Airflow {d['airflow_schema']} schema)",
        title_justify="left",
        show_header=False,
    )
    table.add_column("")
    table.add_column("", justify="right")
    slot = d["slot_hours"]
    rows = [
        ("sensor tasks (task instances)", str(d["sensor_tasks"])),
        *((f"  {operator}", str(n)) for operator, n in sorted(d["by_operator"].items())),
        ("tries", str(d["tries"])),
        ("distinct checks", f"{d['distinct_checks']} (dedup {d['dedup_ratio'] or '-'}x)"),
        ("distinct partitions", f"{d['distinct_partitions']} in {d['tables']} tables"),
        ("tasks per distinct partition", str(d["tasks_per_partition"] or "-")),
        ("tasks whose rendered fields are gone", str(d["tasks_without_fields"])),
        ("worker-slot hours spent waiting", _hours(d["slot_hours_total"])),
        *((f"  {mode} mode", _hours(slot[mode])) for mode in ("poke", "reschedule", "deferred")),
        ("reschedule pokes (task_reschedule rows)", str(d["reschedule_pokes"])),
        ("time deferred (not slot time)", _hours(d["deferred_hours"])),
        *((f"poke_interval: {source}", f"{n} tasks") for source, n in sorted(d["poke_interval_from"].items())),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


def compare_table(d: dict[str, Any]) -> Table:
    """Airflow's own sensors against smartsensor for the same waits."""
    from rich.table import Table

    table = Table(title=COMPARE_HEADING, title_justify="left")
    table.add_column("")
    table.add_column("Airflow's own", justify="right")
    table.add_column(f"smartsensor, every {d['interval']:g} s", justify="right")
    airflow, ours, ratio = d["airflow_metastore_calls"], d["smartsensor_metastore_calls"], d["calls_ratio"]
    compared = ""
    if ratio and ratio >= 1:
        compared = f" ({ratio:g}x fewer)"
    elif ratio:
        compared = f" ({ours / airflow:.1f}x more)"
    table.add_row("metastore calls", str(airflow), f"{ours}{compared}")
    table.add_row("pokes / partition checks", str(d["airflow_pokes"]), str(d["smartsensor_checks"]))
    table.add_row("worker-slot hours", _hours(d["slot_hours_total"]), "~0 (tasks defer)")
    return table
