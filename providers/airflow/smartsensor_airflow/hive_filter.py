"""Airflow's ``HivePartitionSensor.partition`` filter (``ds='2026-11-22' AND hr='00'``) as a partition spec.

Airflow hands that text to the metastore's ``get_partitions_by_filter``. smartsensor checks partition specs
(equalities on partition columns), so only a conjunction of equalities is accepted here; anything else (OR,
ranges, LIKE, functions) is refused with a message that says what to use instead, never guessed at.
"""

from __future__ import annotations

import re

# One `column = literal` term: a plain or back-quoted column, a single- or double-quoted string or an integer.
_TERM = re.compile(
    r"""\s*(?:`(?P<quoted>[^`]+)`|(?P<column>[A-Za-z_][A-Za-z0-9_]*))\s*=\s*
        (?:'(?P<single>[^']*)'|"(?P<double>[^"]*)"|(?P<number>-?[0-9]+))\s*""",
    re.VERBOSE,
)
_AND = re.compile(r"\s+AND\s+", re.IGNORECASE)


class UnsupportedPartitionFilter(ValueError):
    """A filter smartsensor cannot check as partition equalities."""


def parse_partition_filter(text: str) -> dict[str, str]:
    """``"ds='2026-11-22' AND hr=0"`` → ``{"ds": "2026-11-22", "hr": "0"}`` (column names lower-cased, as
    Hive stores them). Empty text means any partition of the table."""
    if not isinstance(text, str):
        raise UnsupportedPartitionFilter(f"partition must be a filter string such as \"ds='2026-11-22'\", got {text!r}")
    if not text.strip():
        return {}
    spec: dict[str, str] = {}
    for term in _split_and(text):
        match = _TERM.fullmatch(term)
        if match is None:
            raise UnsupportedPartitionFilter(
                f"partition filter {text!r}: {term.strip()!r} is not a `column = 'value'` equality; smartsensor "
                f"checks only equalities joined by AND (use NamedHivePartitionSensor for several partitions)"
            )
        column = (match["quoted"] or match["column"]).lower()
        value = next(v for v in (match["single"], match["double"], match["number"]) if v is not None)
        if column in spec and spec[column] != value:
            raise UnsupportedPartitionFilter(f"partition filter {text!r}: column {column!r} is given two values")
        spec[column] = value
    return spec


def _split_and(text: str) -> list[str]:
    """Split on AND outside quotes (a value may contain the word 'and')."""
    terms, start, quote = [], 0, ""
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"`":
            quote = ch
        else:
            m = _AND.match(text, i)
            if m and i > start:
                terms.append(text[start:i])
                start = i = m.end()
                continue
        i += 1
    if quote:
        raise UnsupportedPartitionFilter(f"partition filter {text!r}: unterminated quote")
    terms.append(text[start:])
    return terms
