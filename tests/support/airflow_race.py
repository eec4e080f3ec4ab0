"""The production-like Airflow test's workload (tests/airflow/test_production_like.py): three teams' DAGs of Hive
sensors written for Airflow's Hive provider with only the import line swapped, the three timings of a landing
against the runs, and what one case saw (states, how each task ended, landed → end with its split).

A *case* triggers every team's DAG for a new day and lands that day's partitions (``race.events`` and
``race.clicks``, both ``ds=<day>``) at one of three moments:

- ``already there``: before the runs are triggered (reruns, backfills, late DAGs: the commonest case);
- ``while deferred``: once every sensor has deferred;
- ``just after``: 1.5 s after the runs were triggered, while the sensors start, register and defer.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.engine import Engine

from scripts.airflow.stack import AirflowStack
from smartsensor.service.signals import send_signal
from tests.support.liveness import Metastore

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

from smartsensor_airflow.sensors import HivePartitionSensor, NamedHivePartitionSensor

for team in range(@TEAMS@):
    with DAG(f"team_{team}", start_date=datetime(2026, 1, 1), schedule=None, catchup=False, max_active_tasks=64) as dag:
        for i in range(@SENSORS@):
            options = @QUARTER@ if i % 4 == 0 else @REST@
            if i % 2:
                NamedHivePartitionSensor(
                    task_id=f"named_{i}", partition_names=["@DB@.events/ds={{ ds }}"],
                    poke_interval=30, timeout=900, retries=2, **options,
                )
            else:
                HivePartitionSensor(
                    task_id=f"filter_{i}", table="clicks", schema="@DB@", partition="ds='{{ ds }}'",
                    poke_interval=30, timeout=900, retries=2, mode="reschedule", **options,
                )
    globals()[dag.dag_id] = dag
"""

# How the sensors end, as (quarter, rest) constructor arguments. "drop-in" is what a user gets (the defaults), but
# a quarter of the sensors skip the held request, so that they defer at once and their answer comes right after
# the deferral: the race's exact timing, which only the end from the triggerer protects. The others are the
# options measured for the closing note: "resume" is the provider before the fix (defer at once, resume on a
# worker at once), "held + resume" a site with listener plugins (no end from the triggerer).
OPTIONS = {
    "drop-in": ({"smartsensor_execute_wait": 0}, {}),
    "resume": ({"smartsensor_execute_wait": 0, "end_from_trigger": False, "smartsensor_resume_settle": 0},) * 2,
    "held + resume": ({"end_from_trigger": False},) * 2,
}


def dag_file(teams: int, sensors: int, option: str = "drop-in", db: str = DB) -> str:
    """The DAG file of ``teams`` DAGs (``team_0``…) with ``sensors`` sensor tasks each on Hive database ``db``,
    ending as ``option``."""
    quarter, rest = OPTIONS[option]
    return (
        DAG.replace("@TEAMS@", str(teams))
        .replace("@SENSORS@", str(sensors))
        .replace("@DB@", db)
        .replace("@QUARTER@", repr(quarter))
        .replace("@REST@", repr(rest))
    )


@dataclass
class Landing:
    """The metastore and smartsensor as a pipeline's commit sees them: add the day's partitions, then signal."""

    metastore: Metastore
    engine: Engine  # smartsensor's database, for the landing signal

    def land(self, ds: str) -> datetime:
        """Add ``ds`` to every table and send the landing signals; returns when the partitions were committed
        (aware UTC, before the signals: a task cannot succeed earlier)."""
        for table in TABLES:
            self.metastore.land(table, ds)
        landed = datetime.now(timezone.utc)
        for table in TABLES:
            send_signal(self.engine, f"{self.metastore.db}.{table}/ds={ds}")
        return landed


@dataclass
class Outcome:
    """What one case saw, for its sensor tasks."""

    case: str
    ds: str
    states: dict[str, int] = field(default_factory=dict)  # Airflow state → tasks
    on_worker: int = 0  # tasks that ended on a worker: in execute, or resumed after their trigger fired
    by_trigger: int = 0  # tasks that their trigger ended (TaskSuccessEvent/TaskSkippedEvent): never resumed
    to_end: list[float] = field(default_factory=list)  # landed (or triggered, if later) → Airflow end, seconds
    service: list[float] = field(default_factory=list)  # that start → smartsensor's end of the try
    airflow: list[float] = field(default_factory=list)  # smartsensor's end → Airflow's end
    heard: list[float] = field(default_factory=list)  # smartsensor's end → the trigger heard it (its log line)
    triggerer: list[float] = field(default_factory=list)  # the trigger heard it → Airflow's end (the triggerer)
    failures: list[str] = field(default_factory=list)  # task ids that did not succeed, with their state

    @property
    def tasks(self) -> int:
        return sum(self.states.values())


def run_case(
    stack: AirflowStack, landing: Landing, engine: Engine, case: str, ds: str, dag_ids: list[str], sensors: int
) -> Outcome:
    """Trigger ``dag_ids`` for day ``ds``, land the day's partitions at the case's moment, wait until every
    sensor task ended, and gather what happened."""
    landed = landing.land(ds) if case == "already there" else None
    triggered = datetime.now(timezone.utc)
    run_ids = stack.trigger_many(dag_ids, ds)
    if case == "just after":
        time.sleep(JUST_AFTER)
        landed = landing.land(ds)
    total = len(dag_ids) * sensors
    if case == "while deferred":
        stack.wait(
            f"{total} sensors deferred ({ds})",
            lambda: _count(stack, run_ids, "state IN ('deferred', 'failed', 'up_for_retry')") == total,
            timeout=900,
        )
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
    return _outcome(stack, engine, case, ds, run_ids, max(landed, triggered))


