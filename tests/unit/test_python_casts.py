"""Check values cast in Python as Spark casts them (the thrift backend's normalisation, no JVM);
tests/integration/test_catalog_backends.py compares the same values with Spark's own casts."""

from __future__ import annotations

import pytest

from smartsensor.adapters.catalog.partition_types import PartitionTypes
from smartsensor.adapters.catalog.python_casts import python_cast, python_cast_all, python_castable
from smartsensor.sensors.errors import PermanentCheckError

CASES = [
    ("int", "00", "0"),
    ("int", " 07 ", "7"),
    ("int", "+5", "5"),
    ("int", "-0", "0"),
    ("int", "7.0", None),
    ("int", "x", None),
    ("int", "", None),
    ("int", "2147483648", None),
    ("bigint", "2147483648", "2147483648"),
    ("tinyint", "127", "127"),
    ("tinyint", "128", None),
    ("smallint", "-32768", "-32768"),
    ("date", "2026-1-5", "2026-01-05"),
    ("date", "2026-01-05", "2026-01-05"),
    ("date", "2026-02-30", None),
    ("date", "2026-01-05 10:00:00", "2026-01-05"),
    ("date", "2026", "2026-01-01"),
    ("date", "2026-3", "2026-03-01"),
    ("date", "20260105", None),
    ("date", "x", None),
    ("boolean", "TRUE", "true"),
    ("boolean", "yes", "true"),
    ("boolean", "0", "false"),
    ("boolean", "maybe", None),
]


@pytest.mark.parametrize("typ,value,expected", CASES)
def test_python_cast_matches_spark(typ: str, value: str, expected: str | None) -> None:
    assert python_cast(typ, value) == expected


def test_only_known_types_are_castable() -> None:
    assert all(python_castable(t) for t in ("int", "bigint", "smallint", "tinyint", "boolean", "date"))
    assert not any(python_castable(t) for t in ("decimal(10,2)", "timestamp", "double", "string"))
    with pytest.raises(ValueError):
        python_cast("timestamp", "2026-01-01")


def test_partition_types_cast_in_python_without_spark() -> None:
    types = PartitionTypes(
        None,
        read_schema=lambda db, t: {"ds": "date", "hr": "int", "r": "string"},
        cast=python_cast_all,
        castable=python_castable,
    )
    cols = types.fetch("db", "t")
    assert cols == {"ds": "date", "hr": "int", "r": "string"}
    specs = [(("ds", "2026-1-5"), ("hr", "00"), ("r", "00")), (("hr", "x"),)]
    good, bad = types.normalize("db", "t", cols, specs)
    assert good == (("ds", "2026-01-05"), ("hr", "0"), ("r", "00"))
    assert isinstance(bad, PermanentCheckError) and "not a valid int" in str(bad)
    [odd] = types.normalize("db", "t", {"x": "decimal(4,1)"}, [(("x", "1"),)])
    assert isinstance(odd, PermanentCheckError) and "unsupported type" in str(odd)
    assert types.cast_queries == 0
    missing = PartitionTypes(None, read_schema=lambda db, t: None)
    assert missing.fetch("db", "gone") is None and missing.cached("db", "gone") is None
