"""Prometheus metrics of the whole installation, computed from what ``status`` reads (no state in the server)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Gauge, generate_latest


def render_metrics(status: dict[str, Any]) -> bytes:
    """Prometheus text for one status snapshot (``service.status.collect_status``)."""
    registry = CollectorRegistry()
    tasks = Gauge("smartsensor_tasks", "Task instances by state", ["state"], registry=registry)
    for state, n in status["tasks_by_state"].items():
        tasks.labels(state).set(n)
    Gauge("smartsensor_waiting_distinct_checks", "Distinct checks the waiting tasks share",
          registry=registry).set(status["distinct_hashes"])
    Gauge("smartsensor_dedup_ratio", "Waiting tasks per distinct check (0: nothing waits)",
          registry=registry).set(status["dedup_ratio"] or 0)
    Gauge("smartsensor_stranded_tasks", "Waiting tasks whose shardcode no range serves",
          registry=registry).set(status["stranded"])
    Gauge("smartsensor_zombie_runs", "Classic runs that stopped heartbeating", registry=registry).set(
        len(status["zombies"]))
    held = Gauge("smartsensor_shard_leases", "Shard leases by holder state", ["held"], registry=registry)
    held.labels("yes").set(sum(1 for lease in status["leases"] if lease["owner"] and not lease["expired"]))
    held.labels("no").set(sum(1 for lease in status["leases"] if not lease["owner"] or lease["expired"]))
    Gauge("smartsensor_live_workers", "Leased worker processes whose heartbeat is fresh", registry=registry).set(
        sum(1 for w in status["lease_workers"] if not w["stale"]))
    Gauge("smartsensor_problems", "WARNINGs `status` prints", registry=registry).set(len(status["problems"]))
    return generate_latest(registry)
