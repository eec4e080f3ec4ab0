"""Run inside an Airflow venv (not by pytest): evaluates what Airflow's own Hive provider tests expect of the public
surface of its three Hive sensors, on three variants of each, and prints one JSON line for
tests/airflow/test_hive_api.py to assert on.

The variants: ``airflow`` (Airflow's own class, ``airflow.providers.apache.hive.sensors.*``), ``dropin``
(``smartsensor_airflow.sensors.*``) and ``routed`` (Airflow's class built inside a DAG, then passed to
``smartsensor_airflow.policy.task_policy``; the caller sets ``AIRFLOW__SMARTSENSOR__USE_SMART_SENSOR=True``).

The expectations come from the Hive provider's tests of these sensors (test_named_hive_partition.py,
test_hive_partition.py, test_metastore_partition.py and test_metastore_partition_refactor.py under
providers/apache/hive/tests/unit/apache/hive/sensors/ in apache/airflow), restricted to what needs no live Hive:
constructor arguments and defaults, attributes, ``template_fields``, ``ui_color``, ``parse_partition_name``, and
``poke`` against stand-ins for the metastore (our own, not the provider's test mocks). ``run``/``execute`` is left
out: it needs Airflow's database, and the drop-ins' execute registers with smartsensor and defers by design.

Output: ``{"airflow": …, "hive_provider": …, "routed": {sensor: route}, "expectations": {id: {variant: value}}}``;
a value is what the variant gave (JSON), or ``"<ExceptionType>: <message>"`` when it raised.
"""

from __future__ import annotations

import datetime
import importlib
import itertools
import json
import re
from importlib.metadata import version
from typing import Any, Callable
from unittest import mock

import airflow

from smartsensor_airflow import sensors as dropins
from smartsensor_airflow.policy import task_policy

try:  # Airflow 3: the Task SDK
    from airflow.sdk import DAG, BaseSensorOperator
except ImportError:  # Airflow 2.10
    from airflow.models.dag import DAG
    from airflow.sensors.base import BaseSensorOperator

HIVE = "airflow.providers.apache.hive.sensors."
named_module = importlib.import_module(HIVE + "named_hive_partition")
hive_module = importlib.import_module(HIVE + "hive_partition")
metastore_module = importlib.import_module(HIVE + "metastore_partition")
sql_sensor_module = importlib.import_module("airflow.providers.common.sql.sensors.sql")

AIRFLOWS = {
    "NamedHivePartitionSensor": named_module.NamedHivePartitionSensor,
    "HivePartitionSensor": hive_module.HivePartitionSensor,
    "MetastorePartitionSensor": metastore_module.MetastorePartitionSensor,
}
VARIANTS = ("airflow", "dropin", "routed")
DS = "2015-01-01"  # the upstream tests' DEFAULT_DATE
START = datetime.datetime(2015, 1, 1)
_dag_ids = itertools.count()


def metastore_needs_sql_args() -> bool:
    """Hive provider 9.1.4 (what pip installs beside Airflow 2.10.5) has a bug: its MetastorePartitionSensor does
    not pass SqlSensor's required ``conn_id`` and ``sql`` on, so its constructor fails without them (the provider's
    own test passes both). 9.7.1 (beside 3.3.2) passes ``conn_id=mysql_conn_id`` and its SQL itself. Airflow's
    class (and so the routed task, which Airflow's constructor builds) gets them here, as a DAG on 9.1.4 must."""
    return not hasattr(metastore_module, "_METASTORE_PARTITION_SQL")


class Variant:
    """How one variant builds a task of one sensor class."""

    def __init__(self, name: str, sensor: str) -> None:
        self.name = name
        self.sensor = sensor
        self.airflows = AIRFLOWS[sensor]

    def make(self, task_id: str = "t", **kwargs: Any) -> Any:
        """A task built inside a fresh DAG (the routed one then passed to the cluster policy)."""
        if self.name != "dropin" and self.sensor == "MetastorePartitionSensor" and metastore_needs_sql_args():
            kwargs.setdefault("conn_id", kwargs.get("mysql_conn_id", "metastore_mysql"))
            kwargs.setdefault("sql", "")
        cls = getattr(dropins, self.sensor) if self.name == "dropin" else self.airflows
        with DAG(f"hive_api_{next(_dag_ids)}", schedule=None, start_date=START):
            task = cls(task_id=task_id, **kwargs)
        if self.name == "routed":
            task_policy(task)
        return task

    def cls(self) -> Any:
        """The class a DAG's helper would call class-level methods on (the routed task's is the policy's)."""
        if self.name == "routed":
            return type(self.make(**MINIMAL[self.sensor]))
        return getattr(dropins, self.sensor) if self.name == "dropin" else self.airflows


