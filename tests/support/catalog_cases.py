"""Tables, partitions and checks both catalog backends answer (tests/integration/test_catalog_backends.py).

``SETUP`` is Spark SQL run once against the metastore service; ``CASES`` pairs each check with the answer
both backends must give: True, False, or "permanent" (a PermanentCheckError).
"""

from __future__ import annotations

from typing import Any

from smartsensor.sensors.checks import PartitionCheck
from smartsensor.sensors.errors import PermanentCheckError, TransientCheckError

DB = "backends"
# Values whose partition names need escaping, unicode, and a '.' the metastore's pattern match widens.
ODD_VALUES = ["10:00", "a/b", "k=v", "100%", "#x", "it's", 'say "hi"', "ü日本", "a.b", "a b"]


def _literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


# Idempotent: the modules that land it (test_catalog_backends, test_thrift_backend) share a test process's metastore
# service, and the second one finds it there.
SETUP = [
    f"CREATE DATABASE IF NOT EXISTS {DB}",
    f"CREATE TABLE IF NOT EXISTS {DB}.esc (x INT) PARTITIONED BY (ds STRING, hr STRING) STORED AS PARQUET",
    *(f"ALTER TABLE {DB}.esc ADD IF NOT EXISTS PARTITION (ds={_literal(v)}, hr='00')" for v in ODD_VALUES),
    f"CREATE TABLE IF NOT EXISTS {DB}.typed (x INT) PARTITIONED BY (ds DATE, hr INT) STORED AS PARQUET",
    f"ALTER TABLE {DB}.typed ADD IF NOT EXISTS PARTITION (ds='2026-01-05', hr='00')",
    f"CREATE TABLE IF NOT EXISTS {DB}.flat (x INT) STORED AS PARQUET",
    f"CREATE TABLE IF NOT EXISTS {DB}.empty (x INT) PARTITIONED BY (ds STRING) STORED AS PARQUET",
    f"CREATE TABLE IF NOT EXISTS {DB}.daily (x INT) PARTITIONED BY (ds STRING) STORED AS PARQUET",
    f"ALTER TABLE {DB}.daily ADD IF NOT EXISTS PARTITION (ds='2026-11-22')",
]


def _check(table: str, exact: bool, **spec: str) -> PartitionCheck:
    return PartitionCheck(DB, table, tuple(spec.items()), exact)


CASES: list[tuple[PartitionCheck, Any]] = [
    *((_check("esc", True, ds=v, hr="00"), True) for v in ODD_VALUES),
    *((_check("esc", True, ds=v + "x", hr="00"), False) for v in ODD_VALUES),
    *((_check("esc", False, ds=v), True) for v in ODD_VALUES),
    (_check("esc", False, ds="a_b"), False),  # the metastore's pattern for a.b also matches a_b: exact membership
    (_check("esc", False, ds="a%b"), False),
    (_check("esc", False, ds="a*"), False),
    # A partial check that gives every column is that partition's name (no '/' after its last value).
    *((_check("esc", False, ds=v, hr="00"), True) for v in ODD_VALUES),
    (_check("esc", False, ds="10:00", hr="0"), False),
    (_check("daily", False, ds="2026-11-22"), True),  # HivePartitionSensor's ds='…' on a table partitioned by ds
    (_check("daily", False, ds="2026-11-2"), False),
    (_check("typed", False, ds="2026-1-5", hr="00"), True),
    (_check("esc", False, hr="00"), True),
    (_check("esc", False, hr="01"), False),
    (_check("esc", False, nope="1"), "permanent"),
    (_check("esc", True, ds="10:00"), "permanent"),  # a name must give every column
    (_check("typed", True, ds="2026-1-5", hr="00"), True),  # stored as ds=2026-01-05/hr=0
    (_check("typed", False, hr="0"), True),
    (_check("typed", False, hr="000"), True),
    (_check("typed", False, hr="7"), False),
    (_check("typed", False, hr="x"), "permanent"),
    (_check("typed", False, ds="2026-01-06"), False),
    (PartitionCheck(DB, "missing", (("ds", "1"),), True), False),
    (PartitionCheck("no_such_db", "t", (("ds", "1"),), True), False),
    (_check("flat", False, ds="1"), "permanent"),
    (_check("empty", False, ds="1"), False),
]


def outcome(answer: Any) -> Any:
    """An answer as JSON can carry it: True/False, "permanent" or "transient"."""
    if isinstance(answer, PermanentCheckError):
        return "permanent"
    if isinstance(answer, TransientCheckError):
        return "transient"
    return answer
