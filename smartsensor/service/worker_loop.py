"""A worker process's loop over its ``served_ranges.ServedRanges``: timer rounds, the lease heartbeat, wake-up rounds
for landing signals and new tasks, and a clean stop on a stop request (SIGTERM/SIGINT) or a dead Spark JVM.

The rounds are the main thread's plain loop; the side jobs (the lease heartbeat, the pruning of landing signals, the
stop-watch) are the process's ``adapters.periodic.PeriodicJobs``; the wake-ups and the signal listener are threads
that wait for notifications, not for a clock.

N worker processes are started and restarted by ``service.supervisor``.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from typing import Any, Callable

from smartsensor.adapters.periodic import PeriodicJobs
from smartsensor.adapters.spark import jvm_exit_code as spark_jvm_exit_code
from smartsensor.config import Config
from smartsensor.domain import clock
from smartsensor.sensors.errors import first_line
from smartsensor.service.landings import LandingPublisher
from smartsensor.service.round.report import RoundResult
from smartsensor.service.round_metrics import RoundMetrics
from smartsensor.service.served_ranges import ServedRanges
from smartsensor.service.signals import SIGNAL_RETENTION, listen_for_signals, prune_old_signals

log = logging.getLogger(__name__)

EXIT_SPARK_DIED = 3  # exit status of a worker whose Spark driver JVM died; `workers` restarts it
STOP_WATCH_INTERVAL = 0.2  # seconds between two looks at the stop-request flag
PRUNE_INTERVAL = SIGNAL_RETENTION.total_seconds() / 60  # old landing signals are pruned once a minute
LISTENER_START_TIMEOUT = 30.0  # seconds a worker waits for its signal listener before its first rounds


class WakeUps:
    """The wake-up thread of a worker: landing signals and newly pending tasks, gathered while a wake-up round
    runs, each start one more at once. It never waits for a timer round; its writes are fenced like theirs."""

    def __init__(self, served: ServedRanges, emit: Callable[[RoundResult], None]) -> None:
        self.served = served
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
                results = self.served.wake_rounds(tables, shards)
                for result in results:
                    self.emit(result)
                self.again(results)
            except Exception as exc:  # noqa: BLE001 - the timer rounds still run; a DB outage is reported there
                log.warning("wake-up round failed: %s", first_line(exc))

    def again(self, results: list[RoundResult]) -> None:
        """Another wake-up round at once when a round left checks due at once (``RoundResult.due_again``)."""
        if any(r.due_again for r in results):
            self.pending(None)


class LandingTables:
    """The watched tables landing signals named since the landing publisher's last wake-up cycle (signals on other
    tables wake nothing)."""

    def __init__(self, landings: LandingPublisher) -> None:
        self.landings = landings
        self._lock = threading.Lock()
        self._tables: set[tuple[str, str]] = set()
        self._ready = threading.Event()

    def landed(self, tables: set[tuple[str, str]]) -> None:
        watched = tables & self.landings.watched
        if watched:
            with self._lock:
                self._tables |= watched
            self._ready.set()

    def take(self, timeout: float) -> set[tuple[str, str]]:
        """The tables named since the last take, waiting up to ``timeout`` seconds for one (possibly none)."""
        if not self._ready.wait(timeout):
            return set()
        with self._lock:
            self._ready.clear()
            tables, self._tables = self._tables, set()
        return tables


class WorkerLoop:
    """Rounds every ``interval`` seconds until a stop is requested (or one round with ``once``).

    ``start`` runs the loop and returns its exit status; ``tick`` is one timer round; ``keep_leases`` one lease
    heartbeat; ``prune_signals`` drops old landing signals; ``stop`` ends the loop after the round under way. The
    loop is a plain wait between rounds, no scheduler: a round that overruns its interval is followed by the next
    at once, never overlapped, and a stop ends the wait at once. The side jobs run on the process's
    ``PeriodicJobs`` (``side_jobs``): leases kept every ``heartbeat_interval``, during a round too (a round longer
    than lease_timeout keeps them), landing signals pruned once a minute, and the stop-watch. A landing signal, or
    new pending tasks (PostgreSQL), run a wake-up round at once in their own thread (``WakeUps``;
    ``wake_ups=False``: none): neither waits for a timer round. ``once`` is one pass of the same loop, without the
    wake-ups and the stop-watch.

    The exit status is 0 after a requested stop, or EXIT_SPARK_DIED when the Spark driver JVM died: the worker
    then stops cleanly (leases released at once) so that its supervisor restarts it with a new JVM, instead of
    running rounds that can never check anything.
    """

    def __init__(
        self,
        served: ServedRanges,
        engine: Any,
        cfg: Config,
        interval: float,
        once: bool,
        emit: Callable[[RoundResult], None],
        metrics: RoundMetrics | None = None,
        wake_ups: bool = True,
        stop_event: threading.Event | None = None,
        jvm_exit_code: Callable[[], int | None] = spark_jvm_exit_code,
        landings: LandingPublisher | None = None,
    ) -> None:
        self.served, self.engine, self.cfg, self.interval, self.once = served, engine, cfg, interval, once
        self.emit, self.metrics, self.wake_ups, self.jvm_exit_code = emit, metrics, wake_ups, jvm_exit_code
        self.landings = landings
        self._landings_lock = threading.Lock()
        self.status = 0
        # A stop request (SIGTERM/SIGINT) only raises this flag, which no lock of the main thread guards (a handler
        # runs in the main thread between two bytecodes: setting an Event the main thread waits on could deadlock on
        # that Event's own lock); the stop-watch job turns it into ``stop``.
        self.stop_requested = stop_event or threading.Event()
        self.stopping = threading.Event()  # the loop is ending: no next round; the helper threads end with it
        self._wake_ups: WakeUps | None = None

    def keep_leases(self) -> None:
        """One lease heartbeat. A failure (a DB outage) is logged: leases lapse, writes are fenced, the next
        heartbeat retries."""
        try:
            self.served.follow_leases()
        except Exception as exc:  # noqa: BLE001 - DB outage: leases lapse, writes are fenced, we retry
            log.warning("lease heartbeat failed: %s", first_line(exc))

    def prune_signals(self) -> None:
        """Drop the landing signals past their retention. A failure (a DB outage) is logged; the next run
        (a minute later) prunes them."""
        try:
            prune_old_signals(self.engine, clock.now())
        except Exception as exc:  # noqa: BLE001 - a DB outage: pruned at the next run
            log.warning("pruning landing signals failed: %s", first_line(exc))

    def side_jobs(self, jobs: PeriodicJobs) -> None:
        """Add this worker's side jobs to ``jobs``: the lease heartbeat every ``heartbeat_interval`` (the first one
        is ``start``'s own), the pruning of landing signals once a minute (the first at once) and, unless ``once``,
        the stop-watch and, with a landing publisher, its cycle every ``[landings] interval``
        (``change_record_interval`` when it follows the metastore's change record; the first at once; a landing
        signal on a watched table runs one at once too, ``_publish_on_signals``)."""
        jobs.every("leases", self.cfg.settings.smart_sensor.heartbeat_interval, self.keep_leases)
        jobs.every("prune-signals", PRUNE_INTERVAL, self.prune_signals, at_once=True)
        if not self.once:
            jobs.every("stop-watch", STOP_WATCH_INTERVAL, self._watch_stop_requests)
        if self.landings is not None and not self.once:
            jobs.every("landings", self.landings.interval, self.publish_landings, at_once=True)

    def publish_landings(self, only: set[tuple[str, str]] | None = None) -> None:
        """One cycle of the landing publisher over the ranges held now (``only``: listing these tables alone), one at
        a time (the side job and the landing signals' wake-ups share the publisher). It logs its own failures."""
        if self.landings is not None:
            with self._landings_lock:
                self.landings.cycle(self.served.held_ranges(), only)

    def _publish_on_signals(self, tables: LandingTables) -> None:
        """The landing publisher's wake-up thread: a cycle at once over the watched tables that landing signals
        named, until the loop stops."""
        while not self.stopping.is_set():
            named = tables.take(0.5)
            if not named or self.stopping.is_set():
                continue
            try:
                self.publish_landings(named)
            except Exception as exc:  # noqa: BLE001 - the side job's cycles still run
                log.warning("landings: a wake-up cycle failed: %s", first_line(exc))

    def tick(self) -> None:
        """One timer round: report it; stop the worker if it shows that the Spark JVM died."""
        results = self.served.timer_rounds()
        for result in results:
            if self.metrics is not None:
                self.metrics.observe(result)
            self.emit(result)
        if self._wake_ups is not None:
            self._wake_ups.again(results)
        # Checked only after a round with errors: that is how a dead JVM shows, and it costs nothing otherwise.
        if any(r.transient_errors or r.error for r in results) and self._spark_died() and not self.once:
            self.stop()  # with --once the round is over anyway; the status alone reports it

    def stop(self) -> None:
        """End the loop after the round under way (idempotent)."""
        self.stopping.set()

    def start(self) -> int:
        """Run until stopped (one round with ``once``); returns the exit status."""
        jobs = PeriodicJobs("worker")  # the process's one scheduler of side jobs; stopped below, before the leases go
        self.side_jobs(jobs)
        # Handlers before the first lease claim: a SIGTERM right after it must still release the leases.
        if not self.once and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_stop_request)
            signal.signal(signal.SIGINT, self._on_stop_request)
        try:
            self.keep_leases()
            if not self.once:
                self._watch_stop_requests()  # a stop requested during the first claim: no round
            if self.wake_ups and not self.once:
                self._start_wake_ups()  # listening before the first landings cycle lists: no landing in between
            jobs.start()
            while not self.stopping.is_set():
                started = time.monotonic()
                self._round()
                if self.once:
                    break
                self.stopping.wait(max(0.0, self.interval - (time.monotonic() - started)))
        finally:
            self.stopping.set()
            jobs.stop()  # waits for a heartbeat in flight: none may renew a lease after they are released
            self.served.stop(keep_rounds=self.once)
        return self.status

    def _round(self) -> None:
        """One timer round; in the loop a failure is logged and the next round comes (``once``: it is raised)."""
        if self.once:
            self.tick()
            return
        try:
            self.tick()
        except Exception:
            log.exception("round failed")

    def _start_wake_ups(self) -> None:
        """The wake-up threads and the signal listener; returns once the listener is open (a signal sent after this
        is heard), or failed its first attempt, or LISTENER_START_TIMEOUT passed."""
        listening = threading.Event()
        wake_ups = self._wake_ups = WakeUps(self.served, self.emit)
        threading.Thread(target=wake_ups.run, args=(self.stopping,), name="wake-ups", daemon=True).start()
        on_signal = wake_ups.landed
        if self.landings is not None:
            published = LandingTables(self.landings)
            threading.Thread(
                target=self._publish_on_signals, args=(published,), name="landings-wake-ups", daemon=True
            ).start()

            def on_signal(tables: set[tuple[str, str]]) -> None:
                wake_ups.landed(tables)
                published.landed(tables)

        threading.Thread(
            target=listen_for_signals,
            args=(
                self.engine,
                self.cfg.settings.smart_sensor.signal_poll_interval,
                on_signal,
                self.stopping,
                wake_ups.pending,
                listening,
            ),
            name="landing-signals",
            daemon=True,
        ).start()
        listening.wait(LISTENER_START_TIMEOUT)

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

    def _on_stop_request(self, signum: int, _frame: object) -> None:
        self.stop_requested.set()

    def _watch_stop_requests(self) -> None:
        """The stop-watch job: a stop request raised since the last look becomes ``stop``."""
        if self.stop_requested.is_set() and not self.stopping.is_set():
            log.info("stop requested: stopping after the current round")
            self.stop()
