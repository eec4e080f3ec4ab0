"""The Prometheus metrics of a worker's rounds, served on ``worker --metrics-port``."""

from __future__ import annotations

from smartsensor.service.round.report import RoundResult

# The RoundResult fields published as gauges (of the last round, per range).
GAUGES = (
    "loaded",
    "distinct_hashes",
    "groups_poked",
    "catalog_calls",
    "schema_calls",
    "db_statements",
    "seconds",
    "transient_errors",
    "reconciled",  # waiting tasks a reconciliation found missing from the index: changes from outside
)


class RoundMetrics:
    """Gauges of the last round and counters of marks and rounds, labelled by shard range."""

    def __init__(self, port: int) -> None:
        from prometheus_client import Counter, Gauge, start_http_server

        labels = ["shard_min", "shard_max"]
        self.gauges = {name: Gauge(f"smartsensor_round_{name}", f"{name} in the last round", labels) for name in GAUGES}
        self.marked = Counter("smartsensor_marked_total", "task instances marked, by new state", labels + ["state"])
        self.rounds = Counter("smartsensor_rounds_total", "rounds run", labels + ["outcome"])
        start_http_server(port, addr="127.0.0.1")

    def observe(self, r: RoundResult) -> None:
        """Publish one round's result."""
        lv = (str(r.shard_min), str(r.shard_max))
        for name, gauge in self.gauges.items():
            gauge.labels(*lv).set(getattr(r, name))
        for state, n in r.marked.items():
            self.marked.labels(*lv, state).inc(n)
        self.rounds.labels(*lv, "error" if r.error else "ok").inc()
