"""Hive's partition filter grammar, and the ``db.table`` rule of Airflow's Hive sensors: the one place they are read.

Two distributions ship this one file: the provider, as ``smartsensor_airflow.hive_filter``, and smartsensor itself,
as ``smartsensor.hive_filter`` (``package_dir`` in setup.cfg). The service's ``airflow report``, the sensor library
and the provider all read filters through it, so they cannot disagree. It imports nothing but the standard library.

Airflow's ``HivePartitionSensor`` hands its ``partition`` text to the metastore's ``get_partitions_by_filter``, whose
grammar (the metastore's ``Filter.g``) has string literals in single or double quotes (no escapes), integral
numbers, AND/OR, comparison operators and back-quoted identifiers. smartsensor checks partition specs (equalities
on partition columns), so a filter becomes a spec only when it is a conjunction of ``column = literal`` terms that
names partitions exactly. Anything else is refused with the reason, never guessed at; a caller with a classic path
(the provider) takes it, so the task waits as Airflow's own sensor would:

- OR, ranges, LIKE, IN, parentheses, functions, a column given two values;
- a literal Hive's grammar does not have (``hr=1.5``: the metastore refuses it too);
- a number that does not name one value (``hr=07``: the metastore reads the number 7);
- a column name smartsensor cannot check (`` `my col` ``: only ``[A-Za-z0-9_]+``), an empty value.
"""

from __future__ import annotations

import re
from typing import NamedTuple

# Hive's lexer, in the order it tries: blanks, quoted strings (no escapes), back-quoted identifiers, integral
# numbers (a decimal is lexed whole, to be refused by name), words (identifiers and keywords), operators.
_TOKEN = re.compile(
    r"""(?P<blank>[ \t\r\n]+)
      | (?P<string>'[^']*'|"[^"]*")
      | (?P<quoted>`[^`]*`)
      | (?P<number>-?[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?(?![A-Za-z_]))
      | (?P<word>[A-Za-z0-9_]+)
      | (?P<operator><=|>=|<>|!=|=|<|>)
      | (?P<other>.)""",
    re.VERBOSE | re.DOTALL,
)
_CHECKABLE_COLUMN = re.compile(r"[A-Za-z0-9_]+")
_HIVE_IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_]*")
_INTEGRAL = re.compile(r"-?[0-9]+")
QUOTES = "'\"`"


class UnsupportedPartitionFilter(ValueError):
    """A filter or table name smartsensor cannot check as partition equalities (the message says why)."""


class _Token(NamedTuple):
    kind: str
    text: str
    start: int
    end: int


def parse_partition_filter(text: object) -> dict[str, str]:
    """``"ds='2026-11-22' AND hr=0"`` → ``{"ds": "2026-11-22", "hr": "0"}`` (column names lower-cased, as Hive
    stores them; values as written between the quotes). Empty text means any partition of the table. Raises
    UnsupportedPartitionFilter, with the reason, for any filter that is not such a conjunction."""
    if not isinstance(text, str):
        raise UnsupportedPartitionFilter(f"partition must be a filter string such as \"ds='2026-11-22'\", got {text!r}")
    spec: dict[str, str] = {}
    for term in _terms(text, _tokens(text)):
        column, value = _equality(text, term)
        if column in spec and spec[column] != value:
            raise UnsupportedPartitionFilter(f"partition filter {text!r}: column {column!r} is given two values")
        spec[column] = value
    return spec


def is_filter_text(text: str) -> bool:
    """Whether a partition text is written in the filter syntax (it quotes something), not as a partition name
    ``k=v/k2=v2`` (where Hive escapes quotes as ``%27``, ``%22``)."""
    return any(quote in text for quote in QUOTES)


def filter_text(text: str) -> str:
    """A filter's tokens one space apart (its blanks collapsed, when it does not lex): two filters that differ only in
    blanks outside their quotes have one text."""
    try:
        return " ".join(token.text for token in _tokens(text))
    except UnsupportedPartitionFilter:
        return " ".join(text.split())


