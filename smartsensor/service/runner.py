"""What one worker process serves: its shard ranges, leased (``LeasedWorker``) or pinned (``PinnedWorker``), both a
``Runner``; and the Prometheus metrics of its rounds. ``service.worker_loop`` drives a Runner."""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta
from typing import Any, Callable, Protocol

from smartsensor.adapters.sql import signals as signal_sql
from smartsensor.adapters.sql.lease_store import SqlLeaseStore
from smartsensor.adapters.sql.round_store import SqlRoundStore
from smartsensor.config import Config
from smartsensor.ports import CheckAnswerer
from smartsensor.service.leases import LeaseManager
from smartsensor.service.round.poke import catalog_answerer
from smartsensor.service.round.report import RoundResult
from smartsensor.service.round.worker import ShardWorker, run_round

log = logging.getLogger(__name__)

SIGNAL_RETENTION = timedelta(hours=1)


class Runner(Protocol):
    """What a worker loop drives: the ranges one process serves (``LeasedWorker`` or ``PinnedWorker``)."""

    def heartbeat(self) -> dict[str, list[int]]:
        """Renew, claim and release leases (nothing for a pinned range); returns what changed."""
        ...

    def rounds(self) -> list[RoundResult]:
        """One timer round over every range served."""
        ...

    def wake_rounds(self, tables: set[tuple[str, str]], shardcodes: set[int] | None) -> list[RoundResult]:
        """A wake-up round at once: checks on ``tables``, new tasks of ranges holding ``shardcodes`` (None: all)."""
        ...

    def stop(self, keep_rounds: bool = False) -> None:
        """Release what is held; ``keep_rounds``: leave the status rows of the last round."""
        ...


class RoundMetrics:
    """Prometheus gauges/counters of the rounds, served on --metrics-port."""

    def __init__(self, port: int) -> None:
        from prometheus_client import Counter, Gauge, start_http_server

        labels = ["shard_min", "shard_max"]
        self.gauges = {
            name: Gauge(f"smartsensor_round_{name}", f"{name} in the last round", labels)
            for name in (
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
        }
        self.marked = Counter("smartsensor_marked_total", "task instances marked, by new state", labels + ["state"])
        self.rounds = Counter("smartsensor_rounds_total", "rounds run", labels + ["outcome"])
        start_http_server(port, addr="127.0.0.1")

    def observe(self, r: RoundResult) -> None:
        lv = (str(r.shard_min), str(r.shard_max))
        for name, gauge in self.gauges.items():
            gauge.labels(*lv).set(getattr(r, name))
        for state, n in r.marked.items():
            self.marked.labels(*lv, state).inc(n)
        self.rounds.labels(*lv, "error" if r.error else "ok").inc()


class LeasedWorker:
    """A worker without a fixed range: holds whatever shard leases it claims, one ShardWorker per lease."""

    def __init__(
        self, engine: Any, cfg: Config, spark_provider: Callable[[], Any] | None = None, worker_id: str | None = None
    ) -> None:
        self.engine = engine
        self.cfg = cfg
        self.leases = LeaseManager(SqlLeaseStore(engine), cfg, worker_id)
        self.store = SqlRoundStore(engine, cfg.settings.smart_sensor.write_threads)
        self.answerer = catalog_answerer(cfg, spark_provider)
        self.wake_answerer = catalog_answerer(cfg, spark_provider)  # its own metastore client: clients are not shared
        self.workers: dict[int, ShardWorker] = {}
        self._lock = threading.Lock()
        self._last_prune = datetime.min

    @property
    def worker_id(self) -> str:
        return self.leases.worker_id

    def heartbeat(self) -> dict[str, list[int]]:
        """Renew/claim/release leases, then keep one ShardWorker (with the lease's fence) per owned range."""
        changes = self.leases.heartbeat()
        self._prune_signals()
        with self._lock:
            for lo in list(self.workers):
                if lo not in self.leases.owned:
                    del self.workers[lo]
            for lo, lease in self.leases.owned.items():
                w = self.workers.get(lo)
                if w is None:
                    w = ShardWorker(
                        self.store,
                        self.cfg,
                        lease.shard_min,
                        lease.shard_max,
                        worker_id=f"{self.worker_id}:{lease.shard_min}-{lease.shard_max}",
                    )
                    self.workers[lo] = w
                w.fence = lease.fence
        return changes

    def _prune_signals(self) -> None:
        """Signals are hints for the next second; drop those older than SIGNAL_RETENTION."""
        now = datetime.utcnow()
        if now - self._last_prune < SIGNAL_RETENTION / 60:
            return
        self._last_prune = now
        with self.engine.begin() as conn:
            signal_sql.prune_signals(conn, now - SIGNAL_RETENTION)

    def rounds(self) -> list[RoundResult]:
        """One round over every owned range: one catalog call per table for all of them."""
        with self._lock:
            workers = [self.workers[lo] for lo in sorted(self.workers)]
        return [run_round(workers, self.answerer)] if workers else []

    def wake_rounds(self, tables: set[tuple[str, str]], shardcodes: set[int] | None) -> list[RoundResult]:
        """A wake-up round at once, beside any timer round under way: the checks on ``tables`` (landing
        signals) in every owned range, and the new tasks of the ranges holding ``shardcodes`` (None: all)."""
        with self._lock:
            workers = [self.workers[lo] for lo in sorted(self.workers)]
        return _wake_rounds(workers, self.wake_answerer, tables, shardcodes)

    def stop(self, keep_rounds: bool = False) -> None:
        """Clean stop: release every lease at once so others take over without waiting for expiry.

        ``keep_rounds``: leave the status rows of the last round (``worker --once``), so that
        `smartsensor status` shows what the round did.
        """
        with self._lock:
            workers = list(self.workers.values())
            self.workers.clear()
        self.leases.release_all()
        for w in workers if not keep_rounds else ():
            try:
                w.forget()
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass


class PinnedWorker:
    """A worker over a fixed range (``--shard-min/--shard-max``): no lease, no fence."""

    def __init__(
        self,
        worker: ShardWorker,
        answerer: Callable[[], CheckAnswerer],
        wake_answerer: Callable[[], CheckAnswerer] | None = None,
    ) -> None:
        self.worker = worker
        self.answerer = answerer
        self.wake_answerer = wake_answerer or answerer

    def heartbeat(self) -> dict[str, list[int]]:
        return {}

    def rounds(self) -> list[RoundResult]:
        return [run_round([self.worker], self.answerer)]

    def wake_rounds(self, tables: set[tuple[str, str]], shardcodes: set[int] | None) -> list[RoundResult]:
        return _wake_rounds([self.worker], self.wake_answerer, tables, shardcodes)

    def stop(self, keep_rounds: bool = False) -> None:
        if keep_rounds:
            return
        try:
            self.worker.forget()
        except Exception:  # noqa: BLE001 - best effort on the way out
            pass


def _wake_rounds(
    workers: list[ShardWorker],
    answerer: Callable[[], CheckAnswerer],
    tables: set[tuple[str, str]],
    shardcodes: set[int] | None,
) -> list[RoundResult]:
    if tables:  # every range: the checks on these tables, and whatever arrived
        return [run_round(workers, answerer, focus=tables)] if workers else []
    concerned = [w for w in workers if shardcodes is None or any(w.shard_min <= c < w.shard_max for c in shardcodes)]
    return [run_round(concerned, answerer, focus=set())] if concerned else []
