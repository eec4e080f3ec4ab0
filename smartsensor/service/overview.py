"""What the status page shows: ``collect_status`` (its numbers, one source of truth with `status --json`) plus
the history of tasks by state, the waiting tasks per table and the recent landings."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta
from typing import Any, Iterable

from smartsensor.config import Config
from smartsensor.domain import clock
from smartsensor.ports import OverviewReads, StatusReads
from smartsensor.service.status import collect_status
from smartsensor.service.status_report import StatusReport

MAX_BUCKETS = 1440  # the chart's window: at most this many history buckets (a day at the default 60 s)
TOP_TABLES = 20
LANDINGS = 20


def collect_overview(
    reads: OverviewReads,
    status_reads: StatusReads,
    cfg: Config,
    now: datetime | None = None,
    status: StatusReport | None = None,
) -> dict[str, Any]:
    """Everything the page shows: ``status`` (exactly ``collect_status``'s ``StatusReport``, or the one given: the
    server's shared snapshot), ``history`` [(time, {state: n})…] ending with the current counts, ``tables``
    [(label, waiting)…] (top 20), ``landings`` and the history settings (7 + 3 statements)."""
    now = now or clock.now()
    status = status or collect_status(status_reads, cfg, now)
    interval, retention = cfg.settings.api.history_interval, cfg.settings.api.history_retention
    since = now - timedelta(seconds=min(retention, MAX_BUCKETS * interval))
    samples, checks, landings = reads.read_overview(since, LANDINGS)
    history = series(samples)
    history.append((now, dict(status.tasks_by_state)))
    tables = waiting_per_table(checks)
    return {
        "status": status,
        "history": history,
        "samples": len(history) - 1,
        "tables": tables[:TOP_TABLES],
        "table_count": len(tables),
        "landings": [
            {
                "end_date": r["end_date"],
                "dag_id": r["dag_id"],
                "task_id": r["task_id"],
                "execution_date": r["execution_date"],
                "waited_for": waited_for(r["operator"], r["attr_dict"]),
            }
            for r in landings
        ],
        "history_interval": interval,
        "history_retention": retention,
        "now": now,
    }


def series(samples: Iterable[tuple[datetime, str, int]]) -> list[tuple[datetime, dict[str, int]]]:
    """Rows (bucket_at, state, count), ordered by bucket, as [(bucket_at, {state: count})…]."""
    out: list[tuple[datetime, dict[str, int]]] = []
    for bucket, state, n in samples:
        if not out or out[-1][0] != bucket:
            out.append((bucket, {}))
        out[-1][1][state] = n
    return out


def _attrs(attr_dict: str | None) -> dict[str, Any]:
    try:
        value = json.loads(attr_dict) if attr_dict else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def tables_of(attrs: dict[str, Any]) -> list[str]:
    """The ``db.table`` names a partition sensor's fields name (``partition_names`` or ``table``), each once."""
    names = attrs.get("partition_names")
    if isinstance(names, list):
        return sorted({n.split("/", 1)[0] for n in names if isinstance(n, str) and n})
    table = attrs.get("table")
    return [table] if isinstance(table, str) and table else []


def waiting_per_table(checks: Iterable[tuple[str | None, str | None, int]]) -> list[tuple[str, int]]:
    """Waiting tasks per table, most first, from (operator, attr_dict, tasks) per distinct check; a task counts
    once for each table it waits on. A check that names no table counts under its class: ``(SuccessFileSensor)``."""
    counts: Counter[str] = Counter()
    for operator, attr_dict, n in checks:
        for label in tables_of(_attrs(attr_dict)) or [f"({operator or 'unknown class'})"]:
            counts[label] += n
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def waited_for(operator: str | None, attr_dict: str | None, limit: int = 160) -> str:
    """One line saying what a task waited for: its partitions, its table and spec, its path, or its fields."""
    attrs = _attrs(attr_dict)
    names = attrs.get("partition_names")
    if isinstance(names, list) and names:
        text = ", ".join(str(n) for n in names)
    elif isinstance(attrs.get("table"), str):
        spec = attrs.get("partition") or {}
        parts = "/".join(f"{k}={v}" for k, v in spec.items()) if isinstance(spec, dict) else str(spec)
        text = attrs["table"] + (f" ({parts})" if parts else " (any partition)")
    elif isinstance(attrs.get("path"), str):
        text = attrs["path"]
    else:
        text = f"{operator or '?'} {json.dumps(attrs, sort_keys=True)}" if attrs else (operator or "?")
    return text if len(text) <= limit else text[: limit - 1] + "…"
