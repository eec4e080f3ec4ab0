"""Retention: the rows of ended tries, and of the landings of tables no longer watched, deleted once older than
``[retention] max_age_days`` (``smartsensor db prune``, and ``serve``'s retention job every ``[retention]
interval``), as Airflow's ``airflow db clean`` does for its own tables.

What goes, in this order, each table in batches of ``[retention] batch_size`` rows, each batch a guarded statement
in a transaction of its own (``adapters.sql.retention``):

1. ``external_task``: an Airflow key registered before the cutoff whose task instance ended before it, or is gone.
   A states poll for such a key answers ``unknown`` from then on: the default age (30 days) is far beyond any
   trigger's life (a sensor's timeout is at most days).
2. ``task_instance``: a task that ended (success, failed, skipped) before the cutoff. Never one that waits, runs, is
   scheduled or up for retry, whatever its age; and never one sent back to wait between the window's read and the
   delete (the delete repeats the state).
3. ``landing_outbox`` and ``asset_watch``: the settled rows (baseline, delivered, rejected) of a table Airflow has
   not listed as watched for the age (counted from Airflow's newest listing on record, so an Airflow that could not
   be asked forgets nothing), then its watch; never an undelivered row (it keeps its watch too). The watch loses its
   baseline first, in the same transaction as the first rows go: if Airflow lists the table again, that is a new
   watch, whose baseline is everything listed then (published only with ``[landings] publish_existing``), so a
   pruned landing is not published again. A watched table's landings stay while its partitions do: the publisher
   itself forgets a settled row past the age once its partition is gone from the catalog
   (``service.landings``).
4. ``worker_round``: the last round of a range no worker has served since the cutoff.
5. ``worker``: a worker whose last heartbeat is before the cutoff and that owns no lease (one killed; a worker
   that stops cleanly deletes its own row), so `status` stops listing it.

``partition_signal`` and ``state_sample`` have their own retention (the workers', ``[api] history_retention``).
A pass stops at its time budget and the next run starts over; a row is read once per pass whatever the share of
old rows, and deleting is idempotent, so several ``serve`` processes may prune at once.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Callable, Iterator

from smartsensor.config import Config
from smartsensor.domain.clock import now as clock_now
from smartsensor.domain.status_rows import Key
from smartsensor.ports import ExpiredRows
from smartsensor.sensors.errors import first_line

if TYPE_CHECKING:  # the one-shot `db prune` needs no scheduler (APScheduler's import is a command's CPU)
    from smartsensor.adapters.periodic import PeriodicJobs

log = logging.getLogger(__name__)

TABLES = ("external_task", "task_instance", "landing_outbox", "asset_watch", "worker_round", "worker")
DAY_SECONDS = 24 * 3600.0


@dataclass
class TableReport:
    """One table's part of a pass: rows deleted (a dry run: that would be), statements sent, seconds taken."""

    rows: int = 0
    statements: int = 0
    seconds: float = 0.0


@dataclass
class PruneReport:
    """What one pass did: its cutoff, per table, and whether it got through before its time budget ran out."""

    cutoff: datetime
    dry_run: bool
    tables: dict[str, TableReport] = field(default_factory=lambda: {t: TableReport() for t in TABLES})
    complete: bool = True

    @property
    def rows(self) -> int:
        """Rows deleted in all tables."""
        return sum(t.rows for t in self.tables.values())

    def lines(self) -> list[str]:
        """One line per table, as ``db prune`` prints them."""
        verb = "would delete" if self.dry_run else "deleted"
        out = [
            f"{name:<15} {verb} {t.rows:>10,} rows  ({t.statements:,} statements, {t.seconds:.1f} s)"
            for name, t in self.tables.items()
        ]
        if not self.complete:
            out.append("stopped at the time budget: the next pass goes on")
        return out


class _Pass:
    """One pass's bookkeeping: the deadline, and each table's rows, statements and seconds."""

    def __init__(self, rows: ExpiredRows, report: PruneReport, budget: float | None) -> None:
        self.rows, self.report = rows, report
        self.deadline = None if budget is None else time.monotonic() + budget

    def over(self) -> bool:
        """Whether the time budget is used (the report then says the pass is incomplete)."""
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.report.complete = False
        return not self.report.complete

    @contextmanager
    def timed(self, table: str) -> Iterator[TableReport]:
        """``table``'s entry, to add rows to; the statements sent and the seconds taken meanwhile are added too."""
        entry = self.report.tables[table]
        start, sent = time.monotonic(), self.rows.statements()
        try:
            yield entry
        finally:
            entry.statements += self.rows.statements() - sent
            entry.seconds += time.monotonic() - start


