"""The status page's tests: a database with something to show, and reading the page's HTML back: its
machine-readable numbers (``data-metric``, ``data-lease``…), in the same shape as the numbers of
``status --json`` that they must equal, and its external references."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from html.parser import HTMLParser
from typing import Any

from sqlalchemy import text

from smartsensor.adapters.sql import leases as lease_sql, status as status_sql
from smartsensor.adapters.sql.registration_store import SqlRegistrationStore
from smartsensor.standalone.registration import register
from tests.support.common import DAY, named


def populate_page_db(cfg: Any, engine: Any) -> datetime:
    """Tasks in several states (one stranded, some stuck after their check landed an hour ago), two leases (one
    expired), a worker and its failed last round. Nothing in it changes with the clock for an hour."""
    register(
        SqlRegistrationStore(engine),
        [(f"d{i}", named(f"w{j}", f"db{i % 2}.t{j}/ds={{{{ ds }}}}")) for i in range(6) for j in range(3)],
        DAY,
        cfg,
    )
    now = datetime.now(timezone.utc)
    landed, waits_since = now - timedelta(hours=1), now - timedelta(hours=2)
    with engine.begin() as conn:
        # The landing is an hour old and the other tasks of its checks wait since before it: they count as stuck
        # after landing from the start, not only once the convergence bound has passed while a test runs.
        conn.execute(text("UPDATE task_instance SET updated_at = :w"), {"w": waits_since})
        conn.execute(
            text("UPDATE task_instance SET state = 'success', end_date = :e WHERE dag_id IN ('d0', 'd1')"),
            {"e": landed},
        )
        conn.execute(text("UPDATE task_instance SET state = 'failed' WHERE dag_id = 'd2' AND task_id = 'w0'"))
        conn.execute(text("UPDATE task_instance SET state = 'scheduled' WHERE dag_id = 'd2' AND task_id = 'w1'"))
        conn.execute(text("UPDATE task_instance SET shardcode = 99999 WHERE dag_id = 'd3' AND task_id = 'w0'"))
        lease_sql.ensure_leases(conn, cfg.resolved_shard_ranges)
        lease_sql.claim_lease(conn, 0, 0, "host-a:1:aa", now, now + timedelta(hours=1))
        lease_sql.claim_lease(conn, 5000, 0, "host-b:2:bb", now - timedelta(minutes=5), now - timedelta(minutes=1))
        lease_sql.upsert_worker(conn, "host-a:1:aa", "host-a", 1, now, now)
        status_sql.record_round(
            conn,
            "host-a:1:aa",
            "host-a",
            1,
            0,
            2500,
            now,
            0.25,
            json.dumps({"loaded": 5, "error": "metastore unreachable"}),
        )
    return now


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.elements: list[dict[str, str]] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.elements.append({k: v or "" for k, v in attrs})


def _elements(html: str) -> tuple[list[dict[str, str]], list[str]]:
    parser = _Collector()
    parser.feed(html)
    return parser.elements, parser.tags


def page_numbers(html: str) -> dict[str, Any]:
    """What the page states, by its data attributes."""
    elements, _ = _elements(html)
    metrics = {e["data-metric"]: json.loads(e["data-value"]) for e in elements if "data-metric" in e}
    return {
        "metrics": metrics,
        "shards": [
            {
                "min": int(e["data-shard"]),
                "max": int(e["data-shard-max"]),
                "waiting": int(e["data-waiting"]),
                "distinct_hashes": int(e["data-distinct"]),
            }
            for e in elements
            if "data-shard" in e
        ],
        "leases": [
            {
                "shard_min": int(e["data-lease"]),
                "shard_max": int(e["data-lease-max"]),
                "owner": e["data-owner"] or None,
                "epoch": int(e["data-epoch"]),
                "expired": json.loads(e["data-expired"]),
            }
            for e in elements
            if "data-lease" in e
        ],
        "workers": [
            {
                "range_rounds_id": e["data-worker"],
                "shard_min": int(e["data-shard-min"]),
                "shard_max": int(e["data-shard-max"]),
                "last_round_seconds": json.loads(e["data-last-round-seconds"]),
            }
            for e in elements
            if "data-worker" in e
        ],
        "lease_workers": [
            {
                "worker_id": e["data-live-worker"],
                "stale": json.loads(e["data-stale"]),
                "ranges": json.loads(e["data-ranges"]),
            }
            for e in elements
            if "data-live-worker" in e
        ],
        "problems": sum(1 for e in elements if "data-problem" in e),
        "zombies": sum(1 for e in elements if "data-zombie" in e),
    }


def status_numbers(status: dict[str, Any]) -> dict[str, Any]:
    """The same shape from ``status --json`` (ages and expiry countdowns left out: they move with the clock)."""
    metrics = {f"tasks_by_state.{state}": n for state, n in status["tasks_by_state"].items()}
    metrics.update({k: status[k] for k in ("waiting", "distinct_hashes", "dedup_ratio", "stranded")})
    metrics.update(zombies=len(status["zombies"]), problems=len(status["problems"]))
    return {
        "metrics": metrics,
        "shards": status["shards"],
        "leases": [
            {k: lease[k] for k in ("shard_min", "shard_max", "owner", "epoch", "expired")} for lease in status["leases"]
        ],
        "workers": [
            {k: w[k] for k in ("range_rounds_id", "shard_min", "shard_max", "last_round_seconds")}
            for w in status["workers"]
        ],
        "lease_workers": [{k: w[k] for k in ("worker_id", "stale", "ranges")} for w in status["lease_workers"]],
        "problems": len(status["problems"]),
        "zombies": len(status["zombies"]),
    }


EXTERNAL = re.compile(r"(?:https?:)?//[A-Za-z0-9.-]+", re.IGNORECASE)


def external_references(html: str) -> list[str]:
    """Every reference the page makes outside itself: src/href/action/xlink:href values and CSS url(…) or
    @import that name another host, any <script>, <link> or <iframe>, and any http:// or https:// at all."""
    elements, tags = _elements(html)
    found = [f"<{t}>" for t in tags if t in ("script", "link", "iframe", "object", "embed", "img")]
    for e in elements:
        found += [
            f"{k}={v}"
            for k, v in e.items()
            if k in ("src", "href", "action", "xlink:href", "srcset") and EXTERNAL.match(v.strip())
        ]
    found += re.findall(r"url\(\s*['\"]?(?:https?:)?//[^)]*\)|@import[^;]*", html, re.IGNORECASE)
    found += re.findall(r"https?://\S{0,40}", html, re.IGNORECASE)
    return found
