"""A worker process's loop over its ``served_ranges.ServedRanges``: timer rounds, the lease heartbeat, wake-up rounds
for landing signals and new tasks, and a clean stop on a stop request (SIGTERM/SIGINT) or a dead Spark JVM.

The rounds are the main thread's plain loop; the side jobs (the lease heartbeat, the pruning of landing signals) are
the process's ``adapters.periodic.PeriodicJobs``; the wake-ups and the signal listener are threads that wait for
notifications, not for a clock. Everything ends on the process's one ``adapters.lifecycle.StopRequest``.

N worker processes are started and restarted by ``service.supervisor``.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import nullcontext
from typing import Callable

from smartsensor.adapters.lifecycle import StopRequest
from smartsensor.adapters.periodic import PeriodicJobs
from smartsensor.adapters.spark import jvm_exit_code as spark_jvm_exit_code
from smartsensor.adapters.sql.channels import PENDING_CHANNEL, SIGNAL_CHANNEL
from smartsensor.config import Config
from smartsensor.domain import clock
from smartsensor.hive_filter.names import TableName
from smartsensor.ports import LandingSignals, Notifications
from smartsensor.sensors.errors import first_line
from smartsensor.service.landings import LandingPublisher
from smartsensor.service.round.report import RoundResult
from smartsensor.service.round_metrics import RoundMetrics
from smartsensor.service.served_ranges import ServedRanges
from smartsensor.service.signals import SIGNAL_RETENTION, pending_shards, prune_old_signals, signalled_tables

log = logging.getLogger(__name__)

EXIT_SPARK_DIED = 3  # exit status of a worker whose Spark driver JVM died; `workers` restarts it
PRUNE_INTERVAL = SIGNAL_RETENTION.total_seconds() / 60  # old landing signals are pruned once a minute
LISTENER_START_TIMEOUT = 30.0  # seconds a worker waits for its signal listener before its first rounds


class WakeUps:
    """The wake-up thread of a worker: landing signals and newly pending tasks, gathered while a wake-up round
    runs, each start one more at once. It never waits for a timer round; its writes are fenced like theirs."""

    def __init__(self, served: ServedRanges, emit: Callable[[RoundResult], None], stopping: StopRequest) -> None:
        self.served, self.stopping = served, stopping
        self.emit = emit
        self._lock = threading.Lock()
        self._tables: set[TableName] = set()
        self._shards: set[int] | None = set()
        self._ready = threading.Event()
        stopping.on_request(self._ready.set)

    def landed(self, tables: set[TableName]) -> None:
        """Landing signals named these tables."""
        with self._lock:
            self._tables |= tables
        self._ready.set()

    def pending(self, shardcodes: set[int] | None) -> None:
        """Tasks became pending in these shardcodes (None: anywhere)."""
        with self._lock:
            self._shards = None if shardcodes is None or self._shards is None else self._shards | shardcodes
        self._ready.set()

    def run(self) -> None:
        """Until the stop: wait for a wake-up (the stop is one), run its round. A failure is logged; the timer rounds
        go on."""
        while not self.stopping.is_set():
            self._ready.wait()
            if self.stopping.is_set():
                return
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
        """Another wake-up round at once when a round left vigils due at once (``RoundResult.due_again``)."""
        if any(r.due_again for r in results):
            self.pending(None)


class LandingTables:
    """The watched tables landing signals named since the landing publisher's last wake-up cycle (signals on other
    tables wake nothing)."""

    def __init__(self, landings: LandingPublisher, stopping: StopRequest) -> None:
        self.landings = landings
        self._lock = threading.Lock()
        self._tables: set[TableName] = set()
        self._ready = threading.Event()
        stopping.on_request(self._ready.set)

    def landed(self, tables: set[TableName]) -> None:
        watched = tables & self.landings.watched
        if watched:
            with self._lock:
                self._tables |= watched
            self._ready.set()

    def take(self) -> set[TableName]:
        """The tables named since the last take, waiting for one (none: the stop woke it)."""
        self._ready.wait()
        with self._lock:
            self._ready.clear()
            tables, self._tables = self._tables, set()
        return tables


class WorkerLoop:
    """Rounds every ``interval`` seconds until a stop is requested (or one round with ``once``).

    ``start`` runs the loop and returns its exit status; ``tick`` is one timer round; ``keep_leases`` one lease
    heartbeat; ``prune_signals`` drops old landing signals; ``stop`` ends the loop after the round under way, as a
    stop request (SIGTERM/SIGINT, or ``stop_request.request()`` from any thread) does. The
    loop is a plain wait between rounds, no scheduler: a round that overruns its interval is followed by the next
    at once, never overlapped, and a stop ends the wait at once. The side jobs run on the process's
    ``PeriodicJobs`` (``side_jobs``): leases kept every ``heartbeat_interval``, during a round too (a round longer
    than lease_timeout keeps them), landing signals pruned once a minute. A landing signal, or
    new pending tasks (PostgreSQL), run a wake-up round at once in their own thread (``WakeUps``;
    ``notifications`` None: none): neither waits for a timer round. ``once`` is one pass of the same loop, without the
    wake-ups and the signal handlers. Its parts (the served ranges, the stores, the hub, the publisher) are built
    by the worker's composition root, ``roots.worker``.

    The exit status is 0 after a requested stop, or EXIT_SPARK_DIED when the Spark driver JVM died: the worker
    then stops cleanly (leases released at once) so that its supervisor restarts it with a new JVM, instead of
    running rounds that can never check anything.
    """

    def __init__(
        self,
        served: ServedRanges,
        cfg: Config,
        interval: float,
        once: bool,
        emit: Callable[[RoundResult], None],
        *,
        signals: LandingSignals,
        metrics: RoundMetrics | None = None,
        notifications: Notifications | None = None,
        stop_request: StopRequest | None = None,
        jvm_exit_code: Callable[[], int | None] = spark_jvm_exit_code,
        landings: LandingPublisher | None = None,
    ) -> None:
        self.served, self.cfg, self.interval, self.once = served, cfg, interval, once
        self.emit, self.metrics, self.jvm_exit_code = emit, metrics, jvm_exit_code
        self.signals, self.notifications, self.landings = signals, notifications, landings
        self._landings_lock = threading.Lock()
        self.status = 0
        # The process's one stop: the loop ends after the round under way; the helper threads end with it.
        self.stopping = stop_request or StopRequest()
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
            prune_old_signals(self.signals, clock.now())
        except Exception as exc:  # noqa: BLE001 - a DB outage: pruned at the next run
            log.warning("pruning landing signals failed: %s", first_line(exc))

    def side_jobs(self, jobs: PeriodicJobs) -> None:
        """Add this worker's side jobs to ``jobs``: the lease heartbeat every ``heartbeat_interval`` (the first one
        is ``start``'s own), the pruning of landing signals once a minute (the first at once) and, unless ``once``,
        with a landing publisher, its cycle every ``[landings] interval``
        (``change_record_interval`` when it follows the metastore's change record; the first at once; a landing
        signal on a watched table runs one at once too, ``_publish_on_signals``)."""
        jobs.every("leases", self.cfg.settings.smart_sensor.heartbeat_interval, self.keep_leases)
        jobs.every("prune-signals", PRUNE_INTERVAL, self.prune_signals, at_once=True)
        if self.landings is not None and not self.once:
            jobs.every("landings", self.landings.interval, self.publish_landings, at_once=True)

    def publish_landings(self, only: set[TableName] | None = None) -> None:
        """One cycle of the landing publisher over the ranges held now (``only``: listing these tables alone), one at
        a time (the side job and the landing signals' wake-ups share the publisher). It logs its own failures."""
        if self.landings is not None:
            with self._landings_lock:
                self.landings.cycle(self.served.held_ranges(), only)

    def _publish_on_signals(self, tables: LandingTables) -> None:
        """The landing publisher's wake-up thread: a cycle at once over the watched tables that landing signals
        named, until the loop stops."""
        while not self.stopping.is_set():
            named = tables.take()
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

    def stop(self, reason: str = "the worker is stopping") -> None:
        """End the loop after the round under way (idempotent)."""
        self.stopping.request(reason)

    def start(self) -> int:
        """Run until stopped (one round with ``once``); returns the exit status."""
        jobs = PeriodicJobs("worker")  # the process's one scheduler of side jobs; stopped below, before the leases go
        self.side_jobs(jobs)
        # Handlers before the first lease claim: a SIGTERM right after it must still release the leases.
        with self.stopping.signals() if not self.once else nullcontext(self.stopping):
            return self._run(jobs)

    def _run(self, jobs: PeriodicJobs) -> int:
        try:
            self.keep_leases()  # a stop requested during the first claim: no round (the loop looks first)
            if self.notifications is not None and not self.once:
                self._start_wake_ups()  # listening before the first landings cycle lists: no landing in between
            jobs.start()
            while not self.stopping.is_set():
                started = time.monotonic()
                self._round()
                if self.once:
                    break
                self.stopping.wait(max(0.0, self.interval - (time.monotonic() - started)))
        finally:
            self.stopping.request("the worker loop ended")
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
        is heard), or failed its first attempt, or LISTENER_START_TIMEOUT passed. They end with the stop."""
        wake_ups = self._wake_ups = WakeUps(self.served, self.emit, self.stopping)
        threading.Thread(target=wake_ups.run, name="wake-ups", daemon=True).start()
        on_signal = wake_ups.landed
        if self.landings is not None:
            published = LandingTables(self.landings, self.stopping)
            threading.Thread(
                target=self._publish_on_signals, args=(published,), name="landings-wake-ups", daemon=True
            ).start()

            def on_signal(tables: set[TableName]) -> None:
                wake_ups.landed(tables)
                published.landed(tables)

        hub = self.notifications
        assert hub is not None

        def landed(names: list[str]) -> None:
            tables = signalled_tables(names)
            if tables:
                on_signal(tables)

        hub.subscribe(SIGNAL_CHANNEL, landed)
        hub.subscribe(PENDING_CHANNEL, lambda payloads: wake_ups.pending(pending_shards(payloads)))
        hub.start(LISTENER_START_TIMEOUT)

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
