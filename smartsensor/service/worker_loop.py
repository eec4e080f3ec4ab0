"""A worker process's loop over a ``runner.Runner``: timer rounds (APScheduler), lease heartbeats, wake-up rounds
for landing signals and new tasks, and a clean stop on SIGTERM/SIGINT or a dead Spark JVM.

N worker processes are started and restarted by ``service.supervisor``.
"""

from __future__ import annotations

import logging
import signal
import threading
from datetime import datetime
from typing import Any, Callable

from apscheduler.schedulers import SchedulerNotRunningError
from apscheduler.schedulers.blocking import BlockingScheduler

from smartsensor.adapters.spark import jvm_exit_code as spark_jvm_exit_code
from smartsensor.config import Config
from smartsensor.sensors.errors import first_line
from smartsensor.service.round.report import RoundResult
from smartsensor.service.runner import LeasedWorker, RoundMetrics, Runner
from smartsensor.service.signals import listen_for_signals

log = logging.getLogger(__name__)

EXIT_SPARK_DIED = 3  # exit status of a worker whose Spark driver JVM died; `workers` restarts it


class WakeUps:
    """The wake-up thread of a worker: landing signals and newly pending tasks, gathered while a wake-up round
    runs, each start one more at once. It never waits for a timer round; its writes are fenced like theirs."""

    def __init__(self, runner: Runner, emit: Callable[[RoundResult], None]) -> None:
        self.runner = runner
        self.emit = emit
        self._lock = threading.Lock()
        self._tables: set[tuple[str, str]] = set()
        self._shards: set[int] | None = set()
        self._ready = threading.Event()

    def landed(self, tables: set[tuple[str, str]]) -> None:
        """Landing signals named these tables."""
        with self._lock:
            self._tables |= tables
        self._ready.set()

    def pending(self, shardcodes: set[int] | None) -> None:
        """Tasks became pending in these shardcodes (None: anywhere)."""
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


