"""One partition-name grammar (issue 56): ``k=v/…`` with Hive's escaping is read and written by
``hive_filter/names.py`` alone, the file both distributions ship, and every caller (the sensor library, the catalog
backends, the landing publisher, ``airflow report``) goes through it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, strategies as st

import smartsensor.hive_filter.names
import smartsensor_airflow.hive_filter.names
from smartsensor.adapters.catalog.batch import parse_listing_row
from smartsensor.adapters.catalog.partition_feed import leading_prefix, partition_name
from smartsensor.domain.landings import partition_key
from smartsensor.hive_filter.names import (
    ESCAPED,
    PartitionNameError,
    TableName,
    escape,
    format_partition_name,
    format_spec,
    parse_spec,
    split_partition_name,
    unescape,
)
from smartsensor.sensors.errors import SensorDefinitionError
from smartsensor.sensors.partitions import parse_partition_name
from tests.support.common import ROOT
from tests.support.shipped import top_level_imports

GRAMMAR = ROOT / "providers" / "airflow" / "smartsensor_airflow" / "hive_filter" / "names.py"
values = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=20)


def test_both_distributions_load_the_one_file() -> None:
    assert Path(smartsensor.hive_filter.names.__file__).resolve() == GRAMMAR.resolve()
    assert Path(smartsensor_airflow.hive_filter.names.__file__).resolve() == GRAMMAR.resolve()


def test_the_grammar_imports_only_the_standard_library() -> None:
    found = top_level_imports(GRAMMAR)
    assert found == {"__future__", "re", "typing"}, found


def test_no_other_module_spells_out_the_grammar() -> None:
    """The escaped character set and the ``%XX`` rule are written once: nowhere else in the product."""
    for folder in ("smartsensor", "sensors", "providers/airflow/smartsensor_airflow"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.resolve() == GRAMMAR.resolve():
                continue
            text = path.read_text()
            assert "%([0-9A-Fa-f]{2})" not in text, path
            assert "escapePathName" not in text or "names" in text, path


@given(values)
def test_escape_round_trips_and_leaves_no_separator(value: str) -> None:
    escaped = escape(value)
    assert unescape(escaped) == value
    assert "/" not in escaped and "=" not in escaped


@given(st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True), values, min_size=1, max_size=4))
def test_a_spec_round_trips_through_its_name(spec: dict[str, str]) -> None:
    assert dict(parse_spec(format_spec(spec))) == spec
    assert parse_listing_row(format_spec(spec)) == spec
    columns = sorted(spec)
    assert format_spec(spec, columns) == partition_name(columns, spec)
    assert partition_key(format_spec(spec, columns)) == "|".join(spec[c] for c in columns)


def test_hive_escapes_these_characters() -> None:
    assert escape("2026-11-22 10:00") == "2026-11-22 10%3A00"
    assert escape("a/b=c") == "a%2Fb%3Dc"
    assert {":", "/", "=", "%", "\x01", "\x7f"} <= ESCAPED and " " not in ESCAPED and "-" not in ESCAPED


def test_columns_give_the_order_and_a_prefix() -> None:
    spec = {"hr": "00", "ds": "2026-11-22"}
    assert format_spec(spec) == "hr=00/ds=2026-11-22"
    assert format_spec(spec, ["ds", "hr"]) == "ds=2026-11-22/hr=00"
    assert leading_prefix(["ds", "hr"], {"ds": "10:00"}) == "ds=10%3A00/"
    assert leading_prefix(["ds", "hr"], {"hr": "0"}) == ""


@pytest.mark.parametrize("text", ["ds", "ds=1/hr", "=1", "ds=1//hr=2"])
def test_a_part_without_a_column_and_a_value_is_refused(text: str) -> None:
    with pytest.raises(PartitionNameError, match="not of the form key=value"):
        parse_spec(text)
    with pytest.raises(ValueError, match="not a Hive partition name"):
        partition_key(text)
    with pytest.raises(SensorDefinitionError, match="not of the form key=value"):
        parse_partition_name("f", f"db.t/{text}")


def test_partition_names_with_their_table() -> None:
    assert split_partition_name("db.t/ds=1/hr=2") == ("db.t", "ds=1/hr=2")
    with pytest.raises(PartitionNameError, match="must look like"):
        split_partition_name("db.t")
    name = format_partition_name(TableName("db", "t"), {"ds": "10:00"})
    assert name == "db.t/ds=10%3A00"
    assert parse_partition_name("f", name) == ("db", "t", {"ds": "10:00"})
    assert TableName("db", "t") == ("db", "t") and str(TableName("db", "t")) == "db.t"
    with pytest.raises(SensorDefinitionError, match="must be a string"):
        parse_partition_name("f", 5)
