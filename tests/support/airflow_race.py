"""The production-like Airflow test's workload (tests/airflow/test_production_like.py): three teams' DAGs of Hive
sensors written for Airflow's Hive provider with only the import line swapped, the three timings of a landing
against the runs, and what one case saw (states, how each task ended, landed → end with its split).

A *case* triggers every team's DAG for a new day and lands that day's partitions (``race.events`` and
``race.clicks``, both ``ds=<day>``) at one of three moments:

- ``already there``: before the runs are triggered (reruns, backfills, late DAGs: the commonest case);
- ``while deferred``: once every sensor has deferred and smartsensor registered it;
- ``just after``: 1.5 s after the runs were triggered, while the sensors start, register and defer.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from sqlalchemy import bindparam, text
from sqlalchemy.engine import Engine

from scripts.airflow.stack import AirflowStack
from scripts.harness.hive_tables import Metastore
from smartsensor.adapters.sql.signals import SqlLandingSignals
from smartsensor.service.signals import send_signal

DB = "race"
TABLES = ("events", "clicks")
CASES = ("already there", "while deferred", "just after")
JUST_AFTER = 1.5  # seconds from the trigger to the landing in the "just after" case

# What a team writes for Airflow's Hive provider; the one changed line is the import (it was
# `from airflow.providers.apache.hive.sensors.named_hive_partition import NamedHivePartitionSensor`, and
# `...hive_partition import HivePartitionSensor`). Half the sensors wait by name, half by filter; every team waits
# on the same two partitions, so 3 × SENSORS tasks share 2 checks. Each quarter of them gets the option's
# ``quarter`` arguments, the rest its ``rest`` ones (see OPTIONS).
DAG = """
from datetime import datetime

from airflow import DAG

@IMPORTS@

for team in @TEAMS@:
    with DAG(
        f"@PREFIX@{team}", start_date=datetime(2026, 1, 1), schedule=None, catchup=False, max_active_tasks=64,
        tags=@TAGS@,
    ) as dag:
        for i in range(@SENSORS@):
            options = @QUARTER@ if i % 4 == 0 else @REST@
            if i % 2:
                NamedHivePartitionSensor(
                    task_id=f"named_{i}", partition_names=["@DB@.events/ds={{ ds }}"],
                    poke_interval=30, timeout=900, retries=2, mode="reschedule", **options,
                )
            else:
                HivePartitionSensor(
                    task_id=f"filter_{i}", table="clicks", schema="@DB@", partition="ds='{{ ds }}'",
                    poke_interval=30, timeout=900, retries=2, mode="reschedule", **options,
                )
    globals()[dag.dag_id] = dag
"""

# How the sensors end, as (quarter, rest) constructor arguments. "drop-in" is what a user gets (the defaults: each
# try starts and ends in the triggerer); a quarter of the sensors skip the held request, which matters where a try
# takes the execute path (it then defers at once and its answer comes right after the deferral: the race's exact
# timing, which only the end from the triggerer protects). "execute" is that path for every try (the provider
# before start_from_trigger, and where Airflow cannot start a task in the triggerer); "resume" the provider before
# the race fix (defer at once, resume on a worker at once), "held + resume" a site with listener plugins (no end
# from the triggerer) on the execute path; "airflow reschedule" the same DAGs on Airflow's own Hive sensors.
OPTIONS = {
    "drop-in": ({"smartsensor_execute_wait": 0}, {}),
    "resume": (
        {
            "smartsensor_execute_wait": 0,
            "end_from_trigger": False,
            "smartsensor_resume_settle": 0,
            "smartsensor_start_from_trigger": False,
        },
    )
    * 2,
    "held + resume": ({"end_from_trigger": False, "smartsensor_start_from_trigger": False},) * 2,
    "airflow reschedule": ({}, {}),
    "parked": ({"smartsensor_park": True},) * 2,  # the parking attendant ends them (issue 55)
    "execute": (
        {"smartsensor_start_from_trigger": False, "smartsensor_execute_wait": 0},
        {"smartsensor_start_from_trigger": False},
    ),
}


DROP_IN_IMPORTS = "from smartsensor_airflow.sensors import HivePartitionSensor, NamedHivePartitionSensor"
AIRFLOWS_IMPORTS = (
    "from airflow.providers.apache.hive.sensors.hive_partition import HivePartitionSensor\n"
    "from airflow.providers.apache.hive.sensors.named_hive_partition import NamedHivePartitionSensor"
)


def dag_file(teams: int | range, sensors: int, option: str = "drop-in", db: str = DB, prefix: str = "team_") -> str:
    """The DAG file of ``teams`` DAGs (``team_0``… with ``prefix`` ``team_``; a range: those numbers) with
    ``sensors`` sensor tasks each on Hive database ``db``, ending as ``option``. Airflow's own sensors ("airflow
    reschedule") are tagged ``smartsensor:off``: a deployment with the cluster policy on leaves them Airflow's."""
    quarter, rest = OPTIONS[option]
    return (
        DAG.replace("@TEAMS@", repr(teams if isinstance(teams, range) else range(teams)))
        .replace("@PREFIX@", prefix)
        .replace("@IMPORTS@", AIRFLOWS_IMPORTS if option == "airflow reschedule" else DROP_IN_IMPORTS)
        .replace("@SENSORS@", str(sensors))
        .replace("@DB@", db)
        .replace("@QUARTER@", repr(quarter))
        .replace("@REST@", repr(rest))
        .replace("@TAGS@", repr(["smartsensor:off"] if option == "airflow reschedule" else []))
    )