def split_table(table: object, schema: object = None) -> tuple[str, str]:
    """``db.table`` (the dot wins over ``schema``, as Airflow's Hive sensors split it) or ``table`` in ``schema``
    (none: ``default``) → (database, table), as written. Raises UnsupportedPartitionFilter for anything else."""
    if not isinstance(table, str) or not table:
        raise UnsupportedPartitionFilter(f"table must be a non-empty string 'db.table' or 'table', got {table!r}")
    parts = table.split(".")
    if len(parts) == 1:
        return (schema if isinstance(schema, str) and schema else "default"), table
    if len(parts) == 2 and all(parts):
        return parts[0], parts[1]
    raise UnsupportedPartitionFilter(f"table {table!r} must be 'db.table' or 'table'")


def _tokens(text: str) -> list[_Token]:
    out = []
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup or "other"
        if kind == "other" and match.group() in QUOTES:
            raise UnsupportedPartitionFilter(f"partition filter {text!r}: unterminated quote")
        if kind != "blank":
            out.append(_Token(kind, match.group(), match.start(), match.end()))
    return out


def _terms(text: str, tokens: list[_Token]) -> list[list[_Token]]:
    """The tokens between ANDs (none at all: no term)."""
    if not tokens:
        return []
    terms: list[list[_Token]] = [[]]
    for token in tokens:
        if token.kind == "word" and token.text.upper() == "AND":
            terms.append([])
        else:
            terms[-1].append(token)
    return terms


def _equality(text: str, term: list[_Token]) -> tuple[str, str]:
    """One ``column = literal`` term as (column, value)."""
    source = text[term[0].start : term[-1].end] if term else ""
    if len(term) != 3 or term[0].kind not in ("word", "quoted") or term[1].text != "=":
        raise _not_an_equality(text, source)
    return _column(text, term[0]), _value(text, term[2], source)


def _column(text: str, token: _Token) -> str:
    name = token.text[1:-1] if token.kind == "quoted" else token.text
    if token.kind == "word" and not _HIVE_IDENTIFIER.fullmatch(name):
        raise UnsupportedPartitionFilter(
            f"partition filter {text!r}: {name!r} is not an identifier of Hive's filter grammar (quote it: `{name}`)"
        )
    if not _CHECKABLE_COLUMN.fullmatch(name):
        raise UnsupportedPartitionFilter(
            f"partition filter {text!r}: column {token.text} is not a name smartsensor checks ([A-Za-z0-9_]+)"
        )
    return name.lower()


def _value(text: str, token: _Token, source: str) -> str:
    if token.kind == "string":
        if len(token.text) == 2:
            raise UnsupportedPartitionFilter(
                f"partition filter {text!r}: {source!r}: an empty value names no partition"
            )
        return token.text[1:-1]
    if token.kind == "number" and not _INTEGRAL.fullmatch(token.text):
        raise UnsupportedPartitionFilter(
            f"partition filter {text!r}: {token.text} is not a literal of Hive's filter grammar (strings in quotes, "
            f"whole numbers); write it as a string: '{token.text}'"
        )
    if token.kind == "number":
        if token.text != str(int(token.text)):
            raise UnsupportedPartitionFilter(
                f"partition filter {text!r}: the metastore reads {token.text} as the number {int(token.text)}, "
                f"which does not say which partition it names; write the value as a string: '{token.text}'"
            )
        return token.text
    raise _not_an_equality(text, source)


def _not_an_equality(text: str, source: str) -> UnsupportedPartitionFilter:
    return UnsupportedPartitionFilter(
        f"partition filter {text!r}: {source!r} is not a `column = 'value'` equality; smartsensor checks only "
        f"equalities joined by AND (use NamedHivePartitionSensor for several partitions)"
    )