MINIMAL: dict[str, dict[str, Any]] = {
    "NamedHivePartitionSensor": {"partition_names": ["db.t/ds=1"]},
    "HivePartitionSensor": {"table": "t"},
    "MetastorePartitionSensor": {"table": "t", "partition_name": "ds=1"},
}


def jsonable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def outcome(check: Callable[[Variant], Any], variant: Variant) -> Any:
    try:
        return jsonable(check(variant))
    except Exception as exc:  # noqa: BLE001 - an exception is an outcome to compare, with its type and message
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def render(task: Any) -> None:
    """Render the task's template fields for the upstream tests' date, as a task run would."""
    task.render_template_fields({"ds": DS})


# Stand-ins for the metastore: record what the sensor asks, answer what the check says.
class NamedHook:
    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.calls: list[list[str]] = []

    def check_for_named_partition(self, schema: str, table: str, partition: str) -> bool:
        self.calls.append([schema, table, partition])
        return self.answer


class ThriftHooks:
    """Replaces HiveMetastoreHook in Airflow's hive_partition module (the drop-in's safety valve pokes through it)."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.calls: list[list[Any]] = []

    def __call__(self, metastore_conn_id: str) -> Any:
        self.calls.append(["HiveMetastoreHook", metastore_conn_id])
        return self

    def check_for_partition(self, schema: str, table: str, partition: str) -> bool:
        self.calls.append(["check_for_partition", schema, table, partition])
        return self.answer


class SqlHook:
    """What SqlSensor._get_hook returns: records each query, answers ``rows``."""

    def __init__(self, rows: list[list[Any]]) -> None:
        self.rows = rows
        self.queries: list[dict[str, str]] = []

    def get_records(self, sql: str, parameters: Any = None) -> list[list[Any]]:
        self.queries.append(metastore_query(sql, parameters))
        return self.rows


def metastore_query(sql: str, parameters: Any) -> dict[str, str]:
    """The (table, schema, partition_name) a metastore query asks for: bound parameters (9.7.1) or literals in the
    SQL (9.1.4)."""
    if isinstance(parameters, dict) and parameters:
        return {k: str(parameters[k]) for k in ("table", "schema", "partition_name")}
    found = {}
    for key, column in (("table", "B0.TBL_NAME"), ("schema", "C0.NAME"), ("partition_name", "A0.PART_NAME")):
        match = re.search(re.escape(column) + r"\s*=\s*'([^']*)'", sql)
        found[key] = match.group(1) if match else f"<not in {' '.join(sql.split())!r}>"
    return found


# ---- NamedHivePartitionSensor (test_named_hive_partition.py)


def named_template_fields(v: Variant) -> Any:
    return list(v.make(**MINIMAL[v.sensor]).template_fields)


def ui_color(v: Variant) -> Any:
    return v.make(**MINIMAL[v.sensor]).ui_color


def task_type(v: Variant) -> Any:
    task = v.make(**MINIMAL[v.sensor])
    return {"task_type": task.task_type, "is_sensor": isinstance(task, BaseSensorOperator)}


def base_sensor_args(v: Variant) -> Any:
    task = v.make(**MINIMAL[v.sensor], timeout=600, mode="reschedule", soft_fail=True, exponential_backoff=True)
    return {k: getattr(task, k) for k in ("timeout", "mode", "soft_fail", "exponential_backoff")}


def named_defaults(v: Variant) -> Any:
    task = v.make(partition_names=["airflow.t/ds=1"])
    return {k: getattr(task, k) for k in ("metastore_conn_id", "poke_interval", "hook", "next_index_to_poke")}


def named_attributes(v: Variant) -> Any:
    hook = NamedHook(True)
    task = v.make(
        task_id="test_poke_existing",
        partition_names=[f"airflow.static_babynames_partitioned/ds={DS}"],
        poke_interval=1,
        hook=hook,
    )
    return {
        "partition_names": task.partition_names,
        "poke_interval": task.poke_interval,
        "hook_is_given": task.hook is hook,
        "task_id": task.task_id,
    }


def parse(name: str, keyword: bool = False) -> Callable[[Variant], Any]:
    """parse_partition_name on the class (as the upstream tests call it) and on a task (as a DAG's helper may)."""

    def check(v: Variant) -> Any:
        seen: dict[str, Any] = {}
        for where, target in (("class", v.cls()), ("task", v.make(**MINIMAL[v.sensor]))):
            try:
                result = target.parse_partition_name(partition=name) if keyword else target.parse_partition_name(name)
                seen[where] = {"type": type(result).__name__, "value": jsonable(result)}
            except Exception as exc:  # noqa: BLE001 - compared as an outcome
                seen[where] = f"{type(exc).__name__}: {exc}"
        return seen

    return check


def named_poke(answer: bool, names: list[str]) -> Callable[[Variant], Any]:
    def check(v: Variant) -> Any:
        hook = NamedHook(answer)
        task = v.make(partition_names=names, poke_interval=1, hook=hook)
        render(task)
        return {"poke": task.poke(None), "asked": hook.calls}

    return check


def named_poke_partition(v: Variant) -> Any:
    hook = NamedHook(True)
    task = v.make(partition_names=["x.y/ds=0"], hook=hook)
    return {"result": task.poke_partition("db.events/ds=1/hr=2"), "asked": hook.calls}


def named_str_at_construction(v: Variant) -> Any:
    task = v.make(partition_names="airflow.t/ds=1")
    return {"partition_names": task.partition_names}


def named_str_at_poke(v: Variant) -> Any:
    """A whole-list template renders to a string: the check refuses it when it pokes."""
    task = v.make(partition_names=["airflow.t/ds=1"], hook=NamedHook(True))
    task.partition_names = "airflow.t/ds=1"
    return task.poke(None)


# ---- HivePartitionSensor (test_hive_partition.py)


def hive_template_fields(v: Variant) -> Any:
    return list(v.make(**MINIMAL[v.sensor]).template_fields)


def hive_defaults(v: Variant) -> Any:
    task = v.make(task_id="hive_partition_check", table="airflow.static_babynames_partitioned")
    return {k: getattr(task, k) for k in ("table", "partition", "schema", "metastore_conn_id", "poke_interval")}


def hive_empty_partition(v: Variant) -> Any:
    return {repr(p): v.make(table="t", partition=p).partition for p in (None, "")}


def hive_rendered(v: Variant) -> Any:
    task = v.make(table="airflow.static_babynames_partitioned", metastore_conn_id="{{ 'metastore_' + ds }}")
    render(task)
    return {k: getattr(task, k) for k in ("schema", "table", "partition", "metastore_conn_id")}


def hive_poke(v: Variant) -> Any:
    hooks = ThriftHooks(True)
    task = v.make(task_id="hive_partition_check", table="airflow.static_babynames_partitioned")
    render(task)
    with mock.patch.object(hive_module, "HiveMetastoreHook", hooks):
        result = task.poke({"ds": DS})
    return {"poke": result, "asked": hooks.calls}


# ---- MetastorePartitionSensor (test_metastore_partition.py, test_metastore_partition_refactor.py)


def metastore_template_fields(v: Variant) -> Any:
    return list(v.make(**MINIMAL[v.sensor]).template_fields)


def metastore_init(v: Variant) -> Any:
    task = v.make(
        task_id="test_task",
        table="my_table",
        partition_name="ds=2023-01-01",
        schema="my_schema",
        mysql_conn_id="my_conn",
    )
    return {k: getattr(task, k) for k in ("table", "partition_name", "schema")}


def metastore_conn_id(v: Variant) -> Any:
    """SqlSensor's ``conn_id``: ``mysql_conn_id``, or its default."""
    given = v.make(table="t", partition_name="ds=1", mysql_conn_id="my_conn")
    default = v.make(table="t", partition_name="ds=1")
    return {"given": given.conn_id, "default": default.conn_id}


def metastore_defaults(v: Variant) -> Any:
    task = v.make(table="t", partition_name="ds=1")
    return {"schema": task.schema, "poke_interval": task.poke_interval}


def metastore_sql_args(v: Variant) -> Any:
    """The provider's own test passes SqlSensor's conn_id and sql (9.1.4 needs them)."""
    task = v.make(
        task_id="hive_partition_check",
        conn_id="test_connection_id",
        sql="test_sql",
        table="airflow.static_babynames_partitioned",
        partition_name=f"ds={DS}",
    )
    return {"conn_id": task.conn_id, "table": task.table, "partition_name": task.partition_name}


def metastore_poke(table: str, rows: list[list[Any]]) -> Callable[[Variant], Any]:
    def check(v: Variant) -> Any:
        hook = SqlHook(rows)
        task = v.make(task_id="test_task", table=table, partition_name="ds=2023-01-01", schema="my_schema")
        with mock.patch.object(sql_sensor_module.SqlSensor, "_get_hook", lambda self: hook):
            result = task.poke({"ds": "2023-01-01"})
        return {"poke": result, "asked": hook.queries}

    return check


def metastore_rendered(v: Variant) -> Any:
    task = v.make(table="db.events", partition_name="ds={{ ds }}", schema="other")
    render(task)
    return {k: getattr(task, k) for k in ("partition_name", "table", "schema")}


NAMED, HIVE_P, META = "NamedHivePartitionSensor", "HivePartitionSensor", "MetastorePartitionSensor"
CHECKS: dict[str, tuple[str, Callable[[Variant], Any]]] = {
    "named.template_fields": (NAMED, named_template_fields),
    "named.ui_color": (NAMED, ui_color),
    "named.task_type": (NAMED, task_type),
    "named.base_sensor_args": (NAMED, base_sensor_args),
    "named.defaults": (NAMED, named_defaults),
    "named.attributes": (NAMED, named_attributes),
    "named.parse_correct": (NAMED, parse("default.users/ds=2016-01-01/state=IT")),
    "named.parse_default_schema": (NAMED, parse("users/ds=2016-01-01/state=IT")),
    "named.parse_periods": (NAMED, parse("schema.table/part1=this.can.be.an.issue/part2=ok", keyword=True)),
    "named.parse_incorrect": (NAMED, parse("incorrect.name")),
    "named.poke_existing": (NAMED, named_poke(True, [f"airflow.static_babynames_partitioned/ds={DS}"])),
    "named.poke_non_existing": (NAMED, named_poke(False, ["airflow.static_babynames_partitioned/ds=2015-01-02"])),
    "named.poke_multiple_rendered": (
        NAMED,
        named_poke(
            True, ["airflow.static_babynames_partitioned/ds={{ds}}", "airflow.static_babynames_partitioned2/ds={{ds}}"]
        ),
    ),
    "named.poke_partition": (NAMED, named_poke_partition),
    "named.str_at_construction": (NAMED, named_str_at_construction),
    "named.str_at_poke": (NAMED, named_str_at_poke),
    "hive.template_fields": (HIVE_P, hive_template_fields),
    "hive.ui_color": (HIVE_P, ui_color),
    "hive.task_type": (HIVE_P, task_type),
    "hive.base_sensor_args": (HIVE_P, base_sensor_args),
    "hive.defaults": (HIVE_P, hive_defaults),
    "hive.empty_partition": (HIVE_P, hive_empty_partition),
    "hive.rendered": (HIVE_P, hive_rendered),
    "hive.poke": (HIVE_P, hive_poke),
    "metastore.template_fields": (META, metastore_template_fields),
    "metastore.ui_color": (META, ui_color),
    "metastore.task_type": (META, task_type),
    "metastore.base_sensor_args": (META, base_sensor_args),
    "metastore.init": (META, metastore_init),
    "metastore.conn_id": (META, metastore_conn_id),
    "metastore.defaults": (META, metastore_defaults),
    "metastore.sql_args": (META, metastore_sql_args),
    "metastore.poke_sql": (META, metastore_poke("my_table", [[1]])),
    "metastore.poke_table_split": (META, metastore_poke("other_schema.other_table", [])),
    "metastore.rendered": (META, metastore_rendered),
}


def main() -> None:
    out: dict[str, Any] = {
        "airflow": airflow.__version__,
        "hive_provider": version("apache-airflow-providers-apache-hive"),
        # The routed variant is only a check of the policy if the policy routed it.
        "routed": {
            name: getattr(Variant("routed", name).make(**MINIMAL[name]), "smartsensor_route", None) for name in AIRFLOWS
        },
        "expectations": {
            eid: {name: outcome(check, Variant(name, sensor)) for name in VARIANTS}
            for eid, (sensor, check) in CHECKS.items()
        },
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
