"""`smartsensor status`: tasks per state, per shard range, dedup ratio, workers' last rounds, leases, classic
runs that stopped heartbeating, smart tasks stuck past the convergence bound (``collect_stuck``), and the landing
publisher's outbox (``collect_landings``), as a
``service.status_report.StatusReport``; ``status_lines`` is its text."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any, Sequence

from smartsensor.config import Config
from smartsensor.domain import clock
from smartsensor.domain.landings import UNDELIVERED, parse_hive_uri
from smartsensor.domain.leases import LeaseRow
from smartsensor.domain.status_rows import Cutoffs, OverdueTask, StatusQuery, StuckRows
from smartsensor.domain.timing import BadExecSettings, parse_exec
from smartsensor.ports import StatusReads
from smartsensor.service.status_report import (
    LandingsStatus,
    LeaseStatus,
    LiveWorker,
    RefusedLanding,
    ShardRow,
    StatusReport,
    Stuck,
    StuckCount,
    StuckTask,
    UnknownLanding,
    WorkerRoundRow,
    Zombie,
)


def collect_status(reads: StatusReads, cfg: Config, now: datetime | None = None) -> StatusReport:
    """Everything `status` shows (``StatusReport.as_json``: what `status --json` prints): 9 statements, 11 while a
    task waits past its time limit (``collect_stuck``: 2, or 4); 6 more with ``[landings] publish`` on (the
    outbox: ``collect_landings``)."""
    now = now or clock.now()
    ranges = cfg.resolved_shard_ranges
    rule = _StuckRule(cfg.convergence_bound, now)
    zombie_cutoff = now - timedelta(seconds=cfg.settings.scheduler.zombie_threshold)
    stuck_rows, by_state, waiting, rounds, leases, live, zombies, stranded = reads.read_status(
        StatusQuery(
            rule.landed_before,
            rule.past_limits,
            [(r.lo, r.hi) for r in ranges],
            zombie_cutoff,
            cfg.shard_code_upper_limit,
        )
    )
    stuck = rule.stuck(stuck_rows)
    shards = tuple(ShardRow(r.lo, r.hi, *waiting.per_range.get(i, (0, 0))) for i, r in enumerate(ranges))
    workers = tuple(_worker_round(w, now) for w in rounds)
    distinct = waiting.hashes
    landings = (
        collect_landings(reads, now, cfg.shard_code_upper_limit, cfg.settings.landings.unknown_outcome_patience)
        if cfg.settings.landings.publish
        else None
    )
    return StatusReport(
        leases=tuple(_lease_status(row, now) for row in leases),
        lease_workers=tuple(_live_worker(w, leases, now, cfg.settings.smart_sensor.lease_timeout) for w in live),
        tasks_by_state=dict(sorted(by_state.items())),
        waiting=waiting.tasks,
        distinct_hashes=distinct,
        dedup_ratio=round(waiting.tasks / distinct, 2) if distinct else None,
        shards=shards,
        workers=workers,
        stranded=stranded,
        problems=tuple(round_problems(workers) + stuck_problems(stuck) + landing_problems(landings)),
        stuck=stuck,
        zombies=tuple(
            Zombie(z.dag_id, z.task_id, z.execution_date, z.hostname, _age(now, z.updated_at)) for z in zombies
        ),
        landings=landings,
    )


def collect_landings(reads: StatusReads, now: datetime, shard_limit: int, patience: float = 3600.0) -> LandingsStatus:
    """The landing publisher's outbox as `status` shows it (``reads.read_outbox_summary``); a
    landing of unknown outcome for longer than ``patience`` seconds (``[landings] unknown_outcome_patience``) is
    shown as unknowable (it still waits); a watched table whose shardcode is outside [0, ``shard_limit``) as
    orphaned (no range serves it)."""
    summary = reads.read_outbox_summary(shard_limit)
    oldest = summary.oldest_undelivered
    unknown = tuple(
        UnknownLanding(
            landing_id=r.id,
            table=_table_of(r.uri),
            partition=r.partition_name,
            unknown_since=r.unknown_since,
            unknown_for=_age(now, r.unknown_since),
            last_error=r.last_error,
            unknowable=_age(now, r.unknown_since) > patience,
        )
        for r in summary.unresolved_rows
    )
    return LandingsStatus(
        watched_tables=summary.watched_tables,
        by_state=dict(sorted(summary.by_state.items())),
        backlog=sum(summary.by_state.get(s, 0) for s in UNDELIVERED),
        oldest_undelivered=oldest,
        oldest_age=_age(now, oldest) if oldest else None,
        duplicates=summary.duplicates,
        unknown_outcomes=summary.unknown_outcomes,
        unresolved=summary.unresolved,
        unresolved_landings=unknown,
        rejected_landings=tuple(
            RefusedLanding(r.id, _table_of(r.uri), r.partition_name, r.why) for r in summary.rejected_rows
        ),
        paused_consumers={_table_of(uri): consumers for uri, consumers in summary.paused},
        orphaned_tables={_table_of(uri): waiting for uri, waiting in summary.orphaned},
    )


def _table_of(uri: str) -> str:
    """``db.table`` of a ``hive://host:port/db/table`` asset URI (the URI itself if it is not one)."""
    parsed = parse_hive_uri(uri)
    return f"{parsed[1]}.{parsed[2]}" if parsed else uri


