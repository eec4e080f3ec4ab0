"""Running one shard worker: its rounds on a timer (APScheduler), lease heartbeats, landing signals, a clean stop.

N worker processes are started and restarted by ``service.supervisor``."""

from __future__ import annotations

import logging
import signal
import threading
from datetime import datetime, timedelta
from typing import Any, Callable

from apscheduler.schedulers import SchedulerNotRunningError
from apscheduler.schedulers.blocking import BlockingScheduler

from smartsensor.adapters.spark import jvm_exit_code as spark_jvm_exit_code
from smartsensor.adapters.sql import signals as signal_sql
from smartsensor.adapters.sql.lease_store import SqlLeaseStore
from smartsensor.adapters.sql.round_store import SqlRoundStore
from smartsensor.config import Config
from smartsensor.ports import CheckAnswerer
from smartsensor.sensors.errors import first_line
from smartsensor.service.leases import LeaseManager
from smartsensor.service.round.poke import catalog_answerer
from smartsensor.service.round.worker import ShardWorker, run_round
from smartsensor.service.round.report import RoundResult
from smartsensor.service.signals import listen_for_signals

log = logging.getLogger(__name__)

SIGNAL_RETENTION = timedelta(hours=1)
EXIT_SPARK_DIED = 3  # exit status of a worker whose Spark driver JVM died; `workers` restarts it


class RoundMetrics:
    """Prometheus gauges/counters of the rounds, served on --metrics-port."""

    def __init__(self, port: int) -> None:
        from prometheus_client import Counter, Gauge, start_http_server
        labels = ["shard_min", "shard_max"]
        self.gauges = {name: Gauge(f"smartsensor_round_{name}", f"{name} in the last round", labels)
                       for name in ("loaded", "distinct_hashes", "groups_poked", "catalog_calls", "schema_calls",
                                    "db_statements", "seconds", "transient_errors")}
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


class LeasedWorker:
    """A worker without a fixed range: holds whatever shard leases it claims, one ShardWorker per lease."""

    def __init__(self, engine: Any, cfg: Config, spark_provider: Callable[[], Any] | None = None,
                 worker_id: str | None = None) -> None:
        self.engine = engine
        self.cfg = cfg
        self.leases = LeaseManager(SqlLeaseStore(engine), cfg, worker_id)
        self.store = SqlRoundStore(engine)
        self.answerer = catalog_answerer(cfg, spark_provider)
        self.wake_answerer = catalog_answerer(cfg, spark_provider)  # its own metastore client: clients are not shared
        self.workers: dict[int, ShardWorker] = {}
        self._lock = threading.Lock()
        self._last_prune = datetime.min

    @property
    def worker_id(self) -> str:
        return self.leases.worker_id

    def heartbeat(self) -> dict[str, list[int]]:
        """Renew/claim/release leases, then keep one ShardWorker (with the lease's fence) per owned range."""
        changes = self.leases.heartbeat()
        self._prune_signals()
        with self._lock:
            for lo in list(self.workers):
                if lo not in self.leases.owned:
                    del self.workers[lo]
            for lo, lease in self.leases.owned.items():
                w = self.workers.get(lo)
                if w is None:
                    w = ShardWorker(self.store, self.cfg, lease.shard_min, lease.shard_max,
                                    worker_id=f"{self.worker_id}:{lease.shard_min}-{lease.shard_max}")
                    self.workers[lo] = w
                w.fence = lease.fence
        return changes

    def _prune_signals(self) -> None:
        """Signals are hints for the next second; drop those older than SIGNAL_RETENTION."""
        now = datetime.utcnow()
        if now - self._last_prune < SIGNAL_RETENTION / 60:
            return
        self._last_prune = now
        with self.engine.begin() as conn:
            signal_sql.prune_signals(conn, now - SIGNAL_RETENTION)

    def rounds(self) -> list[RoundResult]:
        """One round over every owned range: one catalog call per table for all of them."""
        with self._lock:
            workers = [self.workers[lo] for lo in sorted(self.workers)]
        return [run_round(workers, self.answerer)] if workers else []

    def wake_rounds(self, tables: set[tuple[str, str]], shardcodes: set[int] | None) -> list[RoundResult]:
        """A wake-up round at once, beside any timer round under way: the checks on ``tables`` (landing
        signals) in every owned range, and the new tasks of the ranges holding ``shardcodes`` (None: all)."""
        with self._lock:
            workers = [self.workers[lo] for lo in sorted(self.workers)]
        return _wake_rounds(workers, self.wake_answerer, tables, shardcodes)

    def stop(self, keep_rounds: bool = False) -> None:
        """Clean stop: release every lease at once so others take over without waiting for expiry.

        ``keep_rounds``: leave the status rows of the last round (``worker --once``), so that
        `smartsensor status` shows what the round did.
        """
        with self._lock:
            workers = list(self.workers.values())
            self.workers.clear()
        self.leases.release_all()
        for w in workers if not keep_rounds else ():
            try:
                w.forget()
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass


