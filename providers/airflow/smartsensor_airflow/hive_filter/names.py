"""Hive partition names, ``ds=2026-11-22/hr=00`` and ``db.table/ds=2026-11-22``: the one place they are read and
written, shipped by both distributions with the filter grammar (``smartsensor.hive_filter.names`` and
``smartsensor_airflow.hive_filter.names``). Standard library only.

A partition name is ``column=value`` parts joined by ``/``, in the table's partition column order, with Hive's
escaping of special characters in both (``ExternalCatalogUtils.escapePathName``: ``:`` → ``%3A``, ``/`` →
``%2F``…). Listings, the metastore database's ``PART_NAME`` and landing signals all use it, so values are compared
escaped with escaped, or unescaped with unescaped, never one with the other.

What this module does not do is validate: which names and values smartsensor checks is the sensor library's rule
(``smartsensor.sensors.partitions``), and the Airflow provider splits ``db.table/…`` exactly as Airflow's Hive
provider does, its quirks included.
"""

from __future__ import annotations

import re
from typing import Mapping, NamedTuple, Sequence

# The characters Hive escapes in partition names (ExternalCatalogUtils.escapePathName).
ESCAPED = frozenset("\"#%'*/:=?\\{[]^") | {chr(c) for c in range(0x01, 0x20)} | {"\x7f"}
_PERCENT_HEX = re.compile(r"%([0-9A-Fa-f]{2})")

PartitionSpec = dict[str, str]
"""A partition spec: column → value, unescaped (``{"ds": "2026-11-22 10:00"}``)."""


class PartitionNameError(ValueError):
    """Text that is not a Hive partition name (the message says which part)."""


class TableName(NamedTuple):
    """A Hive table: its database and its name (a plain ``(db, table)`` pair compares equal to it)."""

    db: str
    table: str

    def __str__(self) -> str:
        return f"{self.db}.{self.table}"


def escape(text: str) -> str:
    """A column or a value as Hive writes it in a partition name."""
    return "".join(f"%{ord(ch):02X}" if ch in ESCAPED else ch for ch in text)


def unescape(text: str) -> str:
    """Undo Hive's escaping of a column or a value in a partition name."""
    return _PERCENT_HEX.sub(lambda m: chr(int(m.group(1), 16)), text)


def format_spec(spec: Mapping[str, str], columns: Sequence[str] | None = None) -> str:
    """The partition name of ``spec`` (``ds=10%3A00/hr=0``): in ``columns`` order (each must be in ``spec``), else in
    the spec's own order."""
    return "/".join(f"{escape(c)}={escape(spec[c])}" for c in (spec if columns is None else columns))


def parse_spec(text: str) -> list[tuple[str, str]]:
    """``ds=10%3A00/hr=0`` → ``[("ds", "10:00"), ("hr", "0")]``: columns and values unescaped, in the name's order,
    as written (no case folding). Raises PartitionNameError for a part without ``=`` or without a column."""
    parts = []
    for part in text.split("/"):
        column, sep, value = part.partition("=")
        if not sep or not column:
            raise PartitionNameError(f"partition spec part {part!r} is not of the form key=value")
        parts.append((unescape(column), unescape(value)))
    return parts


def split_partition_name(name: str) -> tuple[str, str]:
    """``db.table/ds=1`` → ``("db.table", "ds=1")``: the table text and the spec text, neither checked further.
    Raises PartitionNameError when there is no ``/``."""
    table, sep, spec = name.partition("/")
    if not sep:
        raise PartitionNameError(f"partition name {name!r} must look like 'db.table/key=value[/key=value...]'")
    return table, spec


def format_partition_name(table: TableName, spec: Mapping[str, str]) -> str:
    """``db.table/k=v/…``, the spec in its own order, escaped."""
    return f"{table}/{format_spec(spec)}"
