"""The exec fields (how a sensor task runs): each one's name, default and bounds, declared once in ``FIELDS``.

Everything else derives from that declaration: ``BaseSensor``'s exec keyword arguments and their defaults and
``BaseSensor.exec_fields`` (``sensors/base.py``), ``ExecSettings`` and what ``parse_exec`` fills in for a missing
key (``smartsensor/domain/timing.py``), and the checks below, run where a value enters (a sensor's constructor)
and where it is read back (``parse_exec``).

Every duration is bounded so that no stored value can overflow a date, a timer or a sleep in a
worker, the scheduler or a classic run: a sensor cannot be registered with one, and a row that
still holds one (written by hand or by an older version) fails alone with this message.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from smartsensor.sensors.errors import SensorDefinitionError

MAX_DURATION = 365 * 24 * 3600.0  # one year: longer waits are a mistake, and stay far from date overflows
MIN_POKE_INTERVAL = 0.1  # below this a classic run would hammer the metastore / file system
MAX_RETRIES = 1000


@dataclass(frozen=True)
class ExecField:
    """One exec field: its name, its default (what a sensor given no value stores in exec_dict, and what
    ``parse_exec`` takes for a missing key) and its kind: a ``duration`` in seconds between ``low`` and
    MAX_DURATION (None allowed when ``nullable``), the ``retries`` count (0..MAX_RETRIES) or a True/False
    ``flag``."""

    name: str
    default: Any
    kind: Literal["duration", "retries", "flag"]
    low: float = 0.0
    nullable: bool = False

    def check(self, value: Any) -> Any:
        """``value`` within this field's bounds (a duration as seconds), or SensorDefinitionError naming it."""
        if self.kind == "duration":
            return duration(self.name, value, self.low, self.nullable)
        if self.kind == "retries":
            return retries(value)
        return flag(self.name, value)


# The one declaration, in BaseSensor's keyword order. Defaults are written as a DAG file would give them (int
# seconds): they are stored as given, so changing one's type would change the stored exec_dict text.
FIELDS: tuple[ExecField, ...] = (
    ExecField("poke_interval", 60, "duration", low=MIN_POKE_INTERVAL),
    ExecField("timeout", 7 * 24 * 3600, "duration"),
    ExecField("execution_timeout", None, "duration", nullable=True),
    ExecField("retries", 0, "retries"),
    ExecField("retry_delay", 300, "duration"),
    ExecField("soft_fail", False, "flag"),
    ExecField("exponential_backoff", False, "flag"),
    ExecField("max_wait", None, "duration", low=MIN_POKE_INTERVAL, nullable=True),
)
BY_NAME: dict[str, ExecField] = {f.name: f for f in FIELDS}
NAMES: tuple[str, ...] = tuple(BY_NAME)
DEFAULTS: dict[str, Any] = {f.name: f.default for f in FIELDS}


def duration(name: str, value: Any, low: float, nullable: bool) -> float | None:
    """A duration in seconds (a number or a ``timedelta``, as Airflow DAG files write them) between ``low`` and
    MAX_DURATION, or None when ``nullable``."""
    if value is None and nullable:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    what = f"a number of seconds or a timedelta between {low:g} s and {MAX_DURATION:.0f} s (365 days)"
    if nullable:
        what += ", or None"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SensorDefinitionError(f"{name} must be {what}, got {_short(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise SensorDefinitionError(f"{name} must be {what}, got {value!r}")
    if not low <= value <= MAX_DURATION:
        raise SensorDefinitionError(f"{name} must be {what}, got {_short(value)}")
    return float(value) if isinstance(value, float) else value


def retries(value: Any) -> int:
    """A retry count: an integer in 0..MAX_RETRIES."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_RETRIES:
        raise SensorDefinitionError(f"retries must be an integer between 0 and {MAX_RETRIES}, got {_short(value)}")
    return value


def flag(name: str, value: Any) -> bool:
    """A True/False exec field."""
    if not isinstance(value, bool):
        raise SensorDefinitionError(f"{name} must be True or False, got {_short(value)}")
    return value


def _short(value: Any) -> str:
    """repr of a value, cut so that a hostile value cannot flood an error message."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"  # str() refuses > 4300 digits
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a hostile __repr__
        text = f"a {type(value).__name__}"
    return text if len(text) <= 80 else text[:77] + "..."
