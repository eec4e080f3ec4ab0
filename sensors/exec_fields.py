"""Bounds of the exec fields (how a sensor task runs), checked where a value enters and where it is read back.

Every duration is bounded so that no stored value can overflow a date, a timer or a sleep in a
worker, the scheduler or a classic run: a sensor cannot be registered with one, and a row that
still holds one (written by hand or by an older version) fails alone with this message.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from smartsensor.sensors.errors import SensorDefinitionError

MAX_DURATION = 365 * 24 * 3600.0  # one year: longer waits are a mistake, and stay far from date overflows
MIN_POKE_INTERVAL = 0.1  # below this a classic run would hammer the metastore / file system
MAX_RETRIES = 1000

# field -> (lowest allowed, None allowed)
DURATION_FIELDS: dict[str, tuple[float, bool]] = {
    "poke_interval": (MIN_POKE_INTERVAL, False),
    "timeout": (0.0, False),
    "execution_timeout": (0.0, True),
    "retry_delay": (0.0, False),
    "max_wait": (MIN_POKE_INTERVAL, True),
}
FLAG_FIELDS = ("soft_fail", "exponential_backoff")


def duration(name: str, value: Any) -> float | None:
    """A duration in seconds (a number or a ``timedelta``, as Airflow DAG files write them), within bounds."""
    low, nullable = DURATION_FIELDS[name]
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


def exec_value(name: str, value: Any) -> Any:
    """Validate one stored or given exec field value by its name (unknown names pass unchanged)."""
    if name in DURATION_FIELDS:
        return duration(name, value)
    if name == "retries":
        return retries(value)
    if name in FLAG_FIELDS:
        return flag(name, value)
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