@dataclass
class Landing:
    """The metastore and smartsensor as a pipeline's commit sees them: add the day's partitions, then signal."""

    metastore: Metastore
    engine: Engine  # smartsensor's database, for the landing signal

    def land(self, ds: str, tables: tuple[str, ...] = TABLES) -> datetime:
        """Add ``ds`` to ``tables`` (every table) and send the landing signals; returns when the partitions were
        committed (aware UTC, before the signals: a task cannot succeed earlier)."""
        for table in tables:
            self.metastore.land(table, ds)
        landed = datetime.now(timezone.utc)
        for table in tables:
            send_signal(SqlLandingSignals(self.engine), f"{self.metastore.db}.{table}/ds={ds}")
        return landed


@dataclass
class Outcome:
    """What one case saw, for its sensor tasks."""

    case: str
    ds: str
    states: dict[str, int] = field(default_factory=dict)  # Airflow state → tasks
    on_worker: int = 0  # tasks that ended on a worker: in execute, or resumed after their trigger fired
    by_trigger: int = 0  # tasks that their trigger ended (TaskSuccessEvent/TaskSkippedEvent): never resumed
    to_end: list[float] = field(default_factory=list)  # landed (or the run queued, if later) → Airflow end, seconds
    service: list[float] = field(default_factory=list)  # that start → smartsensor's end of the try
    airflow: list[float] = field(default_factory=list)  # smartsensor's end → Airflow's end
    heard: list[float] = field(default_factory=list)  # smartsensor's end → the trigger heard it (its log line)
    triggerer: list[float] = field(default_factory=list)  # the trigger heard it → Airflow's end (the triggerer)
    failures: list[str] = field(default_factory=list)  # task ids that did not succeed, with their state
    started: list[float] = field(default_factory=list)  # that start → the try started (deferred or running)
    registered: list[float] = field(default_factory=list)  # that start → smartsensor registered the try
    scheduled: list[float] = field(default_factory=list)  # that start → Airflow scheduled the try (3.x: parked there)
    worker_tries: int = 0  # tries of these tasks that ran a task process on a worker (AirflowStack.worker_tries)
    elsewhere: float = 0.0  # cores the machine spent outside the deployment meanwhile (airflow_scale.BusyElsewhere)

    @property
    def tasks(self) -> int:
        return sum(self.states.values())


