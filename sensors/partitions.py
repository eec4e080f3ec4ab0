"""Validation, canonical form and escaping of Hive table names and partition specs.

Values are never pasted into SQL raw: identifiers must match ``[A-Za-z0-9_]+`` and values are
quoted as Spark SQL string literals by ``sql_string_literal``. Partition names themselves (``k=v/…`` with Hive's
escaping) are read and written by the one grammar, ``smartsensor.hive_filter.names``; this module says which of them
smartsensor checks.
"""

from __future__ import annotations

import re

from smartsensor.hive_filter import (
    UnsupportedPartitionFilter,
    is_filter_text,
    names,
    parse_partition_filter,
    split_table,
)
from smartsensor.hive_filter.names import PartitionNameError, TableName, parse_spec, split_partition_name
from smartsensor.sensors.errors import SensorDefinitionError

IDENTIFIER = re.compile(r"[A-Za-z0-9_]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_VALUE_LENGTH = 1000


def validate_identifier(field: str, kind: str, name: object) -> str:
    """A database, table or column name: ``[A-Za-z0-9_]+``, returned lower-cased (Hive is case-insensitive)."""
    if not isinstance(name, str) or not IDENTIFIER.fullmatch(name):
        raise SensorDefinitionError(f"field {field!r}: {kind} name {name!r} must match [A-Za-z0-9_]+")
    return name.lower()


def validate_value(field: str, key: str, value: object) -> str:
    """A partition value: a non-empty string without control characters."""
    if isinstance(value, (int,)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise SensorDefinitionError(f"field {field!r}: value of partition key {key!r} must be a string, got {value!r}")
    if value == "":
        raise SensorDefinitionError(f"field {field!r}: value of partition key {key!r} is empty")
    if _CONTROL.search(value):
        raise SensorDefinitionError(
            f"field {field!r}: value of partition key {key!r} contains a control character: {value!r}"
        )
    if len(value) > MAX_VALUE_LENGTH:
        raise SensorDefinitionError(
            f"field {field!r}: value of partition key {key!r} is longer than {MAX_VALUE_LENGTH}"
        )
    return value


def parse_table(field: str, name: object) -> TableName:
    """``db.table`` or ``table`` (database ``default``) → (db, table), lower-cased and validated."""
    if not isinstance(name, str) or not name:
        raise SensorDefinitionError(f"field {field!r}: table must be a non-empty string 'db.table', got {name!r}")
    try:
        db, table = split_table(name)
    except UnsupportedPartitionFilter:
        raise SensorDefinitionError(f"field {field!r}: table {name!r} must be 'db.table' or 'table'") from None
    return TableName(validate_identifier(field, "database", db), validate_identifier(field, "table", table))


def parse_spec_path(field: str, text: str) -> dict[str, str]:
    """``k=v/k2=v2`` (values escaped as in Hive partition names) → {key: raw value}."""
    try:
        parts = parse_spec(text)
    except PartitionNameError as exc:
        raise SensorDefinitionError(f"field {field!r}: {exc}") from None
    spec: dict[str, str] = {}
    for column, value in parts:
        key = validate_identifier(field, "partition key", column)
        if key in spec:
            raise SensorDefinitionError(f"field {field!r}: partition key {key!r} given twice in {text!r}")
        spec[key] = validate_value(field, key, value)
    return spec


def canonical_spec(field: str, spec: object) -> dict[str, str]:
    """A partition spec dict, ``k=v/k2=v2`` text or a Hive filter (``ds='2026-11-22' AND hr='00'``: text that quotes
    something, read by ``smartsensor.hive_filter``) validated, keys lower-cased, sorted by key."""
    if isinstance(spec, str) and is_filter_text(spec):
        try:
            spec = parse_partition_filter(spec)
        except UnsupportedPartitionFilter as exc:
            raise SensorDefinitionError(f"field {field!r}: {exc}") from None
    if isinstance(spec, str):
        parsed = parse_spec_path(field, spec) if spec else {}
    elif isinstance(spec, dict):
        parsed = {}
        for key, value in spec.items():
            k = validate_identifier(field, "partition key", key)
            if k in parsed:
                raise SensorDefinitionError(
                    f"field {field!r}: partition key {k!r} given twice (keys are case-insensitive)"
                )
            parsed[k] = validate_value(field, k, value)
    else:
        raise SensorDefinitionError(f"field {field!r}: partition spec must be a dict or 'k=v/k2=v2', got {spec!r}")
    return dict(sorted(parsed.items()))


def parse_partition_name(field: str, name: object) -> tuple[str, str, dict[str, str]]:
    """``db.table/k=v/...`` → (db, table, spec). A name without ``db.`` means database ``default``."""
    if not isinstance(name, str):
        raise SensorDefinitionError(f"field {field!r}: partition name {name!r} must be a string 'db.table/key=value'")
    try:
        table_part, spec_part = split_partition_name(name)
    except PartitionNameError as exc:
        raise SensorDefinitionError(f"field {field!r}: {exc}") from None
    db, table = parse_table(field, table_part)
    if not spec_part:
        raise SensorDefinitionError(f"field {field!r}: partition name {name!r} has no key=value spec")
    return db, table, dict(sorted(parse_spec_path(field, spec_part).items()))


def format_partition_name(db: str, table: str, spec: dict[str, str]) -> str:
    """Canonical ``db.table/k=v/...`` with escaped values."""
    return names.format_partition_name(TableName(db, table), spec)


def sql_string_literal(value: str) -> str:
    """Quote a value as a Spark SQL string literal (backslash escapes are on by default)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def quote_identifier(name: str) -> str:
    """Backtick-quote an identifier already validated by ``validate_identifier``."""
    if not IDENTIFIER.fullmatch(name):
        raise SensorDefinitionError(f"refusing to quote unvalidated identifier {name!r}")
    return f"`{name}`"
