"""The process-level liveness test's workload (tests/process/test_liveness.py): Hive tables made and partitions
landed through the metastore's thrift API (no Spark, no JVM but the metastore service's), a stream of
registrations and landings planned in time, and the ready → success table it prints.

A *check* is one partition; several tasks (Airflow tries registered through the API) wait on it. Half of the
checks are on ``live.sig`` and get a landing signal right after they land; the other half, on ``live.poll``, get
none (pure polling). They are on different tables because a signal wakes every check on its table.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

from scripts.harness.hive_tables import Metastore as Metastore  # tests/process/test_hosts.py imports it from here
from smartsensor_airflow.wire import TryKey

DB = "live"
SIGNALLED, POLLED = "sig", "poll"  # the two tables


@dataclass
class StreamCheck:
    """One partition the tasks wait on, and when (seconds into the stream) it lands."""

    ds: str
    signal: bool
    poke_interval: float  # the exec poke_interval of every task on it
    land_at: float
    landing: datetime | None = None  # naive UTC, just before the partition was added: it cannot be seen earlier
    landed: datetime | None = None  # naive UTC, just after the metastore committed it: ready from then on

    @property
    def table(self) -> str:
        return SIGNALLED if self.signal else POLLED

    @property
    def partition(self) -> str:
        return f"{DB}.{self.table}/ds={self.ds}"


@dataclass
class Task:
    """One Airflow try registered through ``POST /api/v1/tasks``, and the task instance the service made of it."""

    check: StreamCheck
    task_id: str
    register_at: float  # seconds into the stream
    ti: tuple[str, datetime] | None = None  # (task_id, execution_date) of the task instance; naive UTC

    @property
    def key(self) -> TryKey:
        return TryKey(DB, self.task_id, "run1", -1, 1)


def plan_stream(
    checks_per_kind: int,
    tasks_per_check: int,
    first_landing: float,
    last_landing: float,
    offsets: tuple[tuple[float, ...], ...],
    signalled_poke: float,
    polled_poke: float,
    seed: int = 30,
) -> tuple[list[StreamCheck], list[Task]]:
    """Checks landing evenly between ``first_landing`` and ``last_landing`` (signalled and polled alternate), each
    with ``tasks_per_check`` tasks registering at its landing + an offset (with ±0.3 s of jitter). The checks of each
    kind take turns over the ``offsets`` patterns, whose offsets are cycled through their tasks: e.g. one pattern
    with tasks registering before, while and after it lands, one with all of them before it. Times are seconds
    into the stream, never negative."""
    rng = random.Random(seed)
    n = 2 * checks_per_kind
    checks, tasks = [], []
    for i in range(n):
        signal = i % 2 == 0
        land_at = first_landing + i * (last_landing - first_landing) / max(1, n - 1)
        check = StreamCheck(f"c{i:02d}", signal, signalled_poke if signal else polled_poke, land_at)
        checks.append(check)
        pattern = offsets[(i // 2) % len(offsets)]
        for j in range(tasks_per_check):
            at = max(0.0, land_at + pattern[j % len(pattern)] + rng.uniform(-0.3, 0.3))
            tasks.append(Task(check, f"{check.ds}_t{j}", at))
    return checks, tasks


Event = tuple[float, int, Callable[[], None]]


def run_events(events: list[Event], started: float, threads: int = 8) -> float:
    """Start each event's action at its time (seconds after the monotonic ``started``), in order, on a pool of
    ``threads``: a slow call (a registration on a loaded machine) delays no other event, as independent clients do.
    Waits for them all and raises the first error. Returns how late the latest action started, in seconds."""
    lateness: list[float] = []

    def timed(at: float, action: Callable[[], None]) -> None:
        lateness.append(time.monotonic() - started - at)
        action()

    with ThreadPoolExecutor(threads) as pool:
        futures = []
        for at, _, action in sorted(events, key=lambda e: (e[0], e[1])):
            delay = started + at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            futures.append(pool.submit(timed, at, action))
        for f in futures:
            f.result()
    return max(lateness, default=0.0)


@dataclass
class Measured:
    """A task's ready → success time and what it is counted under."""

    task: Task
    ready: datetime
    end: datetime | None
    state: str | None
    shardcode: int
    killed_range: bool  # the killed worker's: on its ranges, registered before the takeover, not ended at the kill
    before_takeover: bool  # ready before another worker held all the killed worker's ranges
    bound: float  # the seconds it may take

    @property
    def by_landing(self) -> bool:
        """Ready when its check landed (it had registered before), not when it registered."""
        return self.task.check.landed == self.ready

    @property
    def seconds(self) -> float | None:
        """ready → end; a landing seen before this test's clock read it after the commit counts as 0."""
        return None if self.end is None else max(0.0, (self.end - self.ready).total_seconds())


@dataclass
class Row:
    """One line of the latency table."""

    label: str
    seconds: list[float] = field(default_factory=list)
    waiting: int = 0

    def line(self) -> str:
        s = sorted(self.seconds)
        cells = f"{len(s):>5} " + (
            f"{statistics.median(s):>7.3f} {percentile(s, 95):>7.3f} {s[-1]:>7.3f}" if s else f"{'-':>7} " * 3
        )
        return f"{self.label:<44} {cells}" + (f"   ({self.waiting} not ended)" if self.waiting else "")


def percentile(sorted_values: list[float], p: float) -> float:
    """The nearest-rank ``p``-th percentile of an ascending list."""
    return sorted_values[max(0, math.ceil(p / 100 * len(sorted_values)) - 1)]


def table(measured: list[Measured]) -> str:
    """count, p50, p95, max of ready → success: with and without a signal (each also by what made the task ready),
    the killed worker's tasks apart (those ready before the takeover also on their own), and all."""
    rows = {
        "sig": Row("with signal (not the killed worker's)"),
        "sig-land": Row("  ready at its landing"),
        "sig-reg": Row("  ready at its registration (landed before)"),
        "poll": Row("without signal (not the killed worker's)"),
        "poll-land": Row("  ready at its landing"),
        "poll-reg": Row("  ready at its registration (landed before)"),
        "ksig": Row("killed worker's ranges, with signal"),
        "kpoll": Row("killed worker's ranges, without signal"),
        "kgap": Row("  ready before the takeover (both kinds)"),
        "all": Row("all tasks"),
    }
    for m in measured:
        kind = "sig" if m.task.check.signal else "poll"
        if m.killed_range:
            keys = [f"k{kind}"] + (["kgap"] if m.before_takeover else [])
        else:
            keys = [kind, f"{kind}-{'land' if m.by_landing else 'reg'}"]
        for row in [rows[k] for k in keys] + [rows["all"]]:
            if m.seconds is None:
                row.waiting += 1
            else:
                row.seconds.append(m.seconds)
    head = f"{'ready -> success, seconds':<44} {'count':>5} {'p50':>7} {'p95':>7} {'max':>7}"
    return "\n".join([head, *(r.line() for r in rows.values())])
