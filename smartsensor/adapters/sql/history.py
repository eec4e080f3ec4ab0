"""Samples of tasks by state over time (``state_sample``): written by ``smartsensor serve``, read by its page.

``write_sample`` and ``delete_samples_before`` are the sampler's operations, each in a transaction of its own; the
functions on a ``Connection`` are the statements they (and the page's ``overview.read_overview``) are made of."""

from __future__ import annotations

from datetime import datetime
from typing import Mapping

from sqlalchemy import Connection, Engine, delete, insert, select

from smartsensor.adapters.sql import status as status_sql
from smartsensor.schema.models import state_sample as SS


def bucket_written(conn: Connection, bucket_at: datetime) -> bool:
    """Whether any server already wrote the sample of ``bucket_at`` (1 statement)."""
    return conn.execute(select(SS.c.state).where(SS.c.bucket_at == bucket_at).limit(1)).first() is not None


def insert_sample(conn: Connection, bucket_at: datetime, counts: Mapping[str, int]) -> None:
    """One row per state for ``bucket_at`` (1 statement; IntegrityError if another server wrote the bucket)."""
    if counts:
        conn.execute(
            insert(SS), [{"bucket_at": bucket_at, "state": state, "count": n} for state, n in sorted(counts.items())]
        )


def prune_samples(conn: Connection, before: datetime) -> int:
    """Delete the samples of buckets before ``before``; how many rows went (1 statement)."""
    return conn.execute(delete(SS).where(SS.c.bucket_at < before)).rowcount


def load_samples(conn: Connection, since: datetime) -> list[tuple[datetime, str, int]]:
    """(bucket_at, state, count) of every bucket from ``since`` on, oldest first (1 statement)."""
    return [
        (b, s, n)
        for b, s, n in conn.execute(
            select(SS.c.bucket_at, SS.c.state, SS.c.count)
            .where(SS.c.bucket_at >= since)
            .order_by(SS.c.bucket_at, SS.c.state)
        )
    ]


def write_sample(engine: Engine, bucket_at: datetime) -> bool:
    """In one transaction: unless a server already wrote the sample of ``bucket_at``, count the tasks by state and
    write them as that sample. True when written here, False when it was there already. 1 statement when it was,
    else 3 (2 with no task to count); IntegrityError if another server wrote the bucket between the read and the
    insert."""
    with engine.begin() as conn:
        if bucket_written(conn, bucket_at):
            return False
        insert_sample(conn, bucket_at, status_sql.count_by_state(conn))
        return True


def delete_samples_before(engine: Engine, before: datetime) -> int:
    """``prune_samples`` in a transaction of its own; how many rows went (1 statement)."""
    with engine.begin() as conn:
        return prune_samples(conn, before)
