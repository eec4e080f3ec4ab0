"""One filter grammar: the provider, the service's ``airflow report`` and the sensor library read a Hive filter and a
``db.table`` the same way, through the one file both distributions ship (issue 42, "one filter grammar")."""

from __future__ import annotations

from pathlib import Path

import pytest

import smartsensor.hive_filter
import smartsensor_airflow.hive_filter
from smartsensor.hive_filter import (
    UnsupportedPartitionFilter,
    filter_text,
    is_filter_text,
    parse_partition_filter,
    split_table,
)
from smartsensor.sensors.errors import SensorDefinitionError
from smartsensor.sensors.hive import HivePartitionSensor
from smartsensor.service.airflow_partitions import Partition, partitions_of
from smartsensor_airflow.checks import check_of
from tests.support.common import ROOT
from tests.support.shipped import top_level_imports

GRAMMAR = ROOT / "providers" / "airflow" / "smartsensor_airflow" / "hive_filter" / "__init__.py"


def test_both_distributions_load_the_one_file() -> None:
    assert Path(smartsensor.hive_filter.__file__).resolve() == GRAMMAR.resolve()
    assert Path(smartsensor_airflow.hive_filter.__file__).resolve() == GRAMMAR.resolve()
    setup = (ROOT / "setup.cfg").read_text()
    assert "smartsensor.hive_filter = providers/airflow/smartsensor_airflow/hive_filter" in setup


def test_the_grammar_imports_only_the_standard_library() -> None:
    """Shipped by both distributions, it can import neither (nor Airflow)."""
    found = top_level_imports(GRAMMAR)
    assert found == {"__future__", "re", "typing"}, found


def _provider(text: str) -> dict[str, str] | str:
    """The provider's check of a HivePartitionSensor task with this filter (its spec), or why it refuses."""
    task = type("Task", (), {"table": "db.t", "schema": "default", "partition": text})()
    try:
        return check_of("HivePartitionSensor", task)[1]["partition"]
    except smartsensor_airflow.hive_filter.UnsupportedPartitionFilter as exc:  # the provider's own load of the file
        return f"refused: {exc}"


def _service(text: str) -> Partition:
    """What ``airflow report`` reads the same task's rendered fields as."""
    found = partitions_of("HivePartitionSensor", {"table": "db.t", "partition": text})
    assert found is not None and len(found) == 1
    return next(iter(found))


def _sensors(text: str) -> dict[str, str] | str:
    """The sensor library's HivePartitionSensor with this filter as its partition (its spec), or why it refuses."""
    try:
        return HivePartitionSensor(task_id="t", table="db.t", partition=text).partition
    except SensorDefinitionError as exc:
        return f"refused: {exc}"


# Each divergence issue 42 lists, decided by the metastore's grammar: what every reader must make of the filter.
SPECS = {
    # a quoted value holds the word "and" (today the service split inside the quotes and kept the raw text)
    "ds='rock and roll'": {"ds": "rock and roll"},
    # the sensor library kept the quotes in the value, and read the AND as part of it
    "ds='2026-11-22'": {"ds": "2026-11-22"},
    "ds='x' AND hr='01'": {"ds": "x", "hr": "01"},
    # the metastore's grammar: double quotes, integral numbers, case-free AND, back-quoted names
    'DS="x" and `Hr`=7': {"ds": "x", "hr": "7"},
    "ds='x'AND hr=-3": {"ds": "x", "hr": "-3"},
}
REFUSED = {
    # no decimal literal in Hive's filter grammar: the metastore refuses it (today the service made it a spec)
    "hr=1.5": "is not a literal of Hive's filter grammar",
    # a column name smartsensor cannot check (today the provider sent it on, for the service to refuse at registration)
    "`my col`='x'": "is not a name smartsensor checks",
    # the metastore reads the number 7: which stored value (7, 07) it names is not ours to guess
    "hr=07": "reads 07 as the number 7",
    "ds=''": "an empty value names no partition",
    "_ds='x'": "is not an identifier of Hive's filter grammar",
    "ds='1' OR ds='2'": "not a `column = 'value'` equality",
}


