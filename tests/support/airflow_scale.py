"""The scale test's measures (tests/airflow/test_production_like.py::test_at_scale): many sensors in one real Airflow,
by strategy, what they cost Airflow beside how fast they end.

- *worker tries*: tries that ran a task process on a worker (their ``attempt=N.log``);
- *slot-seconds*: the sensor tasks in state ``running`` (each holds an executor slot), sampled every SAMPLE s;
- *triggerer CPU and RSS*: the triggerer's process group (3.x: its trigger runner subprocess too), from /proc;
- *scheduler loop*: Airflow's own ``scheduler.scheduler_loop_duration`` timer, received as statsd;
- *pick-up rate*: sensors per second from the first try's start to the last registration (or, for Airflow's own
  sensors, to the last try's start), in the case where they all wait.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from scripts.harness.usage import group_usage, machine_busy_seconds, tree_groups
from tests.support.airflow_race import CASES, Outcome, p

SAMPLE = 0.25  # seconds between samples of the running sensor tasks

# Strategies: the DAG option (airflow_race.OPTIONS) and the DAG id prefix of each.
STRATEGIES = {
    "start in triggerer": ("drop-in", "scale_start_"),
    "parked": ("parked", "scale_parked_"),  # a pool with 0 slots; the parking attendant ends them
    "execute path": ("execute", "scale_execute_"),
    "Airflow's own (reschedule)": ("airflow reschedule", "scale_airflow_"),
    # The provider's older ways to end, which Airflow's deferral race could fail (airflow_race.OPTIONS).
    "resume on a worker": ("resume", "scale_resume_"),
    "held, resume on a worker": ("held + resume", "scale_held_"),
}


class StatsdSink:
    """A UDP statsd server on 127.0.0.1 that keeps every timer value by name (``name:12.3|ms``)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.5)
        self.port = self.sock.getsockname()[1]
        self.timers: dict[str, list[float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="statsd-sink", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65535)
            except OSError:
                continue
            for line in data.decode(errors="replace").splitlines():
                name, _, rest = line.partition(":")
                value, _, kind = rest.partition("|")
                if kind.startswith("ms"):
                    try:
                        self.timers.setdefault(name, []).append(float(value))
                    except ValueError:
                        continue

    def take(self, suffix: str) -> list[float]:
        """The values of the timer whose name ends with ``suffix`` received so far, and forget them."""
        taken: list[float] = []
        for name in list(self.timers):
            if name.endswith(suffix):
                taken += self.timers.pop(name)
        return taken

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


class SlotSampler:
    """Samples, every SAMPLE seconds until stopped, how many of the given DAGs' task instances are ``running``:
    their sum times SAMPLE is the executor slot-seconds they held."""

    def __init__(self, stack: Any, dag_ids: list[str]) -> None:
        self.stack, self.dag_ids = stack, dag_ids
        self.slot_seconds = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="slot-sampler", daemon=True)

    def __enter__(self) -> SlotSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE):
            rows = self.stack.rows(
                "SELECT count(*) FROM task_instance WHERE dag_id IN :dags AND state = 'running'",
                expanding=["dags"],
                dags=self.dag_ids,
            )
            self.slot_seconds += int(rows[0][0]) * SAMPLE


class BusyElsewhere:
    """The machine's CPU spent outside the process groups ``pgids`` and those of their descendants (2.10's DAG
    processor manager makes a group of its own) over a ``with`` block, in cores on average: other tests, other jobs
    on a shared machine (and the shared PostgreSQL)."""

    def __init__(self, pgids: list[int]) -> None:
        self.pgids = pgids
        self.cores = 0.0

    def groups(self) -> set[int]:
        return set(self.pgids).union(*(tree_groups(pgid) for pgid in self.pgids))

    def ours(self, groups: set[int]) -> float:
        return sum(group_usage(pgid).cpu_seconds for pgid in groups)

    def __enter__(self) -> BusyElsewhere:
        self._groups = self.groups()
        self._start = (time.monotonic(), machine_busy_seconds(), self.ours(self._groups))
        return self

    def __exit__(self, *exc: object) -> None:
        at, machine, before = self._start
        wall = time.monotonic() - at
        groups = self._groups | self.groups()  # a group made meanwhile spent all its CPU in the block
        spent = (machine_busy_seconds() - machine) - (self.ours(groups) - before)
        self.cores = max(0.0, spent / wall) if wall > 0 else 0.0


