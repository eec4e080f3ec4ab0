"""A process's periodic side jobs, on one APScheduler ``BackgroundScheduler``: the one place they are started and
stopped.

Each process that has side jobs makes one ``PeriodicJobs``: a worker (``service.worker_loop.WorkerLoop.start``:
the lease heartbeat, the pruning of landing signals), ``serve`` (the app's lifespan: the status
page's history sampler, the retention job, the ended watch's poll on SQLite) and a classic run
(``standalone.classic.run_task``: the run's heartbeat). Every job runs with ``max_instances=1`` (a run that overruns
its interval is never overlapped: the runs due meanwhile are skipped), coalescing (runs missed while the process
was paused or busy become one) and a misfire grace of one interval (a run later than that is skipped; the next
comes on schedule).

Each run has a daemon thread of its own, as the hand-written loops had: ``stop`` ends the schedule at once and
waits for the runs in flight up to a timeout; a run still going past it is abandoned, and never holds the
process's exit. A job that raises is logged (``apscheduler.executors.periodic``, ERROR, with the traceback) and
keeps its schedule; the jobs themselves log the failures they expect (a database outage) in one line.

The clock rule: APScheduler schedules by the wall clock, and a step of it (NTP, a VM restored) would move every
job by the step: an hour back, and no job runs for an hour. ``_SteadyScheduler`` keeps the jobs on the monotonic
clock instead: each time its loop looks for due jobs (its waits are monotonic already) it compares how far the
wall clock moved with how far the monotonic one did, and when they differ by more than ``STEP_TOLERANCE`` it moves
every job's next run by the step, so each job keeps its interval as measured by the monotonic clock, either way; an
aligned job goes to the next multiple of its interval on the wall clock as it now reads. Times that are stored and
compared between processes (lease expiry, heartbeats) stay wall time: ARCHITECTURE.md, "Periodic side jobs".
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from apscheduler.events import EVENT_JOB_MAX_INSTANCES, JobSubmissionEvent
from apscheduler.executors.base import BaseExecutor, run_job
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

log = logging.getLogger(__name__)

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
EXECUTOR = "periodic"  # the executor's alias: its runs log as apscheduler.executors.periodic
# Seconds by which the wall clock may move apart from the monotonic one before it counts as a step. NTP's slewing
# (at most 0.5 ms a second) never reaches it between two looks (the longest wait is one job's interval); a smaller
# step delays a job by no more than itself.
STEP_TOLERANCE = 0.5

# APScheduler logs every run at INFO; only its warnings (a run missed past its grace) and errors (a job that raised)
# are worth a line here. A logging configuration that sets its own level for it wins.
if logging.getLogger("apscheduler").level == logging.NOTSET:
    logging.getLogger("apscheduler").setLevel(logging.WARNING)


def _not_an_overrun(record: logging.LogRecord) -> bool:
    """APScheduler warns at every run skipped because the previous one still runs (``max_instances``); a job that
    overruns (a heartbeat through a database outage, which it logs itself) is a DEBUG line here, as the
    hand-written loops, which simply started late, had none."""
    return not str(record.msg).startswith("Execution of job")


logging.getLogger("apscheduler.scheduler").addFilter(_not_an_overrun)


@dataclass(frozen=True)
class _Spec:
    """A job added before ``start``."""

    name: str
    seconds: float
    job: Callable[[], object]
    at_once: bool
    aligned: bool


class _DaemonThreads(BaseExecutor):  # APScheduler 3.x has no type hints: its classes are Any here
    """An APScheduler executor that runs each run in a daemon thread of its own, and knows the ones in flight."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix
        self.in_flight: set[threading.Thread] = set()
        self._threads_lock = threading.Lock()

    def _do_submit_job(self, job: Any, run_times: list[datetime]) -> None:
        thread = threading.Thread(target=self._run, args=(job, run_times), name=f"{self.prefix}:{job.id}", daemon=True)
        with self._threads_lock:
            self.in_flight.add(thread)
        thread.start()

    def _run(self, job: Any, run_times: list[datetime]) -> None:
        try:
            events = run_job(job, job._jobstore_alias, run_times, self._logger.name)
        except BaseException as exc:  # noqa: BLE001 - run_job catches the job's own; this is APScheduler's
            self._run_job_error(job.id, exc, exc.__traceback__)
        else:
            self._run_job_success(job.id, events)
        finally:
            with self._threads_lock:
                self.in_flight.discard(threading.current_thread())

    def join(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds (None: no limit) for the runs in flight, except the calling thread's own;
        True when none is left."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._threads_lock:
                others = [t for t in self.in_flight if t is not threading.current_thread()]
            if not others:
                return True
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            others[0].join(left)


class _SteadyScheduler(BackgroundScheduler):
    """A ``BackgroundScheduler`` whose jobs keep their intervals on the monotonic clock when the wall clock steps.

    APScheduler reads the wall clock (``datetime.now``) once per pass of its loop (``_process_jobs``) and waits
    between passes on an ``Event``, which is monotonic: a pass comes when the next job is due by the wall clock as
    it was. ``follow_step``, before and after each pass, moves every job's next run by the step seen since the last
    look (the one after catches a step inside the pass; its ``modify_job`` wakes the loop at once); an aligned job
    goes to the next multiple of its interval on the wall clock as it now reads.
    """

    def __init__(self, name: str, **options: Any) -> None:
        super().__init__(**options)
        self.name = name
        self._offset = time.time() - time.monotonic()  # the wall clock's lead over the monotonic one

    def _process_jobs(self) -> float | None:
        self.follow_step()
        wait: float | None = super()._process_jobs()
        self.follow_step()
        return wait

    def follow_step(self) -> bool:
        """Move every job's next run by the wall clock's step since the last look, if it stepped; True if it did.
        Called from the scheduler's thread only."""
        offset = time.time() - time.monotonic()
        step, self._offset = offset - self._offset, offset
        if abs(step) <= STEP_TOLERANCE:
            return False
        log.warning("%s: the wall clock stepped %+.1f s; the periodic jobs keep their intervals", self.name, step)
        now = datetime.now(timezone.utc)
        for job in self.get_jobs():
            if job.next_run_time is None:
                continue
            if job.trigger.start_date == EPOCH:  # aligned: on the wall clock's multiples of its interval, as it is now
                moved = job.trigger.get_next_fire_time(None, now)
            else:  # at most one interval from now: a time already read on the stepped clock (a step inside the
                # pass, or inside an ``add_job`` in another thread) must not move by the step twice
                moved = min(job.next_run_time + timedelta(seconds=step), now + job.trigger.interval)
            self.modify_job(job.id, next_run_time=moved)
        return True


class PeriodicJobs:
    """The periodic side jobs of one process on one ``BackgroundScheduler``: add them with ``every``, then
    ``start``; ``stop`` (or leaving the ``with`` block) ends them all.

    ``stop_timeout`` is how long leaving the ``with`` block waits for the runs in flight (None: until they end).
    """

    def __init__(self, name: str, stop_timeout: float | None = None) -> None:
        self.name = name
        self.stop_timeout = stop_timeout
        self._executor = _DaemonThreads(name)
        self._scheduler = _SteadyScheduler(
            name,
            executors={EXECUTOR: self._executor},
            timezone=timezone.utc,
            daemon=True,
        )
        self._scheduler.add_listener(self._overran, EVENT_JOB_MAX_INSTANCES)
        self._lock = threading.Lock()
        self._stopped = False
        self._pending: dict[str, _Spec] = {}

    def every(
        self,
        name: str,
        seconds: float,
        job: Callable[[], object],
        *,
        at_once: bool = False,
        aligned: bool = False,
    ) -> None:
        """Run ``job`` every ``seconds`` seconds, first after one interval (``at_once``: at once). ``aligned``: at
        multiples of ``seconds`` since the Unix epoch (a sampler's time buckets). ``name`` names the job (unique in
        this process) and its thread."""
        if seconds <= 0:
            raise ValueError(f"periodic job {name}: interval must be positive, not {seconds}")
        with self._lock:
            if self._scheduler.running:
                self._add(_Spec(name, seconds, job, at_once, aligned))
            else:  # added at ``start``: a first run "at once" is then at once, not late
                self._pending[name] = _Spec(name, seconds, job, at_once, aligned)

    def _add(self, spec: _Spec) -> None:
        trigger = IntervalTrigger(
            seconds=spec.seconds, start_date=EPOCH if spec.aligned else None, timezone=timezone.utc
        )
        now = datetime.now(timezone.utc)
        self._scheduler.add_job(
            spec.job,
            trigger,
            id=spec.name,
            name=spec.name,
            executor=EXECUTOR,
            max_instances=1,
            coalesce=True,
            misfire_grace_time=max(1, math.ceil(spec.seconds)),  # whole seconds, as APScheduler 3 takes it
            next_run_time=now if spec.at_once else trigger.get_next_fire_time(None, now),
        )

    def _overran(self, event: JobSubmissionEvent) -> None:
        log.debug(
            "%s: periodic job %s still runs; the run due at %s is skipped",
            self.name,
            event.job_id,
            event.scheduled_run_times,
        )

    def remove(self, name: str) -> None:
        """Stop scheduling the job ``name`` (a run in flight ends as it ends); nothing if it is not there. A job
        may remove itself."""
        with self._lock:
            self._pending.pop(name, None)
        if self._scheduler.get_job(name) is not None:
            try:
                self._scheduler.remove_job(name)
            except LookupError:  # removed meanwhile (JobLookupError is a KeyError)
                pass

    def jobs(self) -> dict[str, float]:
        """The jobs scheduled: name → interval in seconds."""
        with self._lock:
            pending = {spec.name: spec.seconds for spec in self._pending.values()}
        return pending | {job.id: job.trigger.interval_length for job in self._scheduler.get_jobs()}

    def start(self) -> None:
        """Start running the jobs (a stopped ``PeriodicJobs`` does not start again)."""
        with self._lock:
            if self._stopped:
                raise RuntimeError(f"periodic jobs of {self.name} were stopped")
            self._scheduler.start()
            for spec in self._pending.values():
                self._add(spec)
            self._pending.clear()

    def stop(self, timeout: float | None = None) -> bool:
        """End every job: no run starts after this returns. Then wait up to ``timeout`` seconds (None: until they
        end) for the runs in flight; one still going is abandoned (a daemon thread). True when none is left.
        Idempotent; a job may call it (it does not wait for itself)."""
        with self._lock:
            if not self._stopped:
                self._stopped = True
                if self._scheduler.running:
                    self._scheduler.shutdown(wait=False)  # its thread is joined: nothing is submitted after this
        return self._executor.join(timeout)

    def running(self) -> bool:
        """Whether jobs are scheduled to run (started and not stopped)."""
        return bool(self._scheduler.running) and not self._stopped

    def in_flight(self) -> int:
        """How many runs are under way."""
        with self._executor._threads_lock:
            return len(self._executor.in_flight)

    def __enter__(self) -> PeriodicJobs:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(self.stop_timeout)
