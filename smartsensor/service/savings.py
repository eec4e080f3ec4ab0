"""``smartsensor airflow report``: what the Hive sensor tasks of an Airflow installation cost over a period, read
from its metadata database, and what smartsensor would make of the same waits.

Per try (``adapters.sql.airflow_history``): its wait (from its first poke to its end; a try still running, up to
now), the worker-slot time it held and the pokes Airflow's own sensor makes over that wait:

- **poke mode**: the slot is held for the whole try (its duration); pokes = wait // poke_interval + 1;
- **reschedule mode** (``task_reschedule`` rows): the slot is held only while a poke runs. Pokes are counted, one
  per row, plus the last one when the try ended. On 2.x each row holds its poke's own start and end; on 3.x only
  the last poke's time is recorded (the task instance's start and end), and each other poke is counted as long
  as the mean of the pokes whose time is recorded;
- **deferred** (the try resumed after its trigger fired, ended from its trigger, or is deferred now): time
  deferred is not slot time. Only the stint after the resume (its queue time → its end) is counted; Airflow does
  not record the stint before the deferral (short: it defers at once), counted 0.

poke_interval: from the serialized DAG when it is there (Airflow 2.10.5 and 3.3.2 do not serialize it), else from
the task's reschedule rows (``reschedule_date - end_date``, their median), else the class's default (180 s for
NamedHivePartitionSensor and HivePartitionSensor, 60 s for MetastorePartitionSensor).

Airflow's metastore calls: one call per poke for HivePartitionSensor (a filter) and MetastorePartitionSensor (one
query); NamedHivePartitionSensor checks its partitions in order, stops at the first one missing and skips those
found since, so pokes - 1 + its partitions (as if they landed together at the end).

smartsensor for the same waits: every ``interval`` seconds a round checks each distinct partition some task waits
for, one metastore call per table per round (batched). Over the union of the waits on a partition, a stretch of
``s`` seconds is ``s // interval + 1`` rounds. That is an upper bound: the service checks a partition in a round only
when one of its tasks is due by its own poke_interval. Tasks whose rendered fields are gone count as a partition
and a table of their own (no deduplication claimed). Worker slots: ~0, the tasks defer.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable

from smartsensor.domain.airflow_history import AirflowHistory, SensorTry, TaskSettings, TiKey
from smartsensor.ports import AirflowSensorHistory
from smartsensor.service.airflow_partitions import NAMED, Partition, partitions_of

DEFAULT_POKE_INTERVAL = {NAMED: 180.0, "HivePartitionSensor": 180.0, "MetastorePartitionSensor": 60.0}
Window = tuple[datetime, datetime]


@dataclass
class TryCost:
    """One try: its wait, the slot time it held (by how), and Airflow's own sensor's pokes over it."""

    window: Window
    kind: str  # "poke", "reschedule" or "deferred"
    slot_seconds: float
    deferred_seconds: float
    pokes: int


@dataclass
class SavingsReport:
    """The figures ``airflow report`` prints (``as_json`` for tooling)."""

    airflow_schema: int
    days: int
    since: str
    interval: float
    sensor_tasks: int = 0
    tries: int = 0
    by_operator: dict[str, int] = field(default_factory=dict)
    distinct_checks: int = 0
    distinct_partitions: int = 0
    tables: int = 0
    tasks_without_fields: int = 0
    partition_waits: int = 0  # task instances x the partitions each waited for
    slot_hours: dict[str, float] = field(default_factory=dict)  # by mode: poke, reschedule, deferred
    deferred_hours: float = 0.0
    reschedule_pokes: int = 0
    poke_interval_from: dict[str, int] = field(default_factory=dict)  # serialized DAG, reschedule rows, default
    airflow_pokes: int = 0
    airflow_metastore_calls: int = 0
    smartsensor_checks: int = 0
    smartsensor_metastore_calls: int = 0
    smartsensor_rounds: int = 0

    @property
    def dedup_ratio(self) -> float | None:
        return round(self.sensor_tasks / self.distinct_checks, 2) if self.distinct_checks else None

    @property
    def tasks_per_partition(self) -> float | None:
        """How many tasks waited on each distinct partition, on average."""
        return round(self.partition_waits / self.distinct_partitions, 2) if self.distinct_partitions else None

    @property
    def slot_hours_total(self) -> float:
        return round(sum(self.slot_hours.values()), 4)

    @property
    def calls_ratio(self) -> float | None:
        calls = self.smartsensor_metastore_calls
        return round(self.airflow_metastore_calls / calls, 1) if calls else None

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(
            dedup_ratio=self.dedup_ratio,
            tasks_per_partition=self.tasks_per_partition,
            slot_hours_total=self.slot_hours_total,
            calls_ratio=self.calls_ratio,
            smartsensor_slot_hours=0,
            assumptions=ASSUMPTIONS,
        )
        return out


ASSUMPTIONS = [
    "Tasks: task instances whose operator is NamedHivePartitionSensor, HivePartitionSensor or "
    "MetastorePartitionSensor (any module), with a try that started or ended in the period; a try still running "
    "counts up to now.",
    "Worker slots: poke mode holds a slot for the whole try; reschedule mode only while a poke runs (one per "
    "task_reschedule row, plus the last; Airflow 3 records only the last poke's time, the others count as long as "
    "the mean recorded poke); deferred time is not slot time (the stint after a resume counts, the one before the "
    "deferral is not recorded and counts 0).",
    "Airflow's calls: pokes = wait // poke_interval + 1 (reschedule mode: the pokes recorded); one metastore call "
    "per poke, NamedHivePartitionSensor pokes - 1 + its partitions. poke_interval: the serialized DAG's when there "
    "(Airflow 2.10 and 3.3 do not serialize it), else the task's reschedule rows', else the class default (180 s; "
    "MetastorePartitionSensor 60 s).",
    "smartsensor: a round every interval checks each distinct partition waited for, one metastore call per table "
    "per round, over the union of the waits on it (s // interval + 1 rounds per stretch of s seconds): an upper "
    "bound, as the service checks a partition only when one of its tasks is due by its own poke_interval; schema "
    "reads (cached) and landing signals are left out. Tasks whose rendered fields Airflow no longer keeps count as "
    "a partition and a table of their own.",
]


def savings_report(
    history: AirflowSensorHistory, days: int, interval: float, now: datetime | None = None
) -> SavingsReport:
    """Read the last ``days`` days of Hive sensor tasks from an Airflow database and compute the report."""
    now = now or datetime.now(timezone.utc)
    since = now - timedelta(days=days)
    return compute(history.read_history(since), days, since, interval, now)


def compute(history: AirflowHistory, days: int, since: datetime, interval: float, now: datetime) -> SavingsReport:
    """The report's figures from what was read (pure)."""
    report = SavingsReport(history.airflow, days, since.isoformat(timespec="seconds"), interval)
    by_ti: dict[TiKey, list[SensorTry]] = defaultdict(list)
    for one in history.tries:
        by_ti[one.key].append(one)
    waits_on: dict[Partition, list[Window]] = defaultdict(list)
    checks: set[frozenset[Partition]] = set()
    slot: defaultdict[str, float] = defaultdict(float)
    sources: Counter[str] = Counter()
    for key, tries in by_ti.items():
        operator = tries[-1].operator
        report.by_operator[operator] = report.by_operator.get(operator, 0) + 1
        found = partitions_of(operator, history.rendered.get(key))
        if found is None:
            report.tasks_without_fields += 1
            found = frozenset({Partition("?", f"{key.dag_id}.{key.task_id}.{key.run_id}.{key.map_index}", "", True)})
        checks.add(found)
        report.partition_waits += len(found)
        interval_s, source = poke_interval(operator, history.settings.get((key.dag_id, key.task_id)), tries)
        sources[source] += 1
        for one in tries:
            cost = try_cost(one, interval_s, history.poke_durations_recorded, now)
            report.tries += 1
            slot[cost.kind] += cost.slot_seconds
            report.deferred_hours += cost.deferred_seconds / 3600
            report.reschedule_pokes += len(one.pokes)
            report.airflow_pokes += cost.pokes
            report.airflow_metastore_calls += cost.pokes - 1 + len(found) if operator == NAMED else cost.pokes
            for partition in found:
                waits_on[partition].append(cost.window)
    report.sensor_tasks = len(by_ti)
    report.distinct_checks = len(checks)
    report.distinct_partitions = len(waits_on)
    report.tables = len({p.table_name for p in waits_on if p.db != "?"})
    report.slot_hours = {k: round(slot[k] / 3600, 4) for k in ("poke", "reschedule", "deferred")}
    report.deferred_hours = round(report.deferred_hours, 4)
    report.poke_interval_from = dict(sources)
    _smartsensor(report, waits_on, interval)
    return report


