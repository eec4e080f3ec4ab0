"""The metastore's own load per round, for scripts/bench/bench.py: what its database executed, from
``pg_stat_statements``, when the metastore service keeps its tables on PostgreSQL (``--metastore postgresql``).

A round's load is the difference of two snapshots of ``pg_stat_statements`` summed over the metastore's database:
statements executed (``calls``; BEGIN/ROLLBACK, SET and a pool's ``SELECT 1`` ping included, as utility statements
are tracked), ``total_exec_time`` and ``total_plan_time`` in ms (wall time inside the executor and planner: on a
busy host it includes waiting for a core; parsing is in neither, and our statement's arrays arrive as literals, so
parsing them is not small). On the thrift strategies that is the metastore service's own JDBC work for the round's
listings; on ``metastore-db`` it is our statement. Beside it, the CPU time (user + system, from /proc) of the server
processes of that database's sessions over the round: everything they did, parsing included, and not inflated by a
busy host (10 ms ticks; only when the server runs on this host, as with ``bench.sh --postgres``). The snapshots are
read on one autocommit connection of their own to that database, and leave themselves out. And, on any database,
the CPU time of the metastore service's own process (its JVM, every thread) over the round: on thrift, the work of
answering the calls; on ``metastore-db``, none of ours.

The server must load the library at start (``shared_preload_libraries = pg_stat_statements``: ``./scripts/bench.sh
--postgres`` sets it, with ``track_planning``). Without it the bench says so and prints no DB time.

Also here: the listing statement of ``metastore-db``'s last round under ``EXPLAIN (ANALYZE, BUFFERS)`` (``--profile``):
``RecordingMetastoreDbCatalog`` keeps the statement and its array parameters.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from scripts.harness.usage import cpu_ticks
from smartsensor.adapters.catalog.metastore_db import MetastoreDbCatalog
from smartsensor.adapters.catalog.partition_feed import PartitionFeed
from smartsensor.adapters.sql.engine import normalize_url

# One statement: the sums over the database's statements (this one left out: its text names the view), and the
# server processes of the database's other sessions (the metastore service's JDBC pool, our catalog's pool).
_SNAPSHOT = text(
    """
    SELECT coalesce(sum(s.calls), 0), coalesce(sum(s.total_exec_time), 0), coalesce(sum(s.total_plan_time), 0),
        ARRAY(SELECT a.pid FROM pg_stat_activity a WHERE a.datname = current_database() AND a.pid <> pg_backend_pid())
    FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
    WHERE d.datname = current_database() AND s.query NOT LIKE '%pg_stat_statements%'
    """
)
_TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Snapshot:
    statements: int | None  # None: no pg_stat_statements (the metastore is not on PostgreSQL, or no library)
    exec_ms: float | None
    plan_ms: float | None
    cpu_ticks: dict[int, int] | None  # the database's server processes → user + system CPU ticks
    service_ticks: int | None  # the metastore service's (its JVM, every thread)


def process_cpu_ticks(pids: list[int]) -> dict[int, int] | None:
    """User + system CPU ticks of each process, from /proc (None when one cannot be read: another host)."""
    out = {}
    for pid in pids:
        try:
            out[pid] = cpu_ticks(pid)
        except OSError:
            return None
    return out


class MetastoreLoad:
    """Snapshots of the metastore's own work: what its PostgreSQL database executed (``unavailable``: why not) and
    the CPU time of its service's process (``service_pid``, any database)."""

    def __init__(self, url: str | None, service_pid: int | None = None) -> None:
        self.unavailable: str | None = None
        self.service_pid = service_pid
        self._conn: Any = None
        self._engine: Any = None
        if url is None:
            self.unavailable = "the metastore's database is not PostgreSQL"
            return
        self._engine = create_engine(normalize_url(url), isolation_level="AUTOCOMMIT", poolclass=NullPool)
        try:
            self._conn = self._engine.connect()  # one session for the whole run, no transaction held
            self._conn.execute(text("CREATE EXTENSION IF NOT EXISTS pg_stat_statements"))
            self._conn.execute(_SNAPSHOT).all()  # fails unless the server preloads the library
        except Exception as exc:  # noqa: BLE001 - the bench runs on without DB times, saying why
            reason = str(exc).strip().splitlines()[0]
            self.unavailable = f"pg_stat_statements unavailable (in shared_preload_libraries?): {reason}"
            self.close()

    def snapshot(self) -> Snapshot:
        service = process_cpu_ticks([self.service_pid]) if self.service_pid else None
        service_ticks = service[self.service_pid] if service and self.service_pid else None
        if self._conn is None:
            return Snapshot(None, None, None, None, service_ticks)
        calls, exec_ms, plan_ms, pids = self._conn.execute(_SNAPSHOT).one()
        return Snapshot(int(calls), float(exec_ms), float(plan_ms), process_cpu_ticks(pids), service_ticks)

    @staticmethod
    def delta(before: Snapshot, after: Snapshot) -> dict[str, Any]:
        """The metastore's work between two snapshots (a figure that could not be read: None)."""
        cpu = None
        if before.cpu_ticks is not None and after.cpu_ticks is not None:  # a session that ended meanwhile: lost
            ticks = sum(t - before.cpu_ticks.get(pid, 0) for pid, t in after.cpu_ticks.items())
            cpu = round(ticks * _TICK_MS, 1)
        service = None
        if before.service_ticks is not None and after.service_ticks is not None:
            service = round((after.service_ticks - before.service_ticks) * _TICK_MS, 1)

        def diff(name: str, digits: int) -> Any:
            a, b = getattr(after, name), getattr(before, name)
            return None if a is None or b is None else round(a - b, digits)

        return {
            "statements": diff("statements", 0),
            "exec_ms": diff("exec_ms", 3),
            "plan_ms": diff("plan_ms", 3),
            "backend_cpu_ms": cpu,
            "service_cpu_ms": service,
        }

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None


class RecordingMetastoreDbCatalog(MetastoreDbCatalog):
    """The product's MetastoreDbCatalog, keeping the last statement it sent and its parameters (for EXPLAIN)."""

    last: tuple[str, dict[str, Any]] | None = None  # the kind of statement (MetastoreDbCatalog.statement), params

    @classmethod
    def open(cls, url: str, timeout: float, feed: PartitionFeed | None = None) -> RecordingMetastoreDbCatalog:
        """As ``MetastoreDbCatalog.from_url`` (the product's engine settings), recording."""
        return cls(MetastoreDbCatalog.from_url(url, timeout).engine, feed)

    def _rows(self, kind: str, what: str, **params: Any) -> list[Any]:
        self.last = (kind, params)
        return super()._rows(kind, what, **params)

    def explain_last(self) -> str:
        """``EXPLAIN (ANALYZE, BUFFERS)`` of the last statement, run again with the same parameters."""
        if self.last is None:
            return "(no statement yet)"
        kind, params = self.last
        with self.engine.connect() as conn:
            rows = conn.execute(text("EXPLAIN (ANALYZE, BUFFERS) " + self.statement(kind).text), params)
            return "\n".join(r[0] for r in rows)