class PinnedWorker:
    """A worker over a fixed range (``--shard-min/--shard-max``): no lease, no fence."""

    def __init__(self, worker: ShardWorker, answerer: Callable[[], CheckAnswerer],
                 wake_answerer: Callable[[], CheckAnswerer] | None = None) -> None:
        self.worker = worker
        self.answerer = answerer
        self.wake_answerer = wake_answerer or answerer

    def heartbeat(self) -> dict[str, list[int]]:
        return {}

    def rounds(self) -> list[RoundResult]:
        return [run_round([self.worker], self.answerer)]

    def wake_rounds(self, tables: set[tuple[str, str]], shardcodes: set[int] | None) -> list[RoundResult]:
        return _wake_rounds([self.worker], self.wake_answerer, tables, shardcodes)

    def stop(self, keep_rounds: bool = False) -> None:
        if keep_rounds:
            return
        try:
            self.worker.forget()
        except Exception:  # noqa: BLE001 - best effort on the way out
            pass


def _wake_rounds(workers: list[ShardWorker], answerer: Callable[[], CheckAnswerer], tables: set[tuple[str, str]],
                 shardcodes: set[int] | None) -> list[RoundResult]:
    if tables:  # every range: the checks on these tables, and whatever arrived
        return [run_round(workers, answerer, focus=tables)] if workers else []
    concerned = [w for w in workers if shardcodes is None or any(w.shard_min <= c < w.shard_max for c in shardcodes)]
    return [run_round(concerned, answerer, focus=set())] if concerned else []


class WakeUps:
    """The wake-up thread of a worker: landing signals and newly pending tasks, gathered while a wake-up round
    runs, each start one more at once. It never waits for a timer round; its writes are fenced like theirs."""

    def __init__(self, runner: "LeasedWorker | PinnedWorker", emit: Callable[[RoundResult], None]) -> None:
        self.runner = runner
        self.emit = emit
        self._lock = threading.Lock()
        self._tables: set[tuple[str, str]] = set()
        self._shards: set[int] | None = set()
        self._ready = threading.Event()

    def landed(self, tables: set[tuple[str, str]]) -> None:
        with self._lock:
            self._tables |= tables
        self._ready.set()

    def pending(self, shardcodes: set[int] | None) -> None:
        with self._lock:
            self._shards = None if shardcodes is None or self._shards is None else self._shards | shardcodes
        self._ready.set()

    def run(self, stopping: threading.Event) -> None:
        """Until ``stopping``: wait for a wake-up, run its round. A failure is logged; the timer rounds go on."""
        while not stopping.is_set():
            if not self._ready.wait(0.5):
                continue
            with self._lock:
                self._ready.clear()
                tables, shards, self._tables, self._shards = self._tables, self._shards, set(), set()
            if not tables and shards == set():
                continue
            try:
                for result in self.runner.wake_rounds(tables, shards):
                    self.emit(result)
            except Exception as exc:  # noqa: BLE001 - the timer rounds still run; a DB outage is reported there
                log.warning("wake-up round failed: %s", first_line(exc))