def _age(now: datetime, then: datetime) -> float:
    return round((now - then).total_seconds(), 1)


def _worker_round(w: dict[str, Any], now: datetime) -> WorkerRoundRow:
    """A worker_round row as `status` shows it."""
    at = w["last_round_at"]
    return WorkerRoundRow(
        range_rounds_id=w["range_rounds_id"],
        pid=w["pid"],
        shard_min=w["shard_min"],
        shard_max=w["shard_max"],
        last_round_at=at,
        age_seconds=_age(now, at) if at else None,
        last_round_seconds=w["last_round_seconds"],
        last_round=json.loads(w["last_round_json"]) if w["last_round_json"] else {},
    )


def _lease_status(row: LeaseRow, now: datetime) -> LeaseStatus:
    """A lease row with its countdown; ``expired``: it has an owner that no longer holds it."""
    return LeaseStatus(
        shard_min=row.shard_min,
        shard_max=row.shard_max,
        owner=row.owner,
        epoch=row.epoch,
        expires_at=row.expires_at,
        expires_in=_age(row.expires_at, now) if row.expires_at else None,
        expired=bool(row.owner) and not row.held(now),
    )


def _live_worker(w: dict[str, Any], leases: Sequence[LeaseRow], now: datetime, lease_timeout: float) -> LiveWorker:
    """A worker row: its heartbeat's age, stale past the lease timeout, and the ranges it owns."""
    beat = w["heartbeat_at"]
    return LiveWorker(
        worker_id=w["worker_id"],
        hostname=w["hostname"],
        pid=w["pid"],
        heartbeat_age=_age(now, beat) if beat else None,
        stale=beat is None or (now - beat).total_seconds() > lease_timeout,
        ranges=tuple(row.shard_min for row in leases if row.owner == w["worker_id"]),
    )


def collect_stuck(reads: StatusReads, bound: float, now: datetime) -> Stuck:
    """Smart tasks that still wait (``smart_pending`` or ``smart_running``) although a worker should have ended
    them ``bound`` seconds ago (``[smart_sensor] reconcile_interval`` + ``poke_interval``, ``cfg.convergence_bound``:
    within that a worker's index holds every waiting task of its ranges). Two kinds, each counted with its most
    overdue task (key, and ``late_seconds`` past its due time + the bound), by aggregate SQL only:

    - **after_landing**, waiting after its check landed: a waiting task w such that another task of the same check
      (hashcode, classpath, attr_dict) is in ``success`` with ``end_date <= now - bound``, and w has waited since
      before that (``coalesce(start_date, updated_at) <= now - bound``). A round marks every waiting task of a
      check's hash in its range at once, and a task registered later is poked at its start, so such a w was
      missed. Due: the later of the first such landing and w's wait's start. A partition dropped after its check
      landed (w waits for it again, rightly) or a success set by hand (``set-state``) also shows here.
    - **past_time_limit**: a started waiting task with ``start_date + time_limit + bound <= now``, its time limit
      from its exec_dict (``domain.timing.parse_exec``: min(timeout, execution_timeout); NULL: the defaults, 7
      days). An exec_dict that cannot be parsed is left out: the worker fails its tasks alone. Due: start + time
      limit. A ``smart_pending`` task that no worker started has no start and no time limit running yet.

    2 statements (``waiting_after_landing``; ``waiting_start_by_exec``, one row per distinct exec_dict), then,
    only when some exec_dict's earliest start is past its cutoff, 2 more: the count over those exec_dicts
    (one OR'ed term each) and the most overdue task's key."""
    rule = _StuckRule(bound, now)
    return rule.stuck(reads.read_stuck(rule.landed_before, rule.past_limits))


