"""Partition values cast in Python the way Spark's ``CAST(TRY_CAST(v AS type) AS STRING)`` casts them.

The thrift catalog backend has no Spark to cast with, so it normalises check values here: integral types,
boolean and date (the partition column types in use); any other type is reported as unsupported on that
backend. A value the type rejects casts to None, as TRY_CAST gives NULL.
"""

from __future__ import annotations

import datetime
import re

_INT_RANGES = {"tinyint": 8, "smallint": 16, "int": 32, "integer": 32, "bigint": 64}
_INTEGRAL = re.compile(r"[+-]?\d+")
_DATE = re.compile(r"([+-]?\d{4,7})(?:-(\d{1,2})(?:-(\d{1,2})(?:[ T].*)?)?)?", re.DOTALL)
_TRUE = {"t", "true", "y", "yes", "1"}
_FALSE = {"f", "false", "n", "no", "0"}


def python_castable(typ: str) -> bool:
    """Whether ``python_cast`` knows the type (lower-case catalog type name)."""
    return typ in _INT_RANGES or typ in ("boolean", "date")


def _strip(value: str) -> str:
    # Spark trims ASCII whitespace and control characters (code points <= 0x20) before casting.
    return value.strip("".join(chr(c) for c in range(0x21)))


def python_cast(typ: str, value: str) -> str | None:
    """``value`` as Spark stores it in a column of type ``typ``, or None if the type rejects it."""
    text = _strip(value)
    if typ in _INT_RANGES:
        if not _INTEGRAL.fullmatch(text):
            return None
        number, bits = int(text), _INT_RANGES[typ]
        return str(number) if -(2 ** (bits - 1)) <= number < 2 ** (bits - 1) else None
    if typ == "boolean":
        lowered = text.lower()
        return "true" if lowered in _TRUE else "false" if lowered in _FALSE else None
    if typ == "date":
        match = _DATE.fullmatch(text)
        if match is None:
            return None
        year, month, day = (int(g) if g else 1 for g in match.groups())
        try:
            return datetime.date(year, month, day).isoformat()
        except ValueError:
            return None
    raise ValueError(f"no Python cast for type {typ!r}")


def python_cast_all(pairs: set[tuple[str, str]]) -> dict[tuple[str, str], str | None]:
    """Each (type, value) pair's cast value (the partition-types cache's caster without Spark)."""
    return {(typ, value): python_cast(typ, value) for typ, value in pairs}