class WorkerLoop:
    """Rounds every ``interval`` seconds until a stop is requested (or one round with ``once``).

    ``start`` runs the loop and returns its exit status; ``tick`` is one timer round; ``beat`` one lease heartbeat;
    ``stop`` ends the loop after the round under way. Leases are renewed every ``heartbeat_interval`` by their own
    job (with ``once``, by a thread during the round). APScheduler's max_instances=1 means an overrunning round
    makes the next one wait, never overlap. A landing signal, or new pending tasks (PostgreSQL), run a wake-up
    round at once in their own thread (``WakeUps``): neither waits for a timer round.

    The exit status is 0 after a requested stop, or EXIT_SPARK_DIED when the Spark driver JVM died: the worker
    then stops cleanly (leases released at once) so that its supervisor restarts it with a new JVM, instead of
    running rounds that can never check anything.
    """

    def __init__(
        self,
        runner: Runner,
        engine: Any,
        cfg: Config,
        interval: float,
        once: bool,
        emit: Callable[[RoundResult], None],
        metrics: RoundMetrics | None = None,
        signals: bool = True,
        stop_event: threading.Event | None = None,
        jvm_exit_code: Callable[[], int | None] = spark_jvm_exit_code,
    ) -> None:
        self.runner, self.engine, self.cfg, self.interval, self.once = runner, engine, cfg, interval, once
        self.emit, self.metrics, self.signals, self.jvm_exit_code = emit, metrics, signals, jvm_exit_code
        self.status = 0
        # A signal handler only raises this flag; a thread does the stopping. The handler runs in the main thread
        # between two bytecodes, possibly inside APScheduler's submit() while it holds the executor's lock, which
        # shutdown() takes again: stopping from the handler itself deadlocked a worker killed mid-submit.
        self.stop_requested = stop_event or threading.Event()
        self.stopping = threading.Event()  # set once the loop is ending: the helper threads end with it
        self.scheduler = BlockingScheduler()

    def beat(self) -> None:
        """One lease heartbeat; a failure (a DB outage) is logged: leases lapse, writes are fenced, we retry."""
        try:
            self.runner.heartbeat()
        except Exception as exc:  # noqa: BLE001 - DB outage: leases lapse, writes are fenced, we retry
            log.warning("heartbeat failed: %s", first_line(exc))

    def tick(self) -> None:
        """One timer round: report it; stop the worker if it shows that the Spark JVM died."""
        if self.stopping.is_set():  # a stop that came between the last check and the scheduler's start
            self._shutdown()
            return
        results = self.runner.rounds()
        for result in results:
            if self.metrics is not None:
                self.metrics.observe(result)
            self.emit(result)
        # Checked only after a round with errors: that is how a dead JVM shows, and it costs nothing otherwise.
        if any(r.transient_errors or r.error for r in results) and self._spark_died() and not self.once:
            self.stop()  # with --once the round is over anyway; the status alone reports it

    def stop(self) -> None:
        """End the loop after the round under way (idempotent)."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        self._shutdown()

    def start(self) -> int:
        """Run until stopped; returns the exit status."""
        if self.once:
            return self._once()
        # An overrunning round makes the next tick skip (max_instances=1): expected, not worth a warning each time.
        logging.getLogger("apscheduler.scheduler").setLevel(logging.ERROR)
        logging.getLogger("apscheduler.executors").setLevel(logging.ERROR)
        threading.Thread(target=self._watch_stop_requests, name="stop-watch", daemon=True).start()
        # Handlers before the first lease claim: a SIGTERM right after it must still release the leases.
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal_to_stop)
            signal.signal(signal.SIGINT, self._on_signal_to_stop)
        self.beat()
        self.scheduler.add_job(
            self.tick,
            "interval",
            id="round",
            seconds=self.interval,
            max_instances=1,
            coalesce=True,
            misfire_grace_time=max(1, int(self.interval)),
            next_run_time=_now(),
        )
        if isinstance(self.runner, LeasedWorker):
            hb = self.cfg.get("smart_sensor", "heartbeat_interval")
            self.scheduler.add_job(
                self.beat,
                "interval",
                id="heartbeat",
                seconds=hb,
                max_instances=1,
                coalesce=True,
                misfire_grace_time=max(1, int(hb)),
            )
        if self.signals:
            self._start_wake_ups()
        if not self.stopping.is_set():
            self.scheduler.start()
        self.stopping.set()
        self.runner.stop()
        return self.status

    def _once(self) -> int:
        """One round, renewing the leases during it too: a round longer than lease_timeout keeps them."""
        self.beat()
        round_over = threading.Event()
        interval = self.cfg.get("smart_sensor", "heartbeat_interval")
        beating = threading.Thread(
            target=_beat_until, args=(self.beat, interval, round_over), name="heartbeat", daemon=True
        )
        beating.start()
        try:
            self.tick()
        finally:
            round_over.set()
            beating.join()
            self.runner.stop(keep_rounds=True)
        return self.status

    def _start_wake_ups(self) -> None:
        wake_ups = WakeUps(self.runner, self.emit)
        threading.Thread(target=wake_ups.run, args=(self.stopping,), name="wake-ups", daemon=True).start()
        threading.Thread(
            target=listen_for_signals,
            args=(
                self.engine,
                self.cfg.get("smart_sensor", "signal_poll_interval"),
                wake_ups.landed,
                self.stopping,
                wake_ups.pending,
            ),
            name="signals",
            daemon=True,
        ).start()

    def _spark_died(self) -> bool:
        code = self.jvm_exit_code()
        if code is None:
            return False
        log.error(
            "the Spark driver JVM exited with code %s: stopping this worker (leases released) so that it "
            "is restarted with a new one",
            code,
        )
        self.status = EXIT_SPARK_DIED
        return True

    def _shutdown(self) -> None:
        try:
            self.scheduler.shutdown(wait=False)
        except SchedulerNotRunningError:  # not started yet: the start is skipped, or its first tick stops it
            pass

    def _on_signal_to_stop(self, signum: int, _frame: object) -> None:
        self.stop_requested.set()

    def _watch_stop_requests(self) -> None:
        self.stop_requested.wait()
        log.info("stop requested: stopping after the current round")
        self.stop()


def _beat_until(beat: Callable[[], None], interval: float, done: threading.Event) -> None:
    """Call ``beat`` every ``interval`` seconds until ``done`` (`worker --once`'s heartbeat during its round)."""
    while not done.wait(interval):
        beat()


def _now() -> datetime:
    """Aware local time, as APScheduler wants for next_run_time."""
    return datetime.now().astimezone()
