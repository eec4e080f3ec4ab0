"""Spark/Hive sensors against a real metastore: before/after landing, batching, validation, injection."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from smartsensor.adapters.catalog.batch import BatchChecker, parse_listing_row
from smartsensor.adapters.catalog.catalog_errors import classify_error
from smartsensor.hive_filter.names import escape, unescape
from smartsensor.sensors import (
    HivePartitionSensor,
    NamedHivePartitionSensor,
    PartitionCheck,
    PermanentCheckError,
    SensorDefinitionError,
    SuccessFileSensor,
)
from tests.support.hive_helpers import create_table, land

pytestmark = pytest.mark.spark


def poke(spark: Any, sensor: Any) -> bool:
    return sensor.poke({"checker": BatchChecker(spark), "spark": spark})


def test_named_sensor_false_then_true(spark: Any, hive_db: str) -> None:
    create_table(spark, hive_db, "events")
    s = NamedHivePartitionSensor(
        task_id="t", partition_names=[f"{hive_db}.events/ds=2026-11-22/hr=00", f"{hive_db}.events/ds=2026-11-22/hr=01"]
    )
    assert not poke(spark, s)
    land(spark, hive_db, "events", ds="2026-11-22", hr="00")
    assert not poke(spark, s)  # all must exist
    land(spark, hive_db, "events", ds="2026-11-22", hr="01")
    assert poke(spark, s)


def test_named_sensor_default_database(spark: Any, hive_db: str) -> None:
    create_table(spark, "default", f"{hive_db}_t")
    s = NamedHivePartitionSensor(task_id="t", partition_names=[f"{hive_db}_t/ds=1/hr=2"])
    assert s.partition_names == [f"default.{hive_db}_t/ds=1/hr=2"]
    assert not poke(spark, s)
    land(spark, "default", f"{hive_db}_t", ds="1", hr="2")
    assert poke(spark, s)
    spark.sql(f"DROP TABLE default.{hive_db}_t")


def test_hive_partition_sensor_partial_spec(spark: Any, hive_db: str) -> None:
    create_table(spark, hive_db, "users")
    by_day = HivePartitionSensor(task_id="a", table=f"{hive_db}.USERS", partition={"ds": "2026-11-22"})
    by_hour = HivePartitionSensor(task_id="b", table=f"{hive_db}.users", partition="hr=07")
    anything = HivePartitionSensor(task_id="c", table=f"{hive_db}.users")
    assert not poke(spark, by_day) and not poke(spark, by_hour) and not poke(spark, anything)
    land(spark, hive_db, "users", ds="2026-11-22", hr="03")
    assert poke(spark, by_day) and poke(spark, anything)
    assert not poke(spark, by_hour)
    land(spark, hive_db, "users", ds="2026-11-21", hr="07")
    assert poke(spark, by_hour)


def test_success_file_sensor(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "out" / "ds=2026-11-22" / "_SUCCESS"
    s = SuccessFileSensor(task_id="t", path=str(target))
    c = BatchChecker(spark)
    assert not s.poke({"checker": c})
    target.parent.mkdir(parents=True)
    target.write_text("")
    assert s.poke({"checker": c})
    assert c.fs_calls == 2 and c.catalog_calls == 0
    uri = SuccessFileSensor(task_id="u", path=f"file://{target}")
    assert poke(spark, uri)


def test_many_checks_one_table_one_catalog_call(spark: Any, hive_db: str) -> None:
    create_table(spark, hive_db, "t")
    create_table(spark, hive_db, "u")
    for hr in range(0, 24, 2):
        land(spark, hive_db, "t", ds="2026-11-22", hr=f"{hr:02d}")
    checks = [PartitionCheck(hive_db, "t", (("ds", "2026-11-22"), ("hr", f"{hr:02d}")), exact=True) for hr in range(24)]
    checks += [PartitionCheck(hive_db, "t", (("hr", "04"),), exact=False)]
    checks += [
        PartitionCheck(hive_db, "u", (("ds", "x"),), exact=False),
        PartitionCheck(hive_db, "missing", (("ds", "x"),), exact=False),
    ]
    c = BatchChecker(spark)
    answers = c.check_all(checks)
    assert c.catalog_calls == 3  # t, u, missing: one each
    assert [answers[ch] for ch in checks[:24]] == [hr % 2 == 0 for hr in range(24)]
    assert answers[checks[24]] is True
    assert answers[checks[25]] is False and answers[checks[26]] is False


def test_common_prefix_narrows_the_listing(spark: Any, hive_db: str) -> None:
    create_table(spark, hive_db, "t")
    land(spark, hive_db, "t", ds="2026-11-22", hr="00")
    land(spark, hive_db, "t", ds="2026-11-21", hr="00")
    c = BatchChecker(spark)
    listed = c.list_partitions(hive_db, "t", {"ds": "2026-11-22"})
    assert listed == [{"ds": "2026-11-22", "hr": "00"}]


def test_unknown_partition_key_and_unpartitioned_table_are_permanent(spark: Any, hive_db: str) -> None:
    create_table(spark, hive_db, "t")
    land(spark, hive_db, "t", ds="1", hr="2")
    spark.sql(f"CREATE TABLE {hive_db}.flat (x INT) STORED AS PARQUET")
    bad_key = PartitionCheck(hive_db, "t", (("region", "eu"),), exact=False)
    flat = PartitionCheck(hive_db, "flat", (("ds", "1"),), exact=False)
    answers = BatchChecker(spark).check_all([bad_key, flat])
    assert isinstance(answers[bad_key], PermanentCheckError) and "region" in str(answers[bad_key])
    assert isinstance(answers[flat], PermanentCheckError)
    assert classify_error(RuntimeError("org.apache.thrift.transport.TTransportException: refused")) == "transient"


def test_typed_partition_columns_match_as_spark_stores_them(spark: Any, hive_db: str) -> None:
    """On an int column Spark stores hr=00 as hr=0 (a date 2026-1-5 as 2026-01-05): checks match anyway."""
    spark.sql(f"CREATE TABLE {hive_db}.typed (x INT) PARTITIONED BY (ds DATE, HR INT, Region STRING) STORED AS PARQUET")
    named = NamedHivePartitionSensor(task_id="n", partition_names=[f"{hive_db}.typed/ds=2026-1-5/hr=00/region=00"])
    by_hour = HivePartitionSensor(task_id="h", table=f"{hive_db}.typed", partition={"hr": 7})  # type: ignore[dict-item]  # an int, as users write it
    string_kept = HivePartitionSensor(task_id="s", table=f"{hive_db}.typed", partition={"region": "0"})
    before = BatchChecker(spark)
    assert not named.poke({"checker": before}) and not by_hour.poke({"checker": before})
    assert before.schema_calls == 1  # a listing needs the column types (is it partitioned? which to narrow by)
    spark.sql(f"ALTER TABLE {hive_db}.typed ADD PARTITION (ds='2026-01-05', hr=0, region='00')")
    spark.sql(f"ALTER TABLE {hive_db}.typed ADD PARTITION (ds='2026-01-06', hr='07', region='x')")
    first = BatchChecker(spark)
    assert named.poke({"checker": first}) and by_hour.poke({"checker": first})
    assert (first.catalog_calls, first.schema_calls) == (2, 0)  # column types looked up once, then cached
    # The metastore narrows a listing by plain values of string columns; typed ones are matched afterwards
    # (the listing is a superset; the answers use exact membership with values cast as stored).
    assert BatchChecker(spark).list_partitions(hive_db, "typed", {"region": "00"}) == [
        {"ds": "2026-01-05", "hr": "0", "region": "00"}
    ]
    assert {"ds": "2026-01-05", "hr": "0", "region": "00"} in BatchChecker(spark).list_partitions(
        hive_db, "typed", {"hr": "0"}
    )
    assert not poke(spark, string_kept)  # a string column keeps '0' and '00' apart

    bad = PartitionCheck(hive_db, "typed", (("hr", "1; DROP TABLE x"),), exact=False)
    partial = PartitionCheck(hive_db, "typed", (("ds", "2026-01-05"),), exact=True)
    good = PartitionCheck(hive_db, "typed", (("hr", "000"),), exact=False)
    c = BatchChecker(spark)
    answers = c.check_all([bad, partial, good])
    assert isinstance(answers[bad], PermanentCheckError) and "not a valid int" in str(answers[bad])
    assert isinstance(answers[partial], PermanentCheckError) and "every partition column" in str(answers[partial])
    assert answers[good] is True
    assert (c.catalog_calls, c.schema_calls) == (1, 0)
    assert c.types.fetch(hive_db, "no_such_table") is None and c.types.fetch("no_such_db", "t") is None


HOSTILE_VALUES = [
    "a'b",
    "a\\'b",
    "x`y",
    "1; DROP TABLE t; --",
    "a/b",
    "k=v",
    "100%",
    "%2F",
    "ü日本",
    "' OR '1'='1",
    "a\\",
    "$(touch /tmp/pwned)",
    "{x}",
    "a b",
    "#",
    "?*^[]",
]


@pytest.mark.slow  # more than 3 s: in the full suite, not in the fast one
def test_hostile_values_match_literally(spark: Any, hive_db: str) -> None:
    create_table(spark, hive_db, "t")
    create_table(spark, hive_db, "victim")
    land(spark, hive_db, "victim", ds="keep", hr="me")
    for value in HOSTILE_VALUES:
        land(spark, hive_db, "t", ds=value, hr="00")
    c = BatchChecker(spark)
    for value in HOSTILE_VALUES:
        exact = PartitionCheck(hive_db, "t", (("ds", value), ("hr", "00")), exact=True)
        near = PartitionCheck(hive_db, "t", (("ds", value + "x"), ("hr", "00")), exact=True)
        partial = HivePartitionSensor(task_id="p", table=f"{hive_db}.t", partition={"ds": value})
        answers = c.check_all([exact, near])
        assert answers[exact] is True, value
        assert answers[near] is False, value
        assert poke(spark, partial), value
        name = NamedHivePartitionSensor(task_id="n", partition_names=[f"{hive_db}.t/ds={escape(value)}/hr=00"])
        assert poke(spark, name), value
    # nothing was executed: the other table and its partition are intact
    assert BatchChecker(spark).list_partitions(hive_db, "victim", {}) == [{"ds": "keep", "hr": "me"}]


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"table": "db.t;drop", "partition": {"ds": "1"}}, "table"),
        ({"table": "db.`t`", "partition": {"ds": "1"}}, "table"),
        ({"table": "a.b.c", "partition": {"ds": "1"}}, "table"),
        ({"table": "db.t", "partition": {"d s": "1"}}, "partition"),
        ({"table": "db.t", "partition": {"ds": ""}}, "partition"),
        ({"table": "db.t", "partition": {"ds": "a\nb"}}, "partition"),
        ({"table": "db.t", "partition": "ds"}, "partition"),
        ({"table": "db.t", "partition": {"ds": "1", "DS": "2"}}, "partition"),
        ({"table": "", "partition": {}}, "table"),
        ({"table": "db.tä", "partition": {}}, "table"),
    ],
)
def test_hive_partition_sensor_rejects_bad_fields(kwargs: dict, field: str) -> None:
    with pytest.raises(SensorDefinitionError, match=f"field '{field}'"):
        HivePartitionSensor(task_id="t", **kwargs)


@pytest.mark.parametrize(
    "name",
    [
        "db.t",
        "db.t/",
        "db.t/ds",
        "db.t/=1",
        "db;x.t/ds=1",
        "db.t/ds=1/ds=2",
        "db.t/ds=a\x00",
        "db.t/ds=",
        "/ds=1",
        "a.b.c/ds=1",
    ],
)
def test_named_sensor_rejects_bad_names(name: str) -> None:
    with pytest.raises(SensorDefinitionError, match="partition_names"):
        NamedHivePartitionSensor(task_id="t", partition_names=[name])


@pytest.mark.parametrize("path", ["", "relative/_SUCCESS", "/a\nb", "   "])
def test_success_file_rejects_bad_paths(path: str) -> None:
    with pytest.raises(SensorDefinitionError, match="field 'path'"):
        SuccessFileSensor(task_id="t", path=path)


def test_templated_fields_validate_after_rendering() -> None:
    from datetime import datetime, timezone

    s = HivePartitionSensor(task_id="t", table="db.t", partition={"ds": "{{ ds }}"})
    assert s.rendered(datetime(2026, 11, 22, tzinfo=timezone.utc)).partition == {"ds": "2026-11-22"}  # type: ignore[attr-defined]  # same class
    bad = HivePartitionSensor(task_id="t", table="db.t", partition={"ds": "{{ ds }}\n"})
    with pytest.raises(SensorDefinitionError):
        bad.rendered(datetime(2026, 11, 22, tzinfo=timezone.utc))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(min_size=1, max_size=40).filter(lambda v: not any(ord(c) < 32 or ord(c) == 127 for c in v)))
def test_escape_roundtrip(value: str) -> None:
    assert unescape(escape(value)) == value
    row = f"ds={escape(value)}/hr={escape(value)}"
    assert parse_listing_row(row) == {"ds": value, "hr": value}