def run_case(
    stack: AirflowStack,
    landing: Landing,
    engine: Engine,
    case: str,
    ds: str,
    dag_ids: list[str],
    sensors: int,
    smart: bool = True,
    before_landing: Callable[[], None] | None = None,
) -> Outcome:
    """Trigger ``dag_ids`` for day ``ds``, land the day's partitions at the case's moment, wait until every
    sensor task ended, and gather what happened. ``smart``: the sensors wait through smartsensor (deferred and
    registered); otherwise they are Airflow's own, waiting ``up_for_reschedule``. ``before_landing`` runs just
    before the landing of the case where every sensor waits."""
    landed = landing.land(ds) if case == "already there" else None
    run_ids = stack.trigger_many(dag_ids, ds)
    if case == "just after":
        time.sleep(JUST_AFTER)
        landed = landing.land(ds)
    total = len(dag_ids) * sensors
    if case == "while deferred":  # deferred, and registered: a try that starts in the triggerer registers there
        # Airflow's own sensors in reschedule mode never all wait at once (their pokes take turns on the slots):
        # each has poked once and not ended.
        waiting = (
            "state IN ('deferred', 'scheduled', 'failed', 'up_for_retry')"  # scheduled: parked
            if smart
            else "start_date IS NOT NULL AND state IN ('up_for_reschedule', 'scheduled', 'queued', 'running')"
        )
        stack.wait(
            f"{total} sensors waiting{' and registered' if smart else ''} ({ds})",
            lambda: (
                _count(stack, run_ids, waiting) == total and (not smart or registered_tries(engine, run_ids) == total)
            ),
            timeout=900,
        )
        if before_landing is not None:
            before_landing()
        landed = landing.land(ds)
    # Ended, or failed by the race and waiting for its retry (retry_delay is minutes: the try is what counts)
    stack.wait(
        f"every sensor of {ds} ended",
        lambda: (
            _count(stack, run_ids, "(state IN ('success', 'failed', 'skipped', 'up_for_retry') OR try_number > 1)")
            == total
        ),
        timeout=900,
        step=0.5,
    )
    assert landed is not None
    return _outcome(stack, engine, case, ds, run_ids, landed)


def _count(stack: AirflowStack, run_ids: list[str], predicate: str) -> int:
    return int(
        stack.rows(
            f"SELECT count(*) FROM task_instance WHERE run_id IN :runs AND {predicate}",
            expanding=["runs"],
            runs=run_ids,
        )[0][0]
    )


def registered_tries(engine: Engine, run_ids: list[str]) -> int:
    """Tries of these runs that smartsensor registered."""
    with engine.connect() as conn:
        return int(
            conn.execute(
                text("SELECT count(*) FROM external_task WHERE run_id IN :runs").bindparams(
                    bindparam("runs", expanding=True)
                ),
                {"runs": run_ids},
            ).scalar_one()
        )


def _outcome(stack: AirflowStack, engine: Engine, case: str, ds: str, run_ids: list[str], landed: datetime) -> Outcome:
    """The case's figures, each task's measured from its run's creation (``queued_at``: the trigger as Airflow has
    it, not the client's call, which on 2.x starts a CLI process) or the landing, whichever came later."""
    queued = {
        run_id: _aware(at)
        for run_id, at in stack.rows(
            "SELECT run_id, queued_at FROM dag_run WHERE run_id IN :runs", expanding=["runs"], runs=run_ids
        )
    }
    scheduled_at = "scheduled_dttm" if stack.major >= 3 else "NULL"  # 2.x does not keep it
    rows = stack.rows(
        f"SELECT dag_id, task_id, run_id, state, end_date, next_method, try_number, start_date, {scheduled_at} "
        "FROM task_instance WHERE run_id IN :runs",
        expanding=["runs"],
        runs=run_ids,
    )
    with engine.connect() as conn:
        service_rows = {
            (r[0], r[1], r[2]): (r[3], r[4])
            for r in conn.execute(
                text(
                    "SELECT e.dag_id, e.task_id, e.run_id, t.end_date, e.registered_at FROM external_task e "
                    "JOIN task_instance t "
                    "ON t.dag_id = e.dag_id AND t.task_id = e.ti_task_id AND t.execution_date = e.ti_execution_date "
                    "WHERE e.run_id IN :runs"
                ).bindparams(bindparam("runs", expanding=True)),
                {"runs": run_ids},
            )
        }
    out = Outcome(case, ds)
    for dag_id, task_id, run_id, state, end, next_method, try_number, start, scheduled in rows:
        since = max(landed, queued[run_id])
        if scheduled is not None:
            out.scheduled.append((_aware(scheduled) - since).total_seconds())
        out.states[state] = out.states.get(state, 0) + 1
        out.worker_tries += stack.worker_tries(dag_id, run_id, task_id)
        if start is not None:
            out.started.append((_aware(start) - since).total_seconds())
        service_end, registered = service_rows.get((dag_id, task_id, run_id), (None, None))
        if registered is not None:
            out.registered.append((_aware(registered) - since).total_seconds())
        if state != "success" or try_number != 1:  # a try failed by the race and retried is a failure too
            out.failures.append(f"{dag_id}.{task_id}: {state} (try {try_number})")
        if next_method is None:  # Airflow clears it when a task ends on a worker, a trigger's end leaves it
            out.on_worker += 1
        else:
            out.by_trigger += 1
        if end is None:
            continue
        end = _aware(end)
        out.to_end.append((end - since).total_seconds())
        if service_end is not None:
            service_end = _aware(service_end)
            out.service.append(max(0.0, (service_end - since).total_seconds()))
            out.airflow.append((end - service_end).total_seconds())
            heard = trigger_heard_at(stack.home / "logs", dag_id, run_id, task_id) if next_method else None
            if heard is not None:
                out.heard.append((heard - service_end).total_seconds())
                out.triggerer.append((end - heard).total_seconds())
    return out