def prune(
    rows: ExpiredRows,
    max_age: timedelta,
    batch_size: int,
    budget: float | None = None,
    dry_run: bool = False,
    now: datetime | None = None,
) -> PruneReport:
    """Delete (``dry_run``: count) what is older than ``max_age`` before ``now``, ``batch_size`` rows per statement,
    until done or ``budget`` seconds are used (None: no limit). Database errors propagate: what was deleted stays
    deleted, and the next pass goes on."""
    now = now or clock_now()
    cutoff = now - max_age
    report = PruneReport(cutoff, dry_run)
    run = _Pass(rows, report, budget)
    for table, step in (
        ("external_task", rows.prune_keys_batch),
        ("task_instance", rows.prune_tasks_batch),
    ):
        after: Key | None = None
        while not run.over():
            with run.timed(table) as entry:
                batch = step(after, batch_size, cutoff, dry_run)
                entry.rows += batch.rows
            after = batch.after
            if after is None:
                break
    if not run.over():
        _forget_unwatched(rows, run, now, max_age, batch_size, dry_run)
    if not run.over():
        with run.timed("worker_round") as entry:
            entry.rows += rows.prune_rounds(cutoff, batch_size, dry_run)
    if not run.over():
        with run.timed("worker") as entry:
            entry.rows += rows.prune_workers(cutoff, batch_size, dry_run)
    return report


def _forget_unwatched(
    rows: ExpiredRows, run: _Pass, now: datetime, max_age: timedelta, batch_size: int, dry_run: bool
) -> None:
    """The outbox rows and watches of the tables Airflow no longer lists as watched, ``batch_size`` tables at a
    time in ``uri`` order."""
    cutoff = rows.watch_cutoff(now, max_age)
    after = ""
    while cutoff is not None and not run.over():
        uris = rows.read_unwatched(cutoff, after, batch_size)
        if dry_run:
            with run.timed("landing_outbox") as entry:
                entry.rows += rows.count_unwatched_landings(uris)
        for uri in [] if dry_run else uris:
            while not run.over():
                with run.timed("landing_outbox") as entry:
                    deleted, gone = rows.forget_unwatched_batch(uri, cutoff, batch_size)
                    entry.rows += deleted
                run.report.tables["asset_watch"].rows += gone
                if gone or deleted < batch_size:
                    break  # the watch went; or undelivered rows keep it, or Airflow listed it again meanwhile
        if len(uris) < batch_size:
            return
        after = uris[-1]


class RetentionJob:
    """``prune`` every ``[retention] interval`` seconds within ``[retention] time_budget``: a job of ``serve``'s
    ``PeriodicJobs`` (``schedule``), when ``[retention] enabled``. A failure is logged in one line and the next run
    tries again: it never takes the server down."""

    JOB = "retention"

    def __init__(self, rows: ExpiredRows, cfg: Config, clock: Callable[[], datetime] = clock_now) -> None:
        self.rows, self.clock = rows, clock
        self.settings = cfg.settings.retention
        self.last: PruneReport | None = None

    def tick(self) -> PruneReport | None:
        """One pass; its report, or None when it failed (logged)."""
        settings = self.settings
        try:
            self.last = prune(
                self.rows,
                timedelta(days=settings.max_age_days),
                settings.batch_size,
                budget=settings.time_budget,
                now=self.clock(),
            )
        except Exception as exc:  # noqa: BLE001 - the server must outlive any database trouble
            log.warning("retention: pruning failed, trying again in %gs: %s", settings.interval, first_line(exc))
            return None
        if self.last.rows:
            log.info("retention: %s", "; ".join(line.strip() for line in self.last.lines() if " 0 rows" not in line))
        return self.last

    def schedule(self, jobs: PeriodicJobs) -> None:
        """Prune on ``jobs`` when ``[retention] enabled``: at once, then every ``interval`` seconds."""
        if self.settings.enabled:
            jobs.every(self.JOB, self.settings.interval, self.tick, at_once=True)
