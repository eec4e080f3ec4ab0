"""What scripts/airflow/demo.py prints at the end, from what Airflow and smartsensor recorded: each Airflow task's
state against the state it should have (from what the pipeline landed and each sensor's own rules), and the
figures (registrations and distinct checks, metastore calls against Airflow's own sensors, states requests).

Pure functions over plain data, so the rules can be read (and tested) apart from the processes.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Iterable

from rich.table import Table

# The non-Airflow demo's rules: what landed, classic poke cost.
from scripts.demo.demo import check_landed, classic_calls

SENSOR_OPERATORS = {"NamedHivePartitionSensor", "HivePartitionSensor", "SuccessFileSensor"}
# The classes of Airflow's Hive provider the cluster policy routes (smartsensor_airflow.policy, every one enabled
# by default), and what it appends to their operator name (the UI's, Airflow's task_instance.custom_operator_name).
HIVE_SENSORS = {"NamedHivePartitionSensor", "HivePartitionSensor", "MetastorePartitionSensor"}
VIA_SMARTSENSOR = " via smartsensor"
TERMINAL = {"success", "failed", "skipped", "upstream_failed", "removed"}
DEFAULT_POLL = 10.0  # the provider's smartsensor_poll_interval when a DAG gives none: min(poke_interval, 10 s)


@dataclass
class DagCheck:
    """One DAG's tasks: Airflow's state and the expected one, by task id."""

    dag_id: str
    got: dict[str, str | None] = field(default_factory=dict)
    expected: dict[str, str] = field(default_factory=dict)
    sensors: int = 0

    def mismatches(self, finished_only: bool = False) -> list[str]:
        """Tasks not in their expected state; with ``finished_only`` (a run cut short), only among those that
        ended (a task still waiting says nothing yet)."""
        return [
            f"{self.dag_id}.{t}: expected {self.expected[t]}, Airflow says {self.got.get(t)}"
            for t in sorted(self.expected)
            if self.got.get(t) != self.expected[t] and (not finished_only or self.got.get(t) in TERMINAL)
        ]


def sensor_expectation(row: dict[str, Any] | None, partitions: set[str], files: set[str]) -> str:
    """What a sensor task must end as: success when what it waited for landed, else by its own timeout rules
    (skipped with soft_fail, failed without). ``row`` is its task instance in smartsensor (None: never
    registered, which is itself a mismatch)."""
    if row is None:
        return "registered with smartsensor"
    if check_landed(row, partitions, files):
        return "success"
    return "skipped" if json.loads(row["exec_dict"]).get("soft_fail") else "failed"


def downstream_expectation(upstream: Iterable[str]) -> str:
    """A task with the default trigger rule (all_success), from what its upstream tasks are expected to end as."""
    states = set(upstream)
    if states <= {"success"}:
        return "success"
    if states & {"failed", "upstream_failed", "registered with smartsensor"}:
        return "upstream_failed"
    return "skipped"


def is_sensor(operator_name: str | None) -> bool:
    """A smartsensor-checked sensor by its operator name: a drop-in's (``NamedHivePartitionSensor``) or one of
    Airflow's routed by the cluster policy (``NamedHivePartitionSensor via smartsensor``)."""
    return (operator_name or "").removesuffix(VIA_SMARTSENSOR) in SENSOR_OPERATORS


@dataclass
class PolicyCheck:
    """With the cluster policy: Airflow's task instances of its Hive sensor classes, and those among them whose
    operator name does not say ``via smartsensor`` (each one ran, or will run, as Airflow's own sensor)."""

    hive_sensors: int
    not_routed: list[str]

    @property
    def routed(self) -> int:
        return self.hive_sensors - len(self.not_routed)


def policy_check(task_instances: Iterable[tuple[str, str, str | None, str | None]]) -> PolicyCheck:
    """``task_instances``: Airflow's (dag_id, task_id, operator, custom_operator_name)."""
    hive = [(d, t, name) for d, t, op, name in task_instances if op in HIVE_SENSORS]
    return PolicyCheck(
        hive_sensors=len(hive),
        not_routed=[
            f"{d}.{t}: operator {name!r}, not via smartsensor (the cluster policy left it as Airflow's own)"
            for d, t, name in sorted(hive)
            if not (name or "").endswith(VIA_SMARTSENSOR)
        ],
    )