HEARD = "the task ends from the triggerer"  # the trigger's log line when it ends the task (triggers.py)
STARTED = "started in the triggerer"  # the trigger's log line when a try starts there (triggers.py)
# The time the trigger heard the answer, in its line (the line may be written later than that); else the line's own.
HEARD_AT = re.compile(r"heard at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)(Z|[+-]\d\d:?\d\d)")
STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)(Z|[+-]\d\d:?\d\d)?")


def trigger_heard_at(logs: Path, dag_id: str, run_id: str, task_id: str) -> datetime | None:
    """When the task's trigger logged that it ends the task (aware UTC), from Airflow's task logs (2.10 writes a
    trigger's lines to ``attempt=N.log.trigger.<job>.log``, 3.x to the task's log), or None."""
    folder = logs / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
    for path in sorted(folder.glob("attempt=1.log*")):
        for line in path.read_text(errors="replace").splitlines():
            if HEARD in line and (match := HEARD_AT.search(line) or STAMP.search(line)):
                when = datetime.fromisoformat(match.group(1))
                zone = (match.group(2) or "+00:00").replace("Z", "+00:00")
                if len(zone) == 5:  # +0000
                    zone = zone[:3] + ":" + zone[3:]
                return when.replace(tzinfo=datetime.fromisoformat(f"2000-01-01T00:00:00{zone}").tzinfo)
    return None


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


def p(values: list[float], q: float) -> float:
    """The ``q`` quantile (0-1) of ``values`` (nearest rank), NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def table(version: str, option: str, outcomes: list[Outcome]) -> str:
    """The figures of every case, per case over its runs: failed tasks, how tasks ended, landed → end p50/p95 and
    its split (smartsensor's part, Airflow's part), as printed by the test."""
    columns = [
        ("tasks", 6, lambda m: str(sum(o.tasks for o in m))),
        ("failed", 7, lambda m: str(sum(o.tasks - o.states.get("success", 0) for o in m))),
        ("worker tries", 13, lambda m: str(sum(o.worker_tries for o in m))),
        ("by trigger", 11, lambda m: str(sum(o.by_trigger for o in m))),
        ("end p50", 9, lambda m: _seconds(m, "to_end", 0.5, 1)),
        ("end p95", 9, lambda m: _seconds(m, "to_end", 0.95, 1)),
        ("scheduled p95", 14, lambda m: _seconds(m, "scheduled", 0.95)),
        ("started p50", 12, lambda m: _seconds(m, "started", 0.5)),
        ("registered p50", 15, lambda m: _seconds(m, "registered", 0.5)),
        ("registered p95", 15, lambda m: _seconds(m, "registered", 0.95)),
        ("service p50", 12, lambda m: _seconds(m, "service", 0.5)),
        ("airflow p50", 12, lambda m: _seconds(m, "airflow", 0.5)),
        ("airflow p95", 12, lambda m: _seconds(m, "airflow", 0.95)),
        ("heard p50", 10, lambda m: _seconds(m, "heard", 0.5)),
        ("triggerer p50", 14, lambda m: _seconds(m, "triggerer", 0.5)),
    ]
    lines = [
        f"Airflow {version}, LocalExecutor, database on PostgreSQL, sensors {option!r}; per case over "
        f"{max(sum(o.case == c for o in outcomes) for c in CASES)} run(s)",
        f"{'case':<16}" + "".join(f"{name:>{width}}" for name, width, _ in columns),
    ]
    for case in CASES:
        mine = [o for o in outcomes if o.case == case]
        lines.append(f"{case:<16}" + "".join(f"{cell(mine):>{width}}" for _, width, cell in columns))
    lines.append(
        "end: from the landing (or the trigger, when the data was there first) to Airflow's end of the task; "
        "worker tries: their tries that ran a task process on a worker; scheduled: to the try's last scheduling by "
        "Airflow (3.x only); started: to the try's start (deferred by the "
        "scheduler, or running on a worker); registered: to smartsensor's registration of the try; "
        "service: to smartsensor's end of the try; airflow: from that to Airflow's end; of which, for the tasks "
        "their trigger ended, heard: until the trigger had the answer, triggerer: from that to Airflow's end"
    )
    return "\n".join(lines)


def _seconds(outcomes: list[Outcome], name: str, q: float, digits: int = 2) -> str:
    """The ``q`` quantile of one figure over ``outcomes``, as ``1.23s``."""
    return f"{p([v for o in outcomes for v in getattr(o, name)], q):.{digits}f}s"


def semantics_file(db: str = DB, marks: Path | None = None, day: str = "2026-09-01") -> str:
    """The semantics DAG file, on Hive database ``db``; its success callback writes a file into ``marks``; ``day``:
    the run's day, which a param names too."""
    return SEMANTICS.replace("@DB@", db).replace("@MARKS@", str(marks or Path("/nonexistent"))).replace("@DAY@", day)