def _count(stack: AirflowStack, run_ids: list[str], predicate: str) -> int:
    return int(
        stack.rows(
            f"SELECT count(*) FROM task_instance WHERE run_id IN :runs AND {predicate}",
            expanding=["runs"],
            runs=run_ids,
        )[0][0]
    )


def _outcome(stack: AirflowStack, engine: Engine, case: str, ds: str, run_ids: list[str], since: datetime) -> Outcome:
    rows = stack.rows(
        "SELECT dag_id, task_id, run_id, state, end_date, next_method, try_number "
        "FROM task_instance WHERE run_id IN :runs",
        expanding=["runs"],
        runs=run_ids,
    )
    with engine.connect() as conn:
        ended = {
            (r[0], r[1], r[2]): r[3]
            for r in conn.execute(
                text(
                    "SELECT e.dag_id, e.task_id, e.run_id, t.end_date FROM external_task e JOIN task_instance t "
                    "ON t.dag_id = e.dag_id AND t.task_id = e.ti_task_id AND t.execution_date = e.ti_execution_date "
                    "WHERE e.run_id IN :runs"
                ).bindparams(bindparam("runs", expanding=True)),
                {"runs": run_ids},
            )
        }
    out = Outcome(case, ds)
    for dag_id, task_id, run_id, state, end, next_method, try_number in rows:
        out.states[state] = out.states.get(state, 0) + 1
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
        service_end = ended.get((dag_id, task_id, run_id))
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
STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)(Z|[+-]\d\d:?\d\d)?")


def trigger_heard_at(logs: Path, dag_id: str, run_id: str, task_id: str) -> datetime | None:
    """When the task's trigger logged that it ends the task (aware UTC), from Airflow's task logs (2.10 writes a
    trigger's lines to ``attempt=N.log.trigger.<job>.log``, 3.x to the task's log), or None."""
    folder = logs / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
    for path in sorted(folder.glob("attempt=1.log*")):
        for line in path.read_text(errors="replace").splitlines():
            if HEARD in line and (match := STAMP.search(line)):
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
    lines = [
        f"Airflow {version}, LocalExecutor, database on PostgreSQL, sensors {option!r}; per case over "
        f"{len(outcomes) // len(CASES)} run(s)",
        f"{'case':<16}{'tasks':>6}{'failed':>7}{'on worker':>11}{'by trigger':>11}"
        f"{'end p50':>9}{'end p95':>9}{'service p50':>12}{'airflow p50':>12}{'airflow p95':>12}"
        f"{'heard p50':>10}{'triggerer p50':>14}",
    ]
    for case in CASES:
        mine = [o for o in outcomes if o.case == case]
        to_end = [v for o in mine for v in o.to_end]
        service = [v for o in mine for v in o.service]
        airflow = [v for o in mine for v in o.airflow]
        heard = [v for o in mine for v in o.heard]
        triggerer = [v for o in mine for v in o.triggerer]
        lines.append(
            f"{case:<16}{sum(o.tasks for o in mine):>6}{sum(o.tasks - o.states.get('success', 0) for o in mine):>7}"
            f"{sum(o.on_worker for o in mine):>11}{sum(o.by_trigger for o in mine):>11}"
            f"{p(to_end, 0.5):>8.1f}s{p(to_end, 0.95):>8.1f}s{p(service, 0.5):>11.2f}s"
            f"{p(airflow, 0.5):>11.2f}s{p(airflow, 0.95):>11.2f}s{p(heard, 0.5):>9.2f}s{p(triggerer, 0.5):>13.2f}s"
        )
    lines.append(
        "end: from the landing (or the trigger, when the data was there first) to Airflow's end of the task; "
        "service: to smartsensor's end of the try; airflow: from that to Airflow's end; of which, for the tasks "
        "their trigger ended, heard: until the trigger had the answer, triggerer: from that to Airflow's end"
    )
    return "\n".join(lines)


def semantics_file(db: str = DB) -> str:
    """The semantics DAG file, on Hive database ``db``."""
    return SEMANTICS.replace("@DB@", db)


# Each drop-in rule beside Airflow's own sensor with the same arguments (PythonSensor: the BaseSensorOperator rules
# the Hive provider's sensors follow), then what is Hive-provider specific: a whole-list template (9.6.1+), a
# templated metastore_conn_id (9.7.0), the default partition, and mode/deferrable accepted.
SEMANTICS = """
from datetime import datetime, timedelta

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
    NamedHivePartitionSensor(task_id="whole_list", partition_names="{{ ['@DB@.events/ds=' ~ ds] }}",
                             mode="reschedule", deferrable=False, **QUICK)
    HivePartitionSensor(task_id="templated_conn", table="events", schema="@DB@", partition=None,
                        metastore_conn_id="{{ params.conn }}", mode="poke", deferrable=True, **QUICK)
"""
ENDED = ("success", "failed", "skipped", "upstream_failed")


def run_semantics(stack: AirflowStack, landing: Landing, ds: str) -> dict[str, tuple[str, int, dict[str, Any]]]:
    """Trigger the semantics DAG for ``ds``, land the day, wait until every task ended for good (no retry left);
    task_id → (state, try_number, rendered template fields)."""
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
    return {
        task_id: (state, int(tries), rendered.get(task_id, {}))
        for task_id, state, tries in stack.rows(
            "SELECT task_id, state, try_number FROM task_instance WHERE run_id = :r", r=run_id
        )
    }
