"""What an Airflow Hive sensor task waited for, from its rendered template fields
(``rendered_task_instance_fields.rendered_fields``), as partitions that compare equal when they are the same wait.

- ``NamedHivePartitionSensor``: ``partition_names``, each ``db.table/k=v[/k=v…]`` (no ``db.``: ``default``), a list
  or one name (a list that Airflow stored as its text is read back);
- ``HivePartitionSensor``: ``schema``, ``table``, ``partition``, a metastore filter such as ``ds='2026-11-22' AND
  hr='00'``; ``table`` may be ``db.table`` (as in the Hive provider, the dot wins over ``schema``; no dot:
  ``schema``, default ``default``);
- ``MetastorePartitionSensor``: ``table``, ``schema``, ``partition_name`` (``ds=2026-11-22/hr=00``).

Database and table names are lower-cased and specs put in key order, as smartsensor's own hashing does. Filters and
``db.table`` are read by ``smartsensor.hive_filter``, the grammar the provider reads them with: a filter it turns into
equalities becomes a spec; any other filter, one the provider runs as Airflow's own sensor, is kept as its text
(its tokens one space apart). A filter never equals an exact partition: it matches any partition with those
values.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from smartsensor.hive_filter import UnsupportedPartitionFilter, filter_text, parse_partition_filter, split_table
from smartsensor.hive_filter.names import PartitionNameError, format_spec, split_partition_name
from smartsensor.sensors.errors import SensorDefinitionError
from smartsensor.sensors.partitions import parse_partition_name, parse_spec_path

NAMED, FILTER, METASTORE = "NamedHivePartitionSensor", "HivePartitionSensor", "MetastorePartitionSensor"


@dataclass(frozen=True, order=True)
class Partition:
    """One partition a task waited for: ``spec`` is canonical ``k=v/k2=v2`` (values escaped as Hive does), or a
    filter's own text when it is not made of equalities; ``exact``: the partition itself, not any that matches."""

    db: str
    table: str
    spec: str
    exact: bool

    @property
    def table_name(self) -> str:
        return f"{self.db}.{self.table}"


def partitions_of(operator: str, rendered: Any) -> frozenset[Partition] | None:
    """The partitions a task instance of ``operator`` waited for, or None when its rendered fields do not say
    (Airflow keeps them for the last ``[core] max_num_rendered_ti_fields_per_task`` runs of a task, 30)."""
    if not isinstance(rendered, dict):
        return None
    if operator == NAMED:
        names = _names(rendered.get("partition_names"))
        found = {_named(n) for n in names}
        return frozenset(p for p in found if p is not None) or None
    if operator == FILTER:
        db, table = _table(rendered.get("table"), rendered.get("schema"))
        expression = rendered.get("partition")
        if db is None or table is None or not isinstance(expression, str):
            return None
        return frozenset({Partition(db, table, *_filter_spec(expression))})
    if operator == METASTORE:
        db, table = _table(rendered.get("table"), rendered.get("schema"))
        name = rendered.get("partition_name")
        if db is None or table is None or not isinstance(name, str) or not name:
            return None
        return frozenset({Partition(db, table, _canonical_path(name), True)})
    return None


def _names(value: Any) -> list[str]:
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            value = ast.literal_eval(value)  # a list Airflow stored as its text
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, str)]
    return []


def _named(name: str) -> Partition | None:
    try:
        db, table, spec = parse_partition_name("partition_names", name.strip())
    except SensorDefinitionError:
        return _named_as_airflow(name)
    return Partition(db, table, format_spec(spec), True)


def _named_as_airflow(name: str) -> Partition | None:
    """A name smartsensor would refuse (odd characters), split as the Hive provider's parse_partition_name does."""
    try:
        table_part, spec = split_partition_name(name)
    except PartitionNameError:
        return None
    db, table = _table(table_part, None)
    return None if db is None or table is None else Partition(db, table, spec, True)


def _table(table: Any, schema: Any) -> tuple[str | None, str | None]:
    try:
        db, name = split_table(table, schema)
    except UnsupportedPartitionFilter:
        return None, None
    return db.lower(), name.lower()


def _filter_spec(expression: str) -> tuple[str, bool]:
    """(canonical spec, False): a filter the grammar turns into equalities as a spec, else its text."""
    try:
        spec = parse_partition_filter(expression)
    except UnsupportedPartitionFilter:
        return filter_text(expression), False
    return (format_spec(dict(sorted(spec.items()))) if spec else ""), False


def _canonical_path(name: str) -> str:
    try:
        return format_spec(dict(sorted(parse_spec_path("partition_name", name.strip()).items())))
    except SensorDefinitionError:
        return name.strip()
