"""`smartsensor status`: tasks per state, per shard range, dedup ratio, workers' last rounds, leases, classic
runs that stopped heartbeating, and smart tasks stuck past the convergence bound (``collect_stuck``)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine

from smartsensor.adapters.sql import leases as lease_sql, status as status_sql, tasks as task_sql
from smartsensor.config import Config
from smartsensor.domain.leases import lease_held
from smartsensor.domain.timing import BadExecSettings, parse_exec


def collect_status(engine: Engine, cfg: Config, now: datetime | None = None) -> dict[str, Any]:
    """Everything `status` shows, as plain data: 9 statements, 11 while a task waits past its time limit
    (``collect_stuck``: 2, or 4)."""
    now = now or datetime.utcnow()
    ranges = cfg.shard_ranges
    with engine.connect() as conn:
        stuck = collect_stuck(conn, cfg.convergence_bound, now)
        by_state = status_sql.count_by_state(conn)
        waiting = status_sql.waiting_by_range(conn, [(r.lo, r.hi) for r in ranges])
        rounds = status_sql.worker_rounds(conn)
        leases = lease_sql.load_leases(conn)
        live = status_sql.list_workers(conn)
        zombie_threshold = cfg.settings.scheduler.zombie_threshold
        zombies = task_sql.load_zombies(conn, now - timedelta(seconds=zombie_threshold))
        stranded = status_sql.stranded_count(conn, cfg.shard_code_upper_limit)
    shards = []
    for i, r in enumerate(ranges):
        tasks, hashes = waiting.per_range.get(i, (0, 0))
        shards.append({"min": r.lo, "max": r.hi, "waiting": tasks, "distinct_hashes": hashes})
    distinct = waiting.hashes
    workers = []
    for w in rounds:
        last = json.loads(w["last_round_json"]) if w["last_round_json"] else {}
        age = (now - w["last_round_at"]).total_seconds() if w["last_round_at"] else None
        workers.append(
            {
                "worker_id": w["worker_id"],
                "pid": w["pid"],
                "shard_min": w["shard_min"],
                "shard_max": w["shard_max"],
                "last_round_at": w["last_round_at"].isoformat() if w["last_round_at"] else None,
                "age_seconds": round(age, 1) if age is not None else None,
                "last_round_seconds": w["last_round_seconds"],
                "last_round": last,
            }
        )
    problems = round_problems(workers) + stuck_problems(stuck)
    lease_timeout = cfg.settings.smart_sensor.lease_timeout
    lease_rows = [
        {
            "shard_min": row["shard_min"],
            "shard_max": row["shard_max"],
            "owner": row["owner"],
            "epoch": row["epoch"],
            "expires_at": row["expires_at"].isoformat() if row["expires_at"] else None,
            "expires_in": round((row["expires_at"] - now).total_seconds(), 1) if row["expires_at"] else None,
            "expired": bool(row["owner"]) and not lease_held(row, now),
        }
        for row in leases
    ]
    worker_rows = [
        {
            "worker_id": w["worker_id"],
            "hostname": w["hostname"],
            "pid": w["pid"],
            "heartbeat_age": round((now - w["heartbeat_at"]).total_seconds(), 1) if w["heartbeat_at"] else None,
            "stale": w["heartbeat_at"] is None or (now - w["heartbeat_at"]).total_seconds() > lease_timeout,
            "ranges": [row["shard_min"] for row in leases if row["owner"] == w["worker_id"]],
        }
        for w in live
    ]
    return {
        "leases": lease_rows,
        "lease_workers": worker_rows,
        "tasks_by_state": dict(sorted(by_state.items())),
        "waiting": waiting.tasks,
        "distinct_hashes": distinct,
        "dedup_ratio": round(waiting.tasks / distinct, 2) if distinct else None,
        "shards": shards,
        "workers": workers,
        "stranded": stranded,
        "problems": problems,
        "stuck": stuck,
        "zombies": [
            {
                "dag_id": z["dag_id"],
                "task_id": z["task_id"],
                "execution_date": z["execution_date"].isoformat(),
                "hostname": z["hostname"],
                "heartbeat_age": round((now - z["updated_at"]).total_seconds(), 1),
            }
            for z in zombies
        ],
    }


def collect_stuck(conn: Connection, bound: float, now: datetime) -> dict[str, Any]:
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
    cutoff = now - timedelta(seconds=bound)
    count, oldest = status_sql.waiting_after_landing(conn, cutoff)
    return {
        "bound_seconds": bound,
        "after_landing": {"count": count, "oldest": _overdue(oldest, now, bound)},
        "past_time_limit": _past_time_limit(conn, bound, now),
    }


def _past_time_limit(conn: Connection, bound: float, now: datetime) -> dict[str, Any]:
    """``collect_stuck``'s past_time_limit: per exec_dict, its cutoff (now - time limit - bound); the exec_dicts
    whose earliest start is at or before theirs are counted, and the one furthest past it gives the oldest task."""
    cutoffs: list[tuple[str | None, datetime]] = []
    worst: tuple[float, str | None, datetime, float] | None = None  # (seconds late, exec_dict, cutoff, time limit)
    for exec_dict, first_start in status_sql.waiting_start_by_exec(conn):
        try:
            limit = parse_exec(exec_dict).time_limit
        except BadExecSettings:
            continue
        cutoff = now - timedelta(seconds=limit + bound)
        if first_start <= cutoff:
            cutoffs.append((exec_dict, cutoff))
            late = (cutoff - first_start).total_seconds()
            if worst is None or late > worst[0]:
                worst = (late, exec_dict, cutoff, limit)
    if worst is None:
        return {"count": 0, "oldest": None}
    count = status_sql.count_started_before(conn, cutoffs)
    row = status_sql.oldest_started_before(conn, worst[1], worst[2])
    due = None if row is None else (*row[:3], row[3] + timedelta(seconds=worst[3]))
    return {"count": count, "oldest": _overdue(due, now, bound)}


def _overdue(task: status_sql.OverdueTask | None, now: datetime, bound: float) -> dict[str, Any] | None:
    """A stuck kind's oldest task as plain data: its key and how many seconds it is past its due time + bound."""
    if task is None:
        return None
    dag_id, task_id, execution_date, due = task
    late = (now - due).total_seconds() - bound
    return {
        "dag_id": dag_id,
        "task_id": task_id,
        "execution_date": execution_date.isoformat(),
        "late_seconds": round(late, 1),
    }


