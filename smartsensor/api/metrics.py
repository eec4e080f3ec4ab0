"""Prometheus metrics of the whole installation, computed from what ``status`` reads, plus this server process's
own request counts (the only state a server keeps)."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from smartsensor.service.status_report import LandingsStatus, StatusReport, Stuck


def render_metrics(status: StatusReport, requests: Mapping[tuple[str, str, str], int] | None = None) -> bytes:
    """Prometheus text for one status snapshot (``service.status.collect_status``) and this process's requests
    by (method, route, status code): a copy (``RequestCounts.snapshot``), which nothing changes while it is read."""
    registry = CollectorRegistry()
    if requests:
        served = Gauge(
            "smartsensor_api_requests",
            'Requests this server process answered, by method, route template and code, each "other" beyond the'
            " known ones (a counter since the process started)",
            ["method", "route", "code"],
            registry=registry,
        )
        for (method, route, code), n in requests.items():
            served.labels(method, route, code).set(n)
    tasks = Gauge("smartsensor_tasks", "Task instances by state", ["state"], registry=registry)
    for state, n in status.tasks_by_state.items():
        tasks.labels(state).set(n)
    Gauge("smartsensor_waiting_distinct_checks", "Distinct checks the waiting tasks share", registry=registry).set(
        status.distinct_hashes
    )
    Gauge("smartsensor_dedup_ratio", "Waiting tasks per distinct check (0: nothing waits)", registry=registry).set(
        status.dedup_ratio or 0
    )
    Gauge("smartsensor_stranded_tasks", "Waiting tasks whose shardcode no range serves", registry=registry).set(
        status.stranded
    )
    Gauge("smartsensor_zombie_runs", "Classic runs that stopped heartbeating", registry=registry).set(
        len(status.zombies)
    )
    held = Gauge("smartsensor_shard_leases", "Shard leases by holder state", ["held"], registry=registry)
    held.labels("yes").set(sum(1 for lease in status.leases if lease.owner and not lease.expired))
    held.labels("no").set(sum(1 for lease in status.leases if not lease.owner or lease.expired))
    Gauge("smartsensor_live_workers", "Leased worker processes whose heartbeat is fresh", registry=registry).set(
        sum(1 for w in status.lease_workers if not w.stale)
    )
    Gauge("smartsensor_problems", "WARNINGs `status` prints", registry=registry).set(len(status.problems))
    _stuck_gauges(registry, status.stuck)
    if status.landings is not None:
        _landing_gauges(registry, status.landings)
    return generate_latest(registry)


def _landing_gauges(registry: CollectorRegistry, landings: LandingsStatus) -> None:
    """The landing publisher's outbox (``[landings] publish`` on): rows by state, the backlog's oldest landing's
    age, the duplicates known, the attempts of unknown outcome and the landings still of unknown outcome."""
    rows = Gauge("smartsensor_landings", "Landing outbox rows by state", ["state"], registry=registry)
    for state, n in landings.by_state.items():
        rows.labels(state).set(n)
    for name, text, value in (
        ("backlog", "Landings not yet delivered to Airflow", landings.backlog),
        (
            "oldest_undelivered_seconds",
            "Seconds since the oldest landing not yet delivered to Airflow was seen (0: none)",
            landings.oldest_age or 0,
        ),
        ("duplicates", "Asset events Airflow took more than once (known)", landings.duplicates),
        (
            "unknown_outcomes",
            "Posts whose outcome was not known when they ended (timeouts, lapsed claims), each looked up in Airflow "
            "before its landing is posted again",
            landings.unknown_outcomes,
        ),
        (
            "unresolved",
            "Landings of unknown outcome waiting for Airflow to say whether it holds their event (not posted again)",
            landings.unresolved,
        ),
        ("watched_tables", "Tables watched for landings", landings.watched_tables),
    ):
        Gauge(f"smartsensor_landings_{name}", text, registry=registry).set(value)


def _stuck_gauges(registry: CollectorRegistry, stuck: Stuck) -> None:
    """``smartsensor_stuck_tasks{kind}`` and ``smartsensor_stuck_oldest_seconds{kind}`` (0 when none), for the
    kinds of ``service.status.collect_stuck``: after_landing, past_time_limit."""
    tasks = Gauge(
        "smartsensor_stuck_tasks",
        "Smart tasks still waiting past the convergence bound: after their check landed, or past their time limit",
        ["kind"],
        registry=registry,
    )
    late = Gauge(
        "smartsensor_stuck_oldest_seconds",
        "Seconds the most overdue stuck task of a kind is past its due time plus the convergence bound (0: none)",
        ["kind"],
        registry=registry,
    )
    for kind, counted in stuck.kinds():
        tasks.labels(kind).set(counted.count)
        late.labels(kind).set(counted.oldest.late_seconds if counted.oldest else 0)