@pytest.mark.parametrize("text, spec", list(SPECS.items()), ids=list(SPECS))
def test_each_reader_makes_the_same_spec_of_a_filter(text: str, spec: dict[str, str]) -> None:
    assert parse_partition_filter(text) == spec
    assert _provider(text) == spec
    assert _sensors(text) == dict(sorted(spec.items()))
    path = "/".join(f"{k}={v}" for k, v in sorted(spec.items()))
    assert _service(text) == Partition("db", "t", path, False)


@pytest.mark.parametrize("text, why", list(REFUSED.items()), ids=list(REFUSED))
def test_each_reader_refuses_the_same_filter_for_the_same_reason(text: str, why: str) -> None:
    with pytest.raises(UnsupportedPartitionFilter, match="partition filter") as info:
        parse_partition_filter(text)
    assert why in str(info.value)
    provider = _provider(text)
    assert isinstance(provider, str) and why in provider, provider  # the provider's task takes the classic path
    if is_filter_text(text):
        sensors = _sensors(text)
        assert isinstance(sensors, str) and why in sensors and "'partition'" in sensors, sensors
    # the report keeps a filter it cannot read as equalities as its text: it is no spec, so it equals no check
    assert _service(text) == Partition("db", "t", filter_text(text), False)


def test_a_spec_path_is_still_a_spec_path_in_the_sensor_library() -> None:
    """Text that quotes nothing is a partition name ``k=v/k2=v2``, escaped as Hive writes names: there ``hr=07`` and
    ``hr=1.5`` name the partitions stored under those names (the library's own syntax, not a filter)."""
    assert _sensors("hr=00/ds=2026-11-22") == {"ds": "2026-11-22", "hr": "00"}
    assert _sensors("ds=a%2Fb") == {"ds": "a/b"}
    assert _sensors("hr=07") == {"hr": "07"} and _sensors("hr=1.5") == {"hr": "1.5"}


@pytest.mark.parametrize(
    "table, schema, expected",
    [
        ("db.t", "other", ("db", "t")),  # the dot wins over schema, as Airflow's Hive sensors split it
        ("t", "db", ("db", "t")),
        ("t", None, ("default", "t")),
        ("T", "", ("default", "T")),
    ],
)
def test_a_table_name_is_split_by_one_rule(table: str, schema: str | None, expected: tuple[str, str]) -> None:
    assert split_table(table, schema) == expected


@pytest.mark.parametrize("table", ["a.b.c", ".t", "db.", "", None])
def test_a_table_name_that_is_not_db_table_is_refused_by_every_reader(table: object) -> None:
    with pytest.raises(UnsupportedPartitionFilter, match="table"):
        split_table(table)
    task = type("Task", (), {"table": table, "schema": "default", "partition": "ds='1'"})()
    with pytest.raises(smartsensor_airflow.hive_filter.UnsupportedPartitionFilter, match="table"):
        check_of("HivePartitionSensor", task)
    assert partitions_of("HivePartitionSensor", {"table": table, "partition": "ds='1'"}) is None
    with pytest.raises(SensorDefinitionError, match="table"):
        HivePartitionSensor(task_id="t", table=table, partition={"ds": "1"})  # type: ignore[arg-type]


def test_a_filters_text_is_its_tokens_one_space_apart() -> None:
    assert filter_text("ds  >'a  b'\tOR  hr=1") == "ds > 'a  b' OR hr = 1"
    assert filter_text("ds='unterminated  x") == "ds='unterminated x"


def test_a_name_smartsensor_refuses_is_still_split_by_the_one_table_rule() -> None:
    """``airflow report`` reads a partition name with odd characters as Airflow does, its table by ``split_table``."""
    found = partitions_of("NamedHivePartitionSensor", {"partition_names": ["DB.we-ird/ds=1", "a.b.c/ds=1"]})
    assert found == frozenset({Partition("db", "we-ird", "ds=1", True)})