def check_dag(
    dag_id: str,
    tasks: list[dict[str, Any]],
    got: dict[str, str | None],
    rows: dict[tuple[str, str], dict[str, Any]],
    partitions: set[str],
    files: set[str],
) -> DagCheck:
    """Expected states of one DAG's tasks. ``tasks`` is Airflow's own description of the DAG (REST
    ``/dags/{id}/tasks``: task_id, operator_name, trigger_rule, downstream_task_ids)."""
    check = DagCheck(dag_id, got=got)
    upstream: dict[str, list[str]] = {t["task_id"]: [] for t in tasks}
    for t in tasks:
        for down in t["downstream_task_ids"]:
            upstream[down].append(t["task_id"])
    by_id = {t["task_id"]: t for t in tasks}
    pending = list(by_id)
    while pending:  # in dependency order
        for task_id in list(pending):
            if any(u in pending for u in upstream[task_id]):
                continue
            pending.remove(task_id)
            task = by_id[task_id]
            if is_sensor(task["operator_name"]):
                check.sensors += 1
                check.expected[task_id] = sensor_expectation(rows.get((dag_id, task_id)), partitions, files)
            elif task.get("trigger_rule", "all_success") == "all_success":
                check.expected[task_id] = downstream_expectation(check.expected[u] for u in upstream[task_id])
    return check


# -- figures ------------------------------------------------------------------------------------------


def seconds(row: dict[str, Any], start: str, end: str) -> float:
    if not row.get(start) or not row.get(end):
        return 0.0
    return max(0.0, (_dt(row[end]) - _dt(row[start])).total_seconds())