def _smartsensor(report: SavingsReport, waits_on: dict[Partition, list[Window]], interval: float) -> None:
    per_table: dict[str, list[Window]] = defaultdict(list)
    for partition, windows in waits_on.items():
        report.smartsensor_checks += rounds(windows, interval)
        per_table[partition.table_name].extend(windows)
    report.smartsensor_metastore_calls = sum(rounds(w, interval) for w in per_table.values())
    report.smartsensor_rounds = rounds([w for ws in waits_on.values() for w in ws], interval)


def poke_interval(operator: str, settings: TaskSettings | None, tries: list[SensorTry]) -> tuple[float, str]:
    """A task's poke_interval and where it comes from: the serialized DAG, its reschedule rows, the default."""
    if settings is not None and settings.poke_interval:
        return settings.poke_interval, "serialized DAG"
    gaps = [(p.reschedule_date - p.end).total_seconds() for t in tries for p in t.pokes]
    gaps = [g for g in gaps if g > 0]
    if gaps:
        return float(statistics.median(gaps)), "reschedule rows"
    return DEFAULT_POKE_INTERVAL.get(operator, 180.0), "class default"


def try_cost(one: SensorTry, interval: float, poke_times_recorded: bool, now: datetime) -> TryCost:
    """One try's wait, slot time (by mode) and Airflow's pokes (see the module docstring)."""
    end = one.end or now
    start = min([one.start or end, *(p.start for p in one.pokes)])
    wait = max(0.0, (end - start).total_seconds())
    last = max(0.0, (end - (one.start or end)).total_seconds())  # the try's own record: its last stint
    if one.pokes:
        ended = one.state != "up_for_reschedule"
        pokes = len(one.pokes) + (1 if ended else 0)
        known = [(p.end - p.start).total_seconds() for p in one.pokes] if poke_times_recorded else []
        known = [max(0.0, k) for k in known] + ([last] if ended or not poke_times_recorded else [])
        unknown = pokes - len(known)
        seconds = sum(known) + max(0, unknown) * (sum(known) / len(known) if known else 0.0)
        return TryCost((start, end), "reschedule", seconds, 0.0, pokes)
    pokes = int(wait // interval) + 1
    resumed = one.queued is not None and one.start is not None and one.queued > one.start
    if resumed or one.next_method is not None or one.state == "deferred":
        stint = max(0.0, (end - one.queued).total_seconds()) if resumed and one.queued is not None else 0.0
        return TryCost((start, end), "deferred", min(stint, wait), wait - min(stint, wait), pokes)
    return TryCost((start, end), "poke", wait, 0.0, pokes)


def rounds(windows: Iterable[Window], interval: float) -> int:
    """Rounds every ``interval`` seconds over the union of ``windows``: ``s // interval + 1`` per stretch of ``s``
    seconds (windows that overlap or touch are one stretch)."""
    total = 0
    stretch: Window | None = None
    for start, end in sorted(windows):
        if stretch is not None and start <= stretch[1]:
            stretch = (stretch[0], max(stretch[1], end))
            continue
        if stretch is not None:
            total += int((stretch[1] - stretch[0]).total_seconds() // interval) + 1
        stretch = (start, end)
    if stretch is not None:
        total += int((stretch[1] - stretch[0]).total_seconds() // interval) + 1
    return total
