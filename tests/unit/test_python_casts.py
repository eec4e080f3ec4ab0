"""Check values cast in Python as Spark casts them (the thrift backend's normalisation, no JVM);
tests/integration/test_catalog_backends.py compares the same values with Spark's own casts."""

from __future__ import annotations

import threading

import pytest

from smartsensor.adapters.catalog import partition_types
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


def _python_types() -> PartitionTypes:
    return PartitionTypes(None, read_schema=lambda db, t: {"hr": "int"}, cast=python_cast_all, castable=python_castable)


def test_a_full_value_cache_never_fails_a_valid_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 30, defect 4: a lookup that fills the cache must not evict the values it already found there."""
    monkeypatch.setattr(partition_types, "_MAX_CACHED_VALUES", 4)
    types = _python_types()
    cols = {"hr": "int"}
    assert types.normalize("db", "t", cols, [(("hr", "01"),), (("hr", "02"),), (("hr", "03"),)]) == [
        (("hr", "1"),),
        (("hr", "2"),),
        (("hr", "3"),),
    ]
    # 01 and 02 are cached; 04 and 05 overflow the cache, which is emptied before they are added
    out = types.normalize("db", "t", cols, [(("hr", "01"),), (("hr", "02"),), (("hr", "04"),), (("hr", "05"),)])
    assert out == [(("hr", "1"),), (("hr", "2"),), (("hr", "4"),), (("hr", "5"),)]


def test_threads_sharing_a_small_value_cache_never_fail_a_valid_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The timer and wake-up threads share one cache on the Spark backend: one thread's eviction must not fail the
    other's valid values."""
    monkeypatch.setattr(partition_types, "_MAX_CACHED_VALUES", 8)
    types = _python_types()
    errors: list[object] = []

    def ask(offset: int) -> None:
        for i in range(300):
            specs: list[tuple[tuple[str, str], ...]] = [(("hr", f"0{(i + offset + j) % 20}"),) for j in range(5)]
            errors.extend(o for o in types.normalize("db", "t", {"hr": "int"}, specs) if isinstance(o, Exception))

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