@dataclass
class ScaleRun:
    """One strategy's three cases at scale, and what they cost."""

    strategy: str
    sensors: int
    outcomes: list[Outcome] = field(default_factory=list)
    again: list[Outcome] = field(default_factory=list)  # cases measured again after missing a goal (not in the costs)
    slot_seconds: float = 0.0
    triggerer_cpu: float = 0.0  # CPU seconds over the three cases
    triggerer_rss_idle: int = 0  # before the first case
    triggerer_rss_waiting: int = 0  # while every sensor waits (the moment of the landing)
    rss_idle: dict[str, int] = field(default_factory=dict)  # Airflow component → RSS before the first case
    rss_waiting: dict[str, int] = field(default_factory=dict)  # … while every sensor waits
    airflow_cpu: float = 0.0  # the scheduler's process group: scheduler, LocalExecutor and its task processes
    loop_ms: list[float] = field(default_factory=list)  # scheduler.scheduler_loop_duration over the cases
    pickup_rate: float = 0.0  # sensors per second started and registered, when they all wait
    callback_rows: int = 0  # rows added to Airflow's callback requests over the cases

    def case(self, name: str) -> Outcome:
        return next(o for o in self.outcomes if o.case == name)


def pickup_rate(outcome: Outcome, sensors: int) -> float:
    """Sensors per second from the first try's start to the last registration (or start, when none register)."""
    ends = outcome.registered or outcome.started
    if not outcome.started or not ends:
        return float("nan")
    span = max(ends) - min(outcome.started)
    return sensors / span if span > 0 else float("nan")


def scale_table(version: str, runs: list[ScaleRun]) -> str:
    """The strategies side by side: cost to Airflow, then end p50/p95 per case."""
    per_k = [(r, 1000.0 / r.sensors) for r in runs]
    rows: list[tuple[str, list[str]]] = [
        ("sensors", [str(r.sensors) for r in runs]),
        ("failed tasks", [str(sum(o.tasks - o.states.get("success", 0) for o in r.outcomes)) for r in runs]),
        ("worker tries (task processes)", [str(sum(o.worker_tries for o in r.outcomes)) for r in runs]),
        ("worker slot-seconds", [f"{r.slot_seconds:.0f}" for r in runs]),
        ("triggerer CPU s per 1,000 sensors", [f"{r.triggerer_cpu * k:.1f}" for r, k in per_k]),
        (
            "triggerer RSS MB per 1,000 waiting",
            [f"{(r.triggerer_rss_waiting - r.triggerer_rss_idle) / 2**20 * k:.0f}" for r, k in per_k],
        ),
        ("triggerer RSS MB while waiting", [f"{r.triggerer_rss_waiting / 2**20:.0f}" for r in runs]),
        *(
            (
                f"{name} RSS MB per 1,000 waiting (main process)",
                [f"{(r.rss_waiting.get(name, 0) - r.rss_idle.get(name, 0)) / 2**20 * k:.1f}" for r, k in per_k],
            )
            for name in sorted({n for r in runs for n in r.rss_waiting})
        ),
        ("scheduler + executor CPU s", [f"{r.airflow_cpu:.0f}" for r in runs]),
        ("scheduler loop p50 / p95 ms", [f"{p(r.loop_ms, 0.5):.0f} / {p(r.loop_ms, 0.95):.0f}" for r in runs]),
        ("pick-up rate, sensors/s", [f"{r.pickup_rate:.0f}" for r in runs]),
    ]
    for case in CASES:
        rows.append(
            (
                f"{case}: end p50 / p95 s",
                [f"{p(r.case(case).to_end, 0.5):.1f} / {p(r.case(case).to_end, 0.95):.1f}" for r in runs],
            )
        )
    width = max(len(name) for name, _ in rows) + 2
    cols = [max(len(r.strategy), 14) + 2 for r in runs]
    lines = [
        f"Airflow {version}, LocalExecutor (8 slots), one triggerer; per strategy, the three cases in turn",
        f"{'':<{width}}" + "".join(f"{r.strategy:>{c}}" for r, c in zip(runs, cols, strict=True)),
    ]
    for name, cells in rows:
        lines.append(f"{name:<{width}}" + "".join(f"{cell:>{c}}" for cell, c in zip(cells, cols, strict=True)))
    return "\n".join(lines)