def _dt(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


def poll_interval(row: dict[str, Any]) -> float:
    return min(DEFAULT_POLL, float(json.loads(row["exec_dict"])["poke_interval"]))


@dataclass
class Figures:
    registrations: int
    distinct_checks: int
    worker_rounds: int
    listings: int  # partition listings (catalog_calls), one per table per round that had due checks
    schema_reads: int  # partition column types (schema_calls), cached 5 minutes per table
    classic_calls: int  # Airflow's own sensors, same waits (computed)
    states_requests: int
    per_task_requests: int  # if each trigger polled alone (computed)
    shortest_poll: float
    deferred_window: float  # first registration → last sensor ended in smartsensor, seconds
    sensor_worker_tries: int  # sensor tries that ran a task process on a worker (0: all started in the triggerer)

    @property
    def metastore_calls(self) -> int:
        return self.listings + self.schema_reads

    @property
    def triggerer_requests(self) -> int:
        """The states requests left to the triggerer: a try whose ``execute`` ran on a worker sends at most one (its
        held request, before deferring), and serve counts both alike."""
        return max(0, self.states_requests - min(self.registrations, self.sensor_worker_tries))


def figures(
    rows: list[dict[str, Any]], rounds: list[dict[str, Any]], states_requests: int, sensor_worker_tries: int
) -> Figures:
    """The summary's numbers from smartsensor's task instances (one per registered sensor try), the workers'
    rounds (``worker --json``), serve's count of states requests and the sensor tries Airflow ran on a worker.

    Two of them are computed, not run (MODEL says so in the printout): what Airflow's own Hive sensors would have
    cost the metastore for the same waits, and the states requests if every trigger had polled on its own.
    """
    starts = [_dt(r["execution_date"]) for r in rows]
    ends = [_dt(r["end_date"]) for r in rows if r.get("end_date")]
    window = (max(ends) - min(starts)).total_seconds() if starts and ends else 0.0
    return Figures(
        registrations=len(rows),
        distinct_checks=len({r["hashcode"] for r in rows}),
        worker_rounds=len(rounds),
        listings=sum(r.get("catalog_calls", 0) + r.get("fs_calls", 0) for r in rounds),
        schema_reads=sum(r.get("schema_calls", 0) for r in rounds),
        classic_calls=sum(classic_calls(r) for r in rows),
        states_requests=states_requests,
        per_task_requests=sum(int(seconds(r, "execution_date", "end_date") // poll_interval(r)) + 1 for r in rows),
        shortest_poll=min((poll_interval(r) for r in rows), default=DEFAULT_POLL),
        deferred_window=window,
        sensor_worker_tries=sensor_worker_tries,
    )


def state_counts(states: Iterable[str | None]) -> str:
    counts = Counter(s or "none" for s in states)
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


MODEL = (
    "Computed, not run: Airflow's own NamedHivePartitionSensor and HivePartitionSensor have no deferrable mode; "
    "in poke or reschedule mode each task asks the metastore when it starts and again every poke_interval until "
    "it ends, one call per table it waits on. 'Same waits' counts, for each sensor, (seconds it waited // "
    "poke_interval + 1) x tables, with the waits smartsensor recorded in this run (from the start of its try to "
    "its end), so it grows with how long the sensors really waited. 'If each trigger polled alone' counts one "
    "request per deferred sensor per poll interval (min(poke_interval, 10 s)) while it waited."
)


def dag_table(checks: list[DagCheck], finished: bool) -> tuple[Table, list[str]]:
    """Per DAG: tasks, sensors, expected and actual states, OK or how many mismatches; and the mismatches."""
    table = Table(title="Airflow task states against the expected ones", title_justify="left")
    for col in ("DAG", "tasks", "sensors", "expected", "Airflow says", "check"):
        table.add_column(col, justify="right" if col in ("tasks", "sensors") else "left")
    problems: list[str] = []
    for check in checks:
        wrong = check.mismatches(finished_only=not finished)
        problems += wrong
        table.add_row(
            check.dag_id,
            str(len(check.got)),
            str(check.sensors),
            state_counts(check.expected.values()),
            state_counts(check.got.values()),
            "[green]OK[/green]" if not wrong else f"[red]{len(wrong)} mismatch(es)[/red]",
        )
    return table, problems


PARKED_REQUESTS = "states requests (held by the parking attendant)"
TRIGGERER_REQUESTS = "states requests (execute's held ones + 1 triggerer)"


def figures_table(f: Figures, landed: int, partitions: int, parked: bool = False) -> Table:
    """The summary's figures; ``parked``: the sensors' tries parked (the attendant asked and ended them), else
    they started in the triggerer."""
    ratio = f"{f.registrations / f.distinct_checks:.1f}x" if f.distinct_checks else "-"
    fewer = f"{f.classic_calls / f.metastore_calls:.1f}x fewer with smartsensor" if f.metastore_calls else "-"
    table = Table(title="smartsensor", title_justify="left", show_header=False)
    table.add_column("")
    table.add_column("", justify="right")
    for name, value in (
        ("partitions landed by the pipeline", f"{landed} of {partitions}"),
        ("sensor registrations (one per Airflow try)", str(f.registrations)),
        (
            "sensor tries that took an Airflow worker slot",
            f"{f.sensor_worker_tries} of {f.registrations} "
            + (
                "(the others waited parked, with no worker and no trigger, and the attendant ended them)"
                if parked
                else "(the others started and ended in the triggerer)"
            ),
        ),
        ("distinct checks (hashes)", f"{f.distinct_checks} (dedup {ratio})"),
        (
            "metastore calls by smartsensor's workers",
            f"{f.metastore_calls} ({f.listings} partition listings + {f.schema_reads} schema reads, "
            f"{f.worker_rounds} rounds)",
        ),
        ("Airflow's own Hive sensors, same waits (computed)", f"{f.classic_calls} ({fewer})"),
        (
            PARKED_REQUESTS,
            f"{f.states_requests} in {f.deferred_window:.0f} s: each held until an answer changes (up to 25 s), "
            "for up to 1,000 parked tries",
        )
        if parked
        else (
            TRIGGERER_REQUESTS,
            f"{f.states_requests} in {f.deferred_window:.0f} s: up to {min(f.registrations, f.sensor_worker_tries)} "
            f"held in execute (one per try on a worker), {f.triggerer_requests} or more by the triggerer, each for "
            f"every deferred sensor (poll interval {f.shortest_poll:g} s)",
        ),
        ("if each trigger polled alone (computed)", str(f.per_task_requests)),
    ):
        table.add_row(name, value)
    return table


def summary_json(checks: list[DagCheck], f: Figures, finished: bool, **extra: Any) -> dict[str, Any]:
    """The summary as data (``--summary-json``)."""
    return {
        "finished": finished,
        "dags": {
            c.dag_id: {
                "tasks": len(c.got),
                "sensors": c.sensors,
                "expected": dict(Counter(c.expected.values())),
                "got": dict(Counter(s or "none" for s in c.got.values())),
                "mismatches": c.mismatches(finished_only=not finished),
            }
            for c in checks
        },
        "figures": {**asdict(f), "metastore_calls": f.metastore_calls},
        **extra,
    }


# -- schedule on landings (--assets) ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConsumerRun:
    """One Airflow run of a partitioned consumer: its partition key, state, when it was queued (aware UTC) and what
    its task returned (its XCom, which names the ``dag_run.partition_key`` the task read; None: nothing yet)."""

    partition_key: str | None
    state: str | None
    queued_at: datetime | None
    returned: str | None = None


@dataclass
class ConsumerCheck:
    """A ``PartitionedAssetTimetable`` consumer of one table: the partitions the pipeline landed there (partition
    key → when the pipeline's insert returned, aware UTC), Airflow's runs of it, and when Airflow took each
    landing's asset event (the outbox's ``delivered_at``, by partition key)."""

    dag_id: str
    table: str
    landed: dict[str, datetime]
    runs: list[ConsumerRun] = field(default_factory=list)
    posted: dict[str, datetime] = field(default_factory=dict)

    def runs_per_key(self) -> Counter[str | None]:
        return Counter(r.partition_key for r in self.runs)

    def lags(self) -> list[float]:
        """Seconds from each landing to the queueing of its run (the first, if several)."""
        queued: dict[str, datetime] = {}
        for run in self.runs:
            if run.partition_key in self.landed and run.queued_at is not None:
                key = run.partition_key
                queued[key] = min(queued.get(key, run.queued_at), run.queued_at)
        return [(queued[k] - self.landed[k]).total_seconds() for k in sorted(queued)]

    def post_lags(self) -> list[float]:
        """Seconds from each landing to Airflow's 2xx for its event (smartsensor's share of ``lags``)."""
        return [(self.posted[k] - self.landed[k]).total_seconds() for k in sorted(self.posted) if k in self.landed]

    def problems(self, finished: bool) -> list[str]:
        """A landed partition with no run (only when the run finished: a run cut short may still get it) or with
        several, a run whose key landed nowhere, a run that did not succeed, a task that did not read its key."""
        per_key = self.runs_per_key()
        out = [
            f"{self.dag_id}: partition {k!r} of {self.table} landed, no run started"
            for k in sorted(self.landed)
            if finished and not per_key.get(k)
        ]
        out += [
            f"{self.dag_id}: partition {k!r} started {n} runs, not one"
            for k, n in sorted(per_key.items(), key=str)
            if n > 1
        ]
        out += [
            f"{self.dag_id}: a run for {k!r}, which did not land"
            for k in sorted(per_key, key=str)
            if k not in self.landed
        ]
        for run in self.runs:
            if finished and run.state != "success":
                out.append(f"{self.dag_id}: the run for {run.partition_key!r} ended {run.state}, not success")
            elif run.state == "success" and (run.returned is None or str(run.partition_key) not in run.returned):
                out.append(
                    f"{self.dag_id}: the run for {run.partition_key!r} returned {run.returned!r}, not its partition key"
                )
        return out


def percentile_50(values: list[float]) -> float | None:
    """The median, or None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def assets_table(checks: list[ConsumerCheck], finished: bool) -> tuple[Table, list[str]]:
    """Per consumer: its table, the partitions landed, the runs started, their keys, landed → run queued p50 / max,
    OK or how many problems; and the problems."""
    table = Table(
        title="Scheduled on landings: PartitionedAssetTimetable consumers, one run per landed partition",
        title_justify="left",
    )
    table.add_column("consumer (its table)", no_wrap=True)
    table.add_column("landed", justify="right")
    table.add_column("runs", justify="right")
    table.add_column("runs' keys", min_width=13)
    table.add_column("landed ->\nposted\np50 / max", no_wrap=True)
    table.add_column("landed ->\nrun queued\np50 / max", no_wrap=True)
    table.add_column("check", no_wrap=True)
    problems: list[str] = []
    for check in checks:
        wrong = check.problems(finished)
        problems += wrong
        table.add_row(
            f"{check.dag_id}\n({check.table})",
            str(len(check.landed)),
            str(len(check.runs)),
            compact_keys(str(k) for k in check.runs_per_key()) or "-",
            _p50_max(check.post_lags()),
            _p50_max(check.lags()),
            "[green]OK[/green]" if not wrong else f"[red]{len(wrong)} problem(s)[/red]",
        )
    return table, problems


def compact_keys(keys: Iterable[str]) -> str:
    """Partition keys, sorted, those that differ only after their last ``|`` as one brace list:
    ``2026-11-22|{00, 01}`` for ``2026-11-22|00`` and ``2026-11-22|01``."""
    groups: dict[str, list[str]] = {}
    for key in sorted(set(keys)):
        head, sep, tail = key.rpartition("|")
        if sep:
            groups.setdefault(head + sep, []).append(tail)
        else:
            groups[key] = []  # one value: nothing to share
    return " ".join(
        head + ("" if not tails else tails[0] if len(tails) == 1 else "{" + ", ".join(tails) + "}")
        for head, tails in groups.items()
    )


def _p50_max(values: list[float]) -> str:
    p50 = percentile_50(values)
    return "-" if p50 is None else f"{p50:.1f} / {max(values):.1f} s"


def assets_json(checks: list[ConsumerCheck], finished: bool) -> dict[str, Any]:
    """The consumers' part of the summary as data (``--summary-json``, ``assets.consumers``)."""
    out: dict[str, Any] = {}
    for c in checks:
        lags, posts = c.lags(), c.post_lags()
        out[c.dag_id] = {
            "table": c.table,
            "landed": sorted(c.landed),
            "runs": len(c.runs),
            "runs_per_key": {str(k): n for k, n in sorted(c.runs_per_key().items(), key=str)},
            "states": dict(Counter(r.state or "none" for r in c.runs)),
            "lag_p50": percentile_50(lags),
            "lag_max": max(lags) if lags else None,
            "post_lag_p50": percentile_50(posts),
            "post_lag_max": max(posts) if posts else None,
            "problems": c.problems(finished),
        }
    return out
