"""The scheduler loop: re-queue retries after their retry_delay, run `scheduled` tasks in classic mode."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable

from smartsensor.adapters.lifecycle import StopRequest
from smartsensor.adapters.process import StderrTail, smartsensor_command
from smartsensor.config import Config
from smartsensor.domain import clock
from smartsensor.domain.keys import TaskKey
from smartsensor.domain.routing import smart_route_for
from smartsensor.domain.rows import RetryRow, TaskRow, ZombieRow
from smartsensor.domain.states import State
from smartsensor.domain.timing import BadExecSettings, parse_exec, retry_or
from smartsensor.ports import SchedulerStore, StoreUnavailable
from smartsensor.sensors.errors import first_line

log = logging.getLogger(__name__)


def requeue_retries(store: SchedulerStore, cfg: Config, now: datetime | None = None) -> dict[str, int]:
    """up_for_retry → smart_pending (or scheduled) once retry_delay has passed, incrementing try_number.

    A row whose exec_dict cannot be read (out of bounds, not JSON) fails alone with the reason in
    ``error``; the other retries go on.
    """
    now = now or clock.now()

    def plan(row: RetryRow) -> tuple[str, str | None] | None:
        try:
            delay = parse_exec(row.exec_dict).retry_delay
            due = row.end_date is None or row.end_date + timedelta(seconds=delay) <= now
        except (BadExecSettings, ArithmeticError) as exc:
            return _fail_bad_row(row.key, f"cannot retry: {exc}")
        return (smart_route_for(row.classpath, cfg), None) if due else None

    counts: dict[str, int] = {}
    for state, changed in store.requeue_due_retries(now, plan):
        if changed or state == State.FAILED:  # a bad row counts as failed (alone) whatever its write found
            counts[state] = counts.get(state, 0) + 1
    return counts


def _fail_bad_row(key: TaskKey, error: str) -> tuple[str, str]:
    """A retry that cannot be planned fails alone, with ``error``: logged, and the step that ends it so."""
    log.warning("%s.%s %s: %s (failed alone)", key.dag_id, key.task_id, key.execution_date, error)
    return State.FAILED, error


def end_zombies(store: SchedulerStore, cfg: Config, now: datetime | None = None) -> dict[str, int]:
    """End `running` classic tasks whose run stopped heartbeating (its process died or was killed).

    up_for_retry while tries remain, else failed, with the reason in ``error``. Each end is a
    compare-and-set on the heartbeat read, so a run that beats in the meantime is left alone.
    """
    now = now or clock.now()
    threshold = cfg.settings.scheduler.zombie_threshold

    def plan(row: ZombieRow) -> tuple[str, str]:
        error = (
            f"classic run on {row.hostname or 'an unknown host'} stopped heartbeating "
            f"(no sign of life for {threshold:g} s): its process died or was killed"
        )
        return _dead_run_state(row), error

    counts: dict[str, int] = {}
    for key, state, error in store.end_dead_runs(now - timedelta(seconds=threshold), now, plan):
        log.warning("%s.%s: %s -> %s", key.dag_id, key.task_id, error, state)
        counts[state] = counts.get(state, 0) + 1
    return counts


def _dead_run_state(row: ZombieRow | TaskRow) -> str:
    """The state a try whose run died ends in: up_for_retry while tries remain, else failed (a dead run is no
    timeout: no soft_fail). An exec_dict that cannot be read allows no retry."""
    try:
        retries = parse_exec(row.exec_dict).retries
    except BadExecSettings:
        retries = 0  # its exec_dict is unreadable: no retry, it ends failed with the reason given
    return retry_or(row.try_number, retries, State.FAILED)


@dataclass
class Child:
    """A `run-task` process this scheduler started, the try it claimed for it, and the tail of its stderr."""

    proc: subprocess.Popen
    try_number: int
    stderr: StderrTail


@dataclass
class Scheduler:
    """Launches classic-mode `run-task` children, at most ``[scheduler] parallelism`` at once.

    Its claims carry ``claimant`` (host:pid) as the task's hostname: a child's exit ends only a try this
    scheduler claimed. ``command`` builds a child's command line from its arguments.
    """

    store: SchedulerStore
    cfg: Config
    cli_args: list[str] = field(default_factory=list)
    children: dict[TaskKey, Child] = field(default_factory=dict)
    command: Callable[..., list[str]] = smartsensor_command
    claimant: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    stop: StopRequest = field(default_factory=StopRequest)  # the process's one stop (SIGTERM/SIGINT in ``run``)

    def reap(self) -> int:
        """Forget finished children; returns how many finished.

        A child that exited (with any code) while its task is still `running` in the try it was started for
        did not end it (it crashed at start, was killed, lost its host's memory): that try ends at once,
        up_for_retry while tries remain, else failed, with the child's last stderr line in ``error``. A DB
        error leaves the child listed, for the next pass.
        """
        done = [k for k, c in self.children.items() if c.proc.poll() is not None]
        for key in done:
            self._end_if_left_running(key, self.children[key])
            del self.children[key]
        return len(done)

    def _end_if_left_running(self, key: TaskKey, child: Child) -> None:
        code, line = child.proc.returncode, child.stderr.last_line()
        error = f"run-task exited with code {code}" + (f": {line}" if line else "")
        if code != 0:
            log.warning("%s.%s: %s", key.dag_id, key.task_id, error)
        now = clock.now()
        # ended by the run, handed back, or changed by someone: nothing ends (None)
        state = self.store.end_exited_try(key, child.try_number, self.claimant, now, error, _dead_run_state)
        if state is not None:
            log.warning(
                "%s.%s: its run-task exited without ending try %s -> %s",
                key.dag_id,
                key.task_id,
                child.try_number,
                state,
            )

    def launch(self) -> int:
        """Claim and start scheduled task instances up to the parallelism limit."""
        free = self.cfg.settings.scheduler.parallelism - len(self.children)
        if free <= 0:
            return 0
        started = 0
        for key in self.store.scheduled_keys(free):
            try_number = self.store.claim_scheduled_try(key, clock.now(), self.claimant)
            if try_number is None:
                continue
            cmd = self.command(
                *self.cli_args,
                "run-task",
                key.dag_id,
                key.task_id,
                key.execution_date.strftime("%Y-%m-%dT%H:%M:%S"),
                "--claimed",
            )
            try:
                proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                assert proc.stderr is not None  # stderr=PIPE
                self.children[key] = Child(proc, try_number, StderrTail(proc.stderr, sys.stderr))
                started += 1
            except OSError as exc:
                self.store.end_try(key, State.FAILED, clock.now(), error=f"could not start run-task: {exc}")
        return started

    def loop_once(self) -> dict[str, int]:
        """One pass: reap children, end dead runs (zombies), re-queue due retries, launch new ones."""
        finished = self.reap()
        zombies = end_zombies(self.store, self.cfg)
        requeued = requeue_retries(self.store, self.cfg)
        launched = self.launch()
        return {
            "requeued_smart": requeued.get(State.SMART_PENDING, 0),
            "requeued_classic": requeued.get(State.SCHEDULED, 0),
            "failed_bad_rows": requeued.get(State.FAILED, 0),
            "zombies": sum(zombies.values()),
            "finished": finished,
            "launched": launched,
            "running": len(self.children),
        }

    def run(self, once: bool, emit: Callable[[dict[str, Any]], None]) -> None:
        """The scheduler loop: a pass every ``[scheduler] loop_interval`` until SIGTERM/SIGINT, then hand the
        children's tasks back (``stop_children``). With ``once``: one pass, wait for its children, return.

        A pass that fails (the DB restarting, anything unexpected) is reported through ``emit`` as
        ``{"error": ...}`` and the loop carries on, keeping its children; with ``once`` it raises.
        """
        with self.stop.signals():
            self._passes(once, emit)

    def _passes(self, once: bool, emit: Callable[[dict[str, Any]], None]) -> None:
        while not self.stop.is_set():
            try:
                summary: dict[str, Any] = self.loop_once()
            except StoreUnavailable as exc:  # the DB is down or restarting: keep the children
                if once:
                    raise
                log.warning("scheduler pass failed, retrying: %s", exc.reason)
                summary = {"error": exc.reason, "running": len(self.children)}
            except Exception as exc:  # bad rows fail alone inside a pass; anything else must not
                if once:  # take the scheduler (and every retry and classic run) down with it
                    raise
                log.error("scheduler pass failed, retrying: %s: %s", type(exc).__name__, first_line(exc), exc_info=True)
                summary = {"error": f"{type(exc).__name__}: {first_line(exc)}", "running": len(self.children)}
            emit(summary)
            if once:
                self.wait_children()
                return
            self.stop.wait(self.cfg.settings.scheduler.loop_interval)
        self.stop_children(grace=self.cfg.settings.scheduler.stop_grace)

    def wait_children(self, timeout: float | None = None) -> None:
        """Wait for every launched child (``scheduler --once``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for c in list(self.children.values()):
            c.proc.wait(timeout=None if deadline is None else max(0.1, deadline - time.monotonic()))
        self.reap()

    def stop_children(self, grace: float = 30.0) -> None:
        """SIGTERM every running child, which hands its task back to `scheduled`; wait up to ``grace`` s.

        A child still alive after that is killed and its try ended (a try spent, nothing stuck); if the DB is
        down then, the next scheduler ends it as a zombie.
        """
        for c in self.children.values():
            if c.proc.poll() is None:
                c.proc.terminate()
        deadline = time.monotonic() + grace
        for key, c in list(self.children.items()):
            try:
                c.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("run-task %s.%s did not stop within %.0f s: killing it", key.dag_id, key.task_id, grace)
                c.proc.kill()
                c.proc.wait()
        try:
            self.reap()
        except StoreUnavailable as exc:
            log.warning("could not end the tries of killed runs (the zombie check will): %s", exc.reason)