class _StuckRule:
    """``collect_stuck``'s rule at ``now``: the cutoffs its queries take (``landed_before``; ``past_limits``, per
    exec_dict), and the ``Stuck`` made of what they read (``stuck``)."""

    def __init__(self, bound: float, now: datetime) -> None:
        self.bound, self.now = bound, now
        self.landed_before = now - timedelta(seconds=bound)
        self._worst_limit = 0.0  # the time limit of the exec_dict furthest past its cutoff, once one is

    def past_limits(
        self, starts: list[tuple[str | None, datetime]]
    ) -> tuple[Cutoffs, tuple[str | None, datetime] | None]:
        """past_time_limit's cutoffs: per exec_dict, its cutoff (now - time limit - bound); the exec_dicts whose
        earliest start is at or before theirs are counted, and the one furthest past it gives the oldest task."""
        cutoffs: Cutoffs = []
        worst: tuple[float, str | None, datetime, float] | None = None  # (seconds late, exec_dict, cutoff, limit)
        for exec_dict, first_start in starts:
            try:
                limit = parse_exec(exec_dict).time_limit
            except BadExecSettings:
                continue
            cutoff = self.now - timedelta(seconds=limit + self.bound)
            if first_start <= cutoff:
                cutoffs.append((exec_dict, cutoff))
                late = (cutoff - first_start).total_seconds()
                if worst is None or late > worst[0]:
                    worst = (late, exec_dict, cutoff, limit)
        if worst is None:
            return cutoffs, None
        self._worst_limit = worst[3]
        return cutoffs, (worst[1], worst[2])

    def stuck(self, rows: StuckRows) -> Stuck:
        """The two kinds' counts and most overdue tasks (the oldest past its time limit is due at its start + its
        time limit)."""
        count, oldest = rows.after_landing
        past, started = rows.past_time_limit
        due = None if started is None else (*started[:3], started[3] + timedelta(seconds=self._worst_limit))
        return Stuck(
            self.bound,
            StuckCount(count, _overdue(oldest, self.now, self.bound)),
            StuckCount(past, _overdue(due, self.now, self.bound)),
        )


def _overdue(task: OverdueTask | None, now: datetime, bound: float) -> StuckTask | None:
    """A stuck kind's oldest task: its key and how many seconds it is past its due time + bound."""
    if task is None:
        return None
    dag_id, task_id, execution_date, due = task
    return StuckTask(dag_id, task_id, execution_date, round((now - due).total_seconds() - bound, 1))


def stuck_problems(stuck: Stuck) -> list[str]:
    """``collect_stuck``'s non-zero counts, one line each (shown loudly by `status`, in ``problems``)."""
    bound = f"{stuck.bound_seconds:g} s"
    what = {
        "after_landing": f"still wait although their check landed more than {bound} ago",
        "past_time_limit": f"still wait more than {bound} past their time limit",
    }
    out = []
    for kind, counted in stuck.kinds():
        if not counted.count:
            continue
        oldest = counted.oldest
        where = (
            f" (oldest: {oldest.dag_id}.{oldest.task_id} @ {clock.iso(oldest.execution_date)}, "
            f"{oldest.late_seconds:g} s late)"
            if oldest
            else ""
        )
        out.append(f"{counted.count} task(s) {what[kind]}{where}")
    return out


def landing_problems(landings: LandingsStatus | None) -> list[str]:
    """A landing of unknown outcome past ``[landings] unknown_outcome_patience``, one line each (by name, the
    longest unknown shown), and how many more there are."""
    if landings is None:
        return []
    unknowable = [u for u in landings.unresolved_landings if u.unknowable]
    return [
        f"landing {u.landing_id} ({u.table} {u.partition}) of unknown outcome for {u.unknown_for:g} s: Airflow has "
        f"not said whether it holds its event (not posted again until it does; last error: {u.last_error or '-'})"
        for u in unknowable
    ] + [
        f"watched table {table} has a shardcode no range serves: its landings are not published ({waiting} waiting); "
        "run `smartsensor db reshard`"
        for table, waiting in landings.orphaned_tables.items()
    ]


def round_problems(workers: Sequence[WorkerRoundRow]) -> list[str]:
    """What the workers' last rounds report going wrong, one line each (shown loudly by `status`)."""
    out: list[str] = []
    seen: set[tuple[int | None, datetime | None]] = set()
    for w in workers:
        if (w.pid, w.last_round_at) in seen:  # one process's ranges share one round: report it once
            continue
        seen.add((w.pid, w.last_round_at))
        last, who = w.last_round, w.range_rounds_id
        if last.get("error"):
            out.append(f"worker {who}: its last round failed: {last['error']}")
        for module, why in sorted((last.get("module_errors") or {}).items()):
            out.append(
                f"worker {who}: sensor module {module!r} cannot be imported there: {why} "
                f"({last.get('module_waiting', 0)} task(s) of its classes wait, within their timeouts)"
            )
        if last.get("fenced_out"):
            out.append(
                f"worker {who}: lost its lease during its last round; that round wrote nothing "
                f"(the range's new owner checks its tasks)"
            )
        if last.get("transient_errors") and not last.get("module_errors"):
            out.append(
                f"worker {who}: {last['transient_errors']} check(s) got no answer in its last round (their "
                f"tasks wait, within their timeouts): {last.get('transient_example') or 'transient error'}"
            )
        if last.get("bad_rows"):
            out.append(
                f"worker {who}: {last['bad_rows']} task(s) could not be planned and were failed alone "
                f"(see `smartsensor tasks --state failed`)"
            )
    return out


