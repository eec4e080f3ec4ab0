"""Running shard workers: the round loop (APScheduler) of one worker, and a supervisor for N of them."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable, TextIO

from apscheduler.schedulers.blocking import BlockingScheduler

from smartsensor.config import Config, ShardRange
from smartsensor.worker import RoundResult, ShardWorker

log = logging.getLogger(__name__)


class RoundMetrics:
    """Prometheus gauges/counters of the rounds, served on --metrics-port."""

    def __init__(self, port: int) -> None:
        from prometheus_client import Counter, Gauge, start_http_server
        labels = ["shard_min", "shard_max"]
        self.gauges = {name: Gauge(f"smartsensor_round_{name}", f"{name} in the last round", labels)
                       for name in ("loaded", "distinct_hashes", "groups_poked", "catalog_calls", "db_statements",
                                    "seconds", "transient_errors")}
        self.marked = Counter("smartsensor_marked_total", "task instances marked, by new state", labels + ["state"])
        self.rounds = Counter("smartsensor_rounds_total", "rounds run", labels + ["outcome"])
        start_http_server(port, addr="127.0.0.1")

    def observe(self, r: RoundResult) -> None:
        lv = (str(r.shard_min), str(r.shard_max))
        for name, gauge in self.gauges.items():
            gauge.labels(*lv).set(getattr(r, name))
        for state, n in r.marked.items():
            self.marked.labels(*lv, state).inc(n)
        self.rounds.labels(*lv, "error" if r.error else "ok").inc()


def run_one_round(worker: ShardWorker) -> RoundResult:
    """One round; a DB outage is reported in the result instead of raised (the next round retries)."""
    try:
        return worker.run_round()
    except Exception as exc:  # noqa: BLE001 - the worker must keep going through outages
        log.warning("round failed (will retry next round): %s", str(exc).splitlines()[0] if str(exc) else exc)
        result = RoundResult(worker.shard_min, worker.shard_max)
        result.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return result


def run_worker(worker: ShardWorker, interval: float, once: bool, emit: Callable[[RoundResult], None],
               metrics: RoundMetrics | None = None) -> None:
    """Run rounds every ``interval`` seconds until SIGTERM/SIGINT (or one round with ``once``).

    APScheduler's max_instances=1 means an overrunning round makes the next one wait, never overlap.
    """
    def tick() -> None:
        result = run_one_round(worker)
        if metrics is not None:
            metrics.observe(result)
        emit(result)

    if once:
        tick()
        return
    # An overrunning round makes the next tick skip (max_instances=1): expected, not worth a warning each time.
    logging.getLogger("apscheduler.scheduler").setLevel(logging.ERROR)
    logging.getLogger("apscheduler.executors").setLevel(logging.ERROR)
    scheduler = BlockingScheduler()
    scheduler.add_job(tick, "interval", seconds=interval, max_instances=1, coalesce=True,
                      misfire_grace_time=max(1, int(interval)), next_run_time=_now())

    def stop(signum: int, _frame: object) -> None:
        log.info("signal %s: stopping after the current round", signum)
        scheduler.shutdown(wait=False)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    scheduler.start()
    try:
        worker.forget()
    except Exception:  # noqa: BLE001 - best effort on the way out
        pass


def _now():  # type: ignore[no-untyped-def]
    from datetime import datetime
    return datetime.now().astimezone()


def assign_ranges(ranges: list[ShardRange], n: int) -> list[ShardRange]:
    """Give ``n`` workers contiguous blocks of the configured ranges (n <= len(ranges))."""
    n = max(1, min(n, len(ranges)))
    out = []
    for i in range(n):
        lo_idx = i * len(ranges) // n
        hi_idx = (i + 1) * len(ranges) // n
        out.append(ShardRange(ranges[lo_idx].lo, ranges[hi_idx - 1].hi))
    return out


@dataclass
class _Child:
    shard: ShardRange
    proc: subprocess.Popen
    started: float
    restarts: int = 0


def supervise_workers(cfg: Config, n: int | None, base_args: list[str], out: TextIO = sys.stdout,
                      extra_args: list[str] | None = None, max_backoff: float = 30.0) -> int:
    """Start N `smartsensor worker` processes, restart crashed ones, stop all on SIGINT/SIGTERM."""
    ranges = assign_ranges(cfg.shard_ranges, n or len(cfg.shard_ranges))
    stopping = False

    def spawn(shard: ShardRange) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "smartsensor.cli", *base_args, "worker", "--shard-min", str(shard.lo),
               "--shard-max", str(shard.hi), *(extra_args or [])]
        return subprocess.Popen(cmd)

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    children = [_Child(r, spawn(r), time.monotonic()) for r in ranges]
    print(f"started {len(children)} workers: " + ", ".join(f"[{c.shard.lo},{c.shard.hi}) pid {c.proc.pid}"
                                                         for c in children), file=out, flush=True)
    while not stopping:
        time.sleep(0.5)
        for c in children:
            code = c.proc.poll()
            if code is None or stopping:
                continue
            backoff = min(max_backoff, 2 ** min(c.restarts, 5))
            if time.monotonic() - c.started < backoff:
                continue
            c.restarts += 1
            print(f"worker [{c.shard.lo},{c.shard.hi}) exited with {code}; restart #{c.restarts}", file=out, flush=True)
            c.proc = spawn(c.shard)
            c.started = time.monotonic()
    for c in children:
        if c.proc.poll() is None:
            c.proc.terminate()
    deadline = time.monotonic() + 30
    for c in children:
        try:
            c.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            c.proc.kill()
    print("all workers stopped", file=out, flush=True)
    return 0