def stuck_problems(stuck: dict[str, Any]) -> list[str]:
    """``collect_stuck``'s non-zero counts, one line each (shown loudly by `status`, in ``problems``)."""
    bound = f"{stuck['bound_seconds']:g} s"
    what = {
        "after_landing": f"still wait although their check landed more than {bound} ago",
        "past_time_limit": f"still wait more than {bound} past their time limit",
    }
    out = []
    for kind, text in what.items():
        n, oldest = stuck[kind]["count"], stuck[kind]["oldest"]
        if not n:
            continue
        where = (
            f" (oldest: {oldest['dag_id']}.{oldest['task_id']} @ {oldest['execution_date']}, "
            f"{oldest['late_seconds']:g} s late)"
            if oldest
            else ""
        )
        out.append(f"{n} task(s) {text}{where}")
    return out


def round_problems(workers: list[dict[str, Any]]) -> list[str]:
    """What the workers' last rounds report going wrong, one line each (shown loudly by `status`)."""
    out: list[str] = []
    seen: set[tuple[Any, Any]] = set()
    for w in workers:
        if (w["pid"], w["last_round_at"]) in seen:  # one process's ranges share one round: report it once
            continue
        seen.add((w["pid"], w["last_round_at"]))
        last, who = w["last_round"], w["worker_id"]
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


def status_lines(data: dict[str, Any], shard_code_upper_limit: int) -> list[str]:
    """`smartsensor status` as text, from ``collect_status``'s data."""
    out = ["tasks by state: " + (", ".join(f"{k} {v}" for k, v in data["tasks_by_state"].items()) or "none")]
    ratio = data["dedup_ratio"]
    out.append(
        f"waiting smart tasks {data['waiting']} over {data['distinct_hashes']} distinct checks"
        + (f" (dedup ratio {ratio}x)" if ratio else "")
    )
    out.append(f"{'range':>13}  {'waiting':>7}  {'distinct':>8}")
    out += [f"{s['min']:>6}-{s['max']:<6}  {s['waiting']:>7}  {s['distinct_hashes']:>8}" for s in data["shards"]]
    if data["stranded"]:
        out.append(
            f"WARNING: {data['stranded']} waiting task(s) have a shardcode outside [0, {shard_code_upper_limit}) "
            f"and no worker serves them: run `smartsensor db reshard`"
        )
    if data["workers"]:
        out.append(f"{'worker':<40} {'range':>13} {'last round':>10} {'age s':>7}")
        for w in data["workers"]:
            age = w["age_seconds"] if w["age_seconds"] is not None else "-"
            out.append(
                f"{w['worker_id']:<40} {w['shard_min']:>6}-{w['shard_max']:<6} "
                f"{(w['last_round_seconds'] or 0):>9.2f}s {age:>7}"
            )
    else:
        out.append("no worker has reported a round")
    out += [f"WARNING: {problem}" for problem in data["problems"]]
    if data["leases"]:
        out.append(f"{'lease':>13}  {'epoch':>5}  {'expires in':>10}  owner")
        for lease in data["leases"]:
            left = "-" if lease["expires_in"] is None else f"{lease['expires_in']:.1f}s"
            owner = (lease["owner"] or "(free)") + ("  EXPIRED" if lease["expired"] else "")
            out.append(f"{lease['shard_min']:>6}-{lease['shard_max']:<6}  {lease['epoch']:>5}  {left:>10}  {owner}")
    out += [
        f"worker {w['worker_id']} stopped heartbeating {w['heartbeat_age']} s ago"
        for w in data["lease_workers"]
        if w["stale"]
    ]
    out += [
        f"classic run of {z['dag_id']}.{z['task_id']} {z['execution_date'][:10]} on {z['hostname']} "
        f"stopped heartbeating {z['heartbeat_age']} s ago (the scheduler ends it)"
        for z in data["zombies"]
    ]
    return out
