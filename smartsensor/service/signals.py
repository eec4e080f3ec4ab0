"""Landing signals: a pipeline says "partition X just landed" and the owning worker checks at once.

A signal is only a hint: the worker still verifies in the metastore before marking anything. It is
recorded in ``partition_signal``; on Postgres a NOTIFY on ``channels.SIGNAL_CHANNEL`` wakes listeners immediately, on
SQLite listeners poll the table every ``poll_interval`` seconds: both through the process's one
``adapters.sql.notifications.NotificationHub``, which a worker also subscribes to ``channels.PENDING_CHANNEL`` (new
pending tasks) and ``serve`` to ``channels.ENDED_CHANNEL``.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from smartsensor.adapters.sql import channels as channel_sql
from smartsensor.domain import clock
from smartsensor.hive_filter.names import TableName
from smartsensor.ports import LandingSignals
from smartsensor.sensors.partitions import format_partition_name, parse_partition_name

log = logging.getLogger(__name__)

SIGNAL_RETENTION = timedelta(hours=1)  # signals are hints for the next second; older ones are pruned


def canonical_signal(name: str) -> tuple[str, TableName]:
    """Validate ``db.table/k=v/...`` and return (canonical name, (db, table))."""
    db, table, spec = parse_partition_name("signal", name)
    return format_partition_name(db, table, spec), TableName(db, table)


def send_signal(signals: LandingSignals, name: str) -> str:
    """Record a landing signal (and NOTIFY on Postgres, delivered at commit). Returns the canonical name."""
    canonical, _ = canonical_signal(name)
    signals.record(canonical, clock.now())
    return canonical


def prune_old_signals(signals: LandingSignals, now: datetime) -> None:
    """Drop the landing signals older than ``SIGNAL_RETENTION`` (1 statement)."""
    signals.delete_before(now - SIGNAL_RETENTION)


def signalled_tables(names: list[str]) -> set[TableName]:
    """The tables of landing signals' partition names (``SIGNAL_CHANNEL``'s payloads); a malformed one is logged
    and ignored."""
    tables = set()
    for name in names:
        try:
            tables.add(canonical_signal(name)[1])
        except ValueError:
            log.warning("ignoring malformed signal %r", name)
    return tables


def pending_shards(payloads: list[str]) -> set[int] | None:
    """The shardcodes ``PENDING_CHANNEL``'s payloads name together; None when one of them may be any."""
    shards: set[int] = set()
    for payload in payloads:
        codes = channel_sql.pending_shardcodes(payload)
        if codes is None:
            return None
        shards |= codes
    return shards