def status_lines(report: StatusReport, shard_code_upper_limit: int) -> list[str]:
    """`smartsensor status` as text, from ``collect_status``'s report."""
    out = ["tasks by state: " + (", ".join(f"{k} {v}" for k, v in report.tasks_by_state.items()) or "none")]
    ratio = report.dedup_ratio
    out.append(
        f"waiting smart tasks {report.waiting} over {report.distinct_hashes} distinct checks"
        + (f" (dedup ratio {ratio}x)" if ratio else "")
    )
    out.append(f"{'range':>13}  {'waiting':>7}  {'distinct':>8}")
    out += [f"{s.min:>6}-{s.max:<6}  {s.waiting:>7}  {s.distinct_hashes:>8}" for s in report.shards]
    if report.stranded:
        out.append(
            f"WARNING: {report.stranded} waiting task(s) have a shardcode outside [0, {shard_code_upper_limit}) "
            f"and no worker serves them: run `smartsensor db reshard`"
        )
    if report.workers:
        out.append(f"{'worker':<40} {'range':>13} {'last round':>10} {'age s':>7}")
        for w in report.workers:
            age = w.age_seconds if w.age_seconds is not None else "-"
            took = w.last_round_seconds or 0
            out.append(f"{w.range_rounds_id:<40} {w.shard_min:>6}-{w.shard_max:<6} {took:>9.2f}s {age:>7}")
    else:
        out.append("no worker has reported a round")
    out += [f"WARNING: {problem}" for problem in report.problems]
    if report.leases:
        out.append(f"{'lease':>13}  {'epoch':>5}  {'expires in':>10}  owner")
        for lease in report.leases:
            left = "-" if lease.expires_in is None else f"{lease.expires_in:.1f}s"
            owner = (lease.owner or "(free)") + ("  EXPIRED" if lease.expired else "")
            out.append(f"{lease.shard_min:>6}-{lease.shard_max:<6}  {lease.epoch:>5}  {left:>10}  {owner}")
    out += [
        f"worker {w.worker_id} stopped heartbeating {w.heartbeat_age} s ago" for w in report.lease_workers if w.stale
    ]
    if report.landings is not None:
        out += landings_lines(report.landings)
    out += [
        f"classic run of {z.dag_id}.{z.task_id} {z.execution_date.date().isoformat()} on {z.hostname} "
        f"stopped heartbeating {z.heartbeat_age} s ago (the scheduler ends it)"
        for z in report.zombies
    ]
    return out


def landings_lines(landings: LandingsStatus) -> list[str]:
    """The landing publisher's part of `status`'s text."""
    states = ", ".join(f"{k} {v}" for k, v in landings.by_state.items()) or "none"
    out = [f"landings to Airflow: {landings.watched_tables} tables watched; outbox: {states}"]
    if landings.backlog:
        out.append(
            f"landings backlog {landings.backlog}, the oldest landed {landings.oldest_age:g} s ago "
            f"({clock.iso(landings.oldest_undelivered) if landings.oldest_undelivered else '-'})"
        )
    if landings.duplicates or landings.unknown_outcomes:
        out.append(
            f"landings published twice: {landings.duplicates} known; attempts whose outcome was unknown when they "
            f"ended: {landings.unknown_outcomes} (each looked up in Airflow before its landing is posted again)"
        )
    if landings.unresolved:
        out.append(
            f"landings of unknown outcome, not posted again until Airflow says whether it holds their event: "
            f"{landings.unresolved}"
        )
    for u in landings.unresolved_landings:
        verdict = (
            "UNKNOWABLE so far (past [landings] unknown_outcome_patience), still waiting"
            if u.unknowable
            else "asking Airflow"
        )
        out.append(
            f"  landing {u.landing_id} {u.table} {u.partition}: outcome unknown since {clock.iso(u.unknown_since)} "
            f"({u.unknown_for:g} s), {verdict}; last error: {u.last_error or '-'}"
        )
    for table, consumers in landings.paused_consumers.items():
        out.append(
            f"  {table}: consumers paused in Airflow: {consumers} (Airflow queues no run of a paused DAG for a landing "
            "made meanwhile, now or once unpaused)"
        )
    if landings.rejected_landings:
        out.append("landings refused for good (never posted again; the latest):")
    for r in landings.rejected_landings:
        out.append(f"  landing {r.landing_id} {r.table} {r.partition}: {r.why or '-'}")
    return out