def run_worker(runner: "LeasedWorker | PinnedWorker", engine: Any, cfg: Config, interval: float, once: bool,
               emit: Callable[[RoundResult], None], metrics: RoundMetrics | None = None,
               signals: bool = True, stop_event: threading.Event | None = None,
               jvm_exit_code: Callable[[], int | None] = spark_jvm_exit_code) -> int:
    """Run rounds every ``interval`` seconds until SIGTERM/SIGINT (or one round with ``once``).

    Leases are renewed every ``heartbeat_interval`` by their own job (with ``once``, by a thread during the
    round). APScheduler's max_instances=1 means an overrunning round makes the next one wait, never overlap.
    A landing signal runs a wake-up round at once for the checks on that table, and newly pending tasks (on
    PostgreSQL) one for their checks, in their own thread (``WakeUps``): neither waits for a timer round.

    Returns 0 after a requested stop, or EXIT_SPARK_DIED when the Spark driver JVM died: the worker
    then stops cleanly (leases released at once) so that its supervisor restarts it with a new JVM,
    instead of running rounds that can never check anything.
    """
    status = 0

    def spark_died() -> bool:
        nonlocal status
        code = jvm_exit_code()
        if code is None:
            return False
        log.error("the Spark driver JVM exited with code %s: stopping this worker (leases released) so that it "
                  "is restarted with a new one", code)
        status = EXIT_SPARK_DIED
        return True

    def beat() -> None:
        try:
            runner.heartbeat()
        except Exception as exc:  # noqa: BLE001 - DB outage: leases lapse, writes are fenced, we retry
            log.warning("heartbeat failed: %s", first_line(exc))

    def tick() -> None:
        results = runner.rounds()
        for result in results:
            if metrics is not None:
                metrics.observe(result)
            emit(result)
        # Checked only after a round with errors: that is how a dead JVM shows, and it costs nothing otherwise.
        if any(r.transient_errors or r.error for r in results) and spark_died() and not once:
            stop(0, None)  # with --once the round is over anyway; the status alone reports it

    if once:
        beat()
        round_over = threading.Event()  # renew during the round too: a round longer than lease_timeout keeps them
        beating = threading.Thread(target=_beat_until, args=(beat, cfg.get("smart_sensor", "heartbeat_interval"),
                                                             round_over), name="heartbeat", daemon=True)
        beating.start()
        try:
            tick()
        finally:
            round_over.set()
            beating.join()
            runner.stop(keep_rounds=True)
        return status
    # An overrunning round makes the next tick skip (max_instances=1): expected, not worth a warning each time.
    logging.getLogger("apscheduler.scheduler").setLevel(logging.ERROR)
    logging.getLogger("apscheduler.executors").setLevel(logging.ERROR)
    scheduler = BlockingScheduler()
    stopping = threading.Event()

    def stop(signum: int, _frame: object) -> None:
        if stopping.is_set():  # a second request: already stopping
            return
        stopping.set()
        try:
            scheduler.shutdown(wait=False)
        except SchedulerNotRunningError:  # not started yet: the start below is skipped, or its first tick stops it
            pass

    # A signal handler only raises a flag; a thread does the stopping. The handler runs in the main thread
    # between two bytecodes, possibly inside APScheduler's submit() while it holds the executor's lock, which
    # shutdown() takes again: stopping from the handler itself deadlocked a worker killed mid-submit.
    stop_requested = stop_event or threading.Event()

    def on_signal_to_stop(signum: int, _frame: object) -> None:
        stop_requested.set()

    def watch() -> None:
        stop_requested.wait()
        log.info("stop requested: stopping after the current round")
        stop(0, None)

    threading.Thread(target=watch, name="stop-watch", daemon=True).start()
    # Handlers before the first lease claim: a SIGTERM right after it must still release the leases.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal_to_stop)
        signal.signal(signal.SIGINT, on_signal_to_stop)
    beat()

    def tick_unless_stopping() -> None:
        if stopping.is_set():  # a stop that came between the check below and the scheduler's start
            try:
                scheduler.shutdown(wait=False)
            except SchedulerNotRunningError:
                pass
            return
        tick()

    scheduler.add_job(tick_unless_stopping, "interval", id="round", seconds=interval, max_instances=1, coalesce=True,
                      misfire_grace_time=max(1, int(interval)), next_run_time=_now())
    if isinstance(runner, LeasedWorker):
        hb = cfg.get("smart_sensor", "heartbeat_interval")
        scheduler.add_job(beat, "interval", id="heartbeat", seconds=hb, max_instances=1, coalesce=True,
                          misfire_grace_time=max(1, int(hb)))

    if signals:
        wake_ups = WakeUps(runner, emit)
        threading.Thread(target=wake_ups.run, args=(stopping,), name="wake-ups", daemon=True).start()
        threading.Thread(target=listen_for_signals, args=(engine, cfg.get("smart_sensor", "signal_poll_interval"),
                                                          wake_ups.landed, stopping, wake_ups.pending),
                         name="signals", daemon=True).start()
    if not stopping.is_set():
        scheduler.start()
    stopping.set()
    runner.stop()
    return status


def _beat_until(beat: Callable[[], None], interval: float, done: threading.Event) -> None:
    """Call ``beat`` every ``interval`` seconds until ``done`` (`worker --once`'s heartbeat during its round)."""
    while not done.wait(interval):
        beat()


def _now() -> datetime:
    """Aware local time, as APScheduler wants for next_run_time."""
    return datetime.now().astimezone()