# Each drop-in rule beside Airflow's own sensor with the same arguments (PythonSensor: the BaseSensorOperator rules
# the Hive provider's sensors follow; a template Airflow's rendering refuses), then what is Hive-provider specific: a
# whole-list template (9.6.1+), a templated metastore_conn_id (9.7.0), the default partition, and mode/deferrable
# accepted; then what decides where a try runs: a success callback, a mapped task and the opt-out.
SEMANTICS = """
from datetime import datetime, timedelta
from pathlib import Path

from airflow import DAG
try:
    from airflow.providers.standard.sensors.python import PythonSensor
except ImportError:  # Airflow 2
    from airflow.sensors.python import PythonSensor

from smartsensor_airflow.sensors import HivePartitionSensor, NamedHivePartitionSensor

NEVER = ["@DB@.events/ds=1999-01-01"]
QUICK = dict(poke_interval=1, retry_delay=timedelta(seconds=1))


def never():
    return False


def broken():
    raise ValueError("cannot parse the partition filter")


def uses(partition):
    # The DAG renders natively: a name the run lacks renders as StrictUndefined, which raises once it is used.
    return bool(str(partition))


def mark(context):
    Path("@MARKS@", context["ti"].task_id + ".done").write_text(context["ti"].run_id)


with DAG("semantics", start_date=datetime(2026, 1, 1), schedule=None, catchup=False, max_active_tasks=16,
         render_template_as_native_obj=True, params={"conn": "metastore_race"}):
    NamedHivePartitionSensor(task_id="timeout", partition_names=NEVER, timeout=5, retries=2, **QUICK)
    PythonSensor(task_id="airflow_timeout", python_callable=never, timeout=5, retries=2, **QUICK)
    NamedHivePartitionSensor(task_id="soft_fail", partition_names=NEVER, timeout=5, soft_fail=True, retries=2, **QUICK)
    PythonSensor(task_id="airflow_soft_fail", python_callable=never, timeout=5, soft_fail=True, retries=2, **QUICK)
    limit = timedelta(seconds=8)
    NamedHivePartitionSensor(task_id="execution_timeout", partition_names=NEVER, timeout=600, execution_timeout=limit,
                             retries=1, **QUICK)
    PythonSensor(task_id="airflow_execution_timeout", python_callable=never, timeout=600, execution_timeout=limit,
                 retries=1, **QUICK)
    HivePartitionSensor(task_id="error", table="events", schema="@DB@", partition="ds > '1'", retries=1, **QUICK)
    PythonSensor(task_id="airflow_error", python_callable=broken, retries=1, **QUICK)
    # A param the run lacks: Airflow's StrictUndefined fails the rendering, and each try, on both.
    HivePartitionSensor(task_id="missing_param", table="events", schema="@DB@",
                        partition="{{ params.partition_filter }}", retries=1, **QUICK)
    PythonSensor(task_id="airflow_missing_param", python_callable=uses,
                 op_kwargs={"partition": "{{ params.partition_filter }}"}, retries=1, **QUICK)
    NamedHivePartitionSensor(task_id="whole_list", partition_names="{{ ['@DB@.events/ds=' ~ ds] }}",
                             mode="reschedule", deferrable=False, **QUICK)
    HivePartitionSensor(task_id="templated_conn", table="events", schema="@DB@", partition=None,
                        metastore_conn_id="{{ params.conn }}", mode="poke", deferrable=True, **QUICK)
    HivePartitionSensor(task_id="templated_conn_on_worker", table="events", schema="@DB@", partition=None,
                        metastore_conn_id="{{ params.conn }}", smartsensor_start_from_trigger=False, **QUICK)
    NamedHivePartitionSensor(task_id="params_and_macros", params={"day": "@DAY@"},
                             partition_names=["@DB@.events/ds={{ params.day }}",
                                              "@DB@.clicks/ds={{ macros.ds_add(ds, 0) }}"], **QUICK)
    NamedHivePartitionSensor(task_id="with_callback", partition_names=["@DB@.events/ds={{ ds }}"],
                             on_success_callback=mark, **QUICK)
    NamedHivePartitionSensor.partial(task_id="mapped", **QUICK).expand(
        partition_names=[["@DB@.events/ds={{ ds }}"], ["@DB@.clicks/ds={{ ds }}"]]
    )
"""
ENDED = ("success", "failed", "skipped", "upstream_failed")


