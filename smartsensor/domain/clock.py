"""The one clock: every time the service reads, stores and compares is an aware UTC datetime.

``now`` is the only place that reads the wall clock. The storage seam (``smartsensor.schema.models.UtcDateTime``)
keeps times as naive UTC in the database and hands them back aware, and refuses a naive one on the way in, so
that a naive and an aware time never meet (they would compare unequal, or raise, far from where they were made).
"""

from __future__ import annotations

from datetime import datetime, timezone


class NaiveDatetimeError(ValueError):
    """A datetime without a time zone where an aware UTC one is required."""


def now() -> datetime:
    """The current time, aware UTC."""
    return datetime.now(timezone.utc)


def aware_utc(value: datetime) -> datetime:
    """``value`` in UTC; NaiveDatetimeError when it has no time zone (which zone it meant cannot be known)."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise NaiveDatetimeError(f"naive datetime {value.isoformat()}: an aware UTC datetime is required")
    return value if value.tzinfo is timezone.utc else value.astimezone(timezone.utc)


def as_utc(value: datetime) -> datetime:
    """``value`` in UTC, a naive one read as UTC: for times that come from outside (a command line, a request, a
    DAG file, a stored naive UTC column)."""
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


def naive_utc(value: datetime) -> datetime:
    """An aware datetime as the naive UTC wall time the database stores and the API and CLI print."""
    return aware_utc(value).replace(tzinfo=None)


def iso(value: datetime) -> str:
    """The ISO text of a time as the API and CLI have always printed it: naive UTC, no offset."""
    return naive_utc(value).isoformat()