@dataclass
class TaskEnd:
    """How one task of the semantics DAG ended (its map indexes together)."""

    state: str
    tries: int
    rendered: dict[str, Any]  # its rendered template fields, when a worker rendered them
    registered: dict[str, Any] | None  # the check smartsensor registered for its last try (attr_dict)
    worker_tries: int  # its tries that ran a task process on a worker (AirflowStack.worker_tries)
    started_in_triggerer: list[int]  # the tries whose trigger logged that they started in the triggerer


def run_semantics(stack: AirflowStack, landing: Landing, engine: Engine, ds: str) -> dict[str, TaskEnd]:
    """Trigger the semantics DAG for ``ds``, land the day, wait until every task ended for good (no retry left);
    task_id → how it ended."""
    (run_id,) = stack.trigger_many(["semantics"], ds)
    landing.land(ds)

    def ended() -> bool:
        states = [r[0] for r in stack.rows("SELECT state FROM task_instance WHERE run_id = :r", r=run_id)]
        return bool(states) and all(s in ENDED for s in states)

    stack.wait("every task of the semantics DAG ended", ended, timeout=600, step=0.5)
    rendered = {
        task_id: fields if isinstance(fields, dict) else json.loads(fields or "{}")
        for task_id, fields in stack.rows(
            "SELECT task_id, rendered_fields FROM rendered_task_instance_fields WHERE run_id = :r", r=run_id
        )
    }
    with engine.connect() as conn:
        registered = {
            task_id: json.loads(attrs or "null")
            for task_id, attrs in conn.execute(
                text(
                    "SELECT e.task_id, t.attr_dict FROM external_task e JOIN task_instance t "
                    "ON t.dag_id = e.dag_id AND t.task_id = e.ti_task_id AND t.execution_date = e.ti_execution_date "
                    "WHERE e.run_id = :r"
                ),
                {"r": run_id},
            )
        }
    ends: dict[str, TaskEnd] = {}
    for task_id, state, tries in stack.rows(
        "SELECT task_id, state, try_number FROM task_instance WHERE run_id = :r ORDER BY map_index", r=run_id
    ):
        if task_id in ends:  # another map index of the same task
            continue
        on_worker = stack.worker_tries("semantics", run_id, task_id)
        folder = stack.home / "logs" / "dag_id=semantics" / f"run_id={run_id}" / f"task_id={task_id}"
        started_there = sorted(
            {
                int(path.name.split("=", 1)[1].split(".", 1)[0])
                for path in folder.rglob("attempt=*.log.trigger.*")
                if STARTED in path.read_text(errors="replace")
            }
        )
        ends[task_id] = TaskEnd(
            state, int(tries), rendered.get(task_id, {}), registered.get(task_id), on_worker, started_there
        )
    return ends
