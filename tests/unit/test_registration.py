"""Routing matrix, row contents, templates, and clear errors for bad fields (build_row: no database).
Idempotent re-submit and --clear on a real metadata DB are in tests/integration/test_registration.py."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from smartsensor.domain.states import State
from smartsensor.sensors import (
    BaseSensor,
    HivePartitionSensor,
    NamedHivePartitionSensor,
    SensorDefinitionError,
    smart_eligible,
)
from smartsensor.standalone.registration import build_row
from tests.support.common import DAY, make_cfg, named


class UnmarkedSensor(BaseSensor):
    persist_fields = ("name",)

    def __init__(self, task_id: str, name: str, **kw: Any) -> None:
        super().__init__(task_id=task_id, **kw)
        self.name = name

    def poke(self, context: dict[str, Any]) -> bool:
        return True


@smart_eligible
class MarkedButUnknownModule(UnmarkedSensor):
    pass


@smart_eligible
class ExplodingCompat(NamedHivePartitionSensor):
    def is_smart_sensor_compatible(self) -> bool:
        raise RuntimeError("boom")


def test_routing_matrix(tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    on = make_cfg(tmp_path, "sqlite://")
    off = make_cfg(tmp_path, "sqlite://", smart_sensor__use_smart_sensor="False")
    not_enabled = make_cfg(tmp_path, "sqlite://", smart_sensor__sensors_enabled="HivePartitionSensor")
    assert build_row(named(), "d", DAY, on)[0].state == State.SMART_PENDING
    row, reason = build_row(named(), "d", DAY, off)
    assert row.state == State.SCHEDULED and "use_smart_sensor" in reason
    row, reason = build_row(named(), "d", DAY, not_enabled)
    assert row.state == State.SCHEDULED and "sensors_enabled" in reason
    row, reason = build_row(UnmarkedSensor(task_id="u", name="x"), "d", DAY, on)
    assert row.state == State.SCHEDULED and "not marked" in reason
    enabled_custom = make_cfg(tmp_path, "sqlite://", smart_sensor__sensors_enabled="MarkedButUnknownModule")
    row, reason = build_row(MarkedButUnknownModule(task_id="m", name="x"), "d", DAY, enabled_custom)
    assert row.state == State.SCHEDULED and "sensor_modules" in reason
    loadable = make_cfg(
        tmp_path,
        "sqlite://",
        smart_sensor__sensors_enabled="MarkedButUnknownModule",
        smart_sensor__sensor_modules="tests.unit.test_registration",
    )
    assert build_row(MarkedButUnknownModule(task_id="m", name="x"), "d", DAY, loadable)[0].state == State.SMART_PENDING
    boom = make_cfg(
        tmp_path,
        "sqlite://",
        smart_sensor__sensors_enabled="ExplodingCompat",
        smart_sensor__sensor_modules="tests.unit.test_registration",
    )
    with caplog.at_level(logging.WARNING):
        row, reason = build_row(ExplodingCompat(task_id="e", partition_names=["a.b/c=d"]), "d", DAY, boom)
    assert row.state == State.SCHEDULED and "boom" in reason
    assert "falling back to classic mode" in caplog.text


def test_subclass_does_not_inherit_the_mark(tmp_path) -> None:
    class Sub(NamedHivePartitionSensor):
        pass

    cfg = make_cfg(tmp_path, "sqlite://", smart_sensor__sensors_enabled="Sub")
    row, reason = build_row(Sub(task_id="s", partition_names=["a.b/c=d"]), "d", DAY, cfg)
    assert row.state == State.SCHEDULED and "not marked" in reason


def test_row_contents(tmp_path) -> None:
    cfg = make_cfg(tmp_path, "sqlite://")
    sensor = HivePartitionSensor(
        task_id="t",
        table="Demo.Events",
        partition={"ds": "{{ ds }}", "hr": "{{ ds_nodash }}"},
        poke_interval=30,
        timeout=600,
        retries=2,
        soft_fail=True,
    )
    row, _ = build_row(sensor, "d", DAY, cfg)
    assert json.loads(row.attr_dict) == {"table": "demo.events", "partition": {"ds": "2026-11-22", "hr": "20261122"}}
    assert row.attr_dict == '{"partition":{"ds":"2026-11-22","hr":"20261122"},"table":"demo.events"}'
    exec_dict = json.loads(row.exec_dict)
    assert exec_dict["poke_interval"] == 30 and exec_dict["timeout"] == 600 and exec_dict["retries"] == 2
    assert exec_dict["soft_fail"] is True
    assert row.max_tries == 2 and row.try_number == 1
    assert row.classpath == "smartsensor.sensors.hive.HivePartitionSensor"
    assert 0 <= row.shardcode < 10000


def test_airflow_template_names_and_macros_render(tmp_path) -> None:
    """The names Airflow users write in sensor files render, and equal renderings hash equal."""
    cfg = make_cfg(tmp_path, "sqlite://")
    written = NamedHivePartitionSensor(
        task_id="a",
        partition_names=[
            "db.t/ds={{ macros.ds_add(ds, -1) }}/hr={{ execution_date.strftime('%H') }}",
            "db.u/ds={{ macros.ds_format(yesterday_ds_nodash, '%Y%m%d', '%Y-%m-%d') }}/ts={{ ts_nodash }}",
            "db.v/ds={{ tomorrow_ds }}/d={{ tomorrow_ds_nodash }}",
        ],
    )
    spelled = NamedHivePartitionSensor(
        task_id="b",
        partition_names=[
            "db.t/ds=2026-11-21/hr=00",
            "db.u/ds=2026-11-21/ts=20261122T000000",
            "db.v/ds=2026-11-23/d=20261123",
        ],
    )
    row_a, _ = build_row(written, "d", DAY, cfg)
    row_b, _ = build_row(spelled, "d", DAY, cfg)
    assert row_a.attr_dict == row_b.attr_dict and row_a.hashcode == row_b.hashcode
    with pytest.raises(SensorDefinitionError, match="field 'partition_names'.*ds_add"):
        build_row(
            NamedHivePartitionSensor(task_id="c", partition_names=["db.t/ds={{ macros.ds_add(ds, 'x') }}"]),
            "d",
            DAY,
            cfg,
        )
    with pytest.raises(SensorDefinitionError, match="unsafe"):
        build_row(
            NamedHivePartitionSensor(task_id="e", partition_names=["db.t/ds={{ macros.ds_add.__globals__ }}"]),
            "d",
            DAY,
            cfg,
        )


def test_durations_may_be_timedeltas_as_in_airflow_dag_files(tmp_path) -> None:
    from datetime import timedelta

    cfg = make_cfg(tmp_path, "sqlite://")
    sensor = HivePartitionSensor(
        task_id="t",
        table="db.t",
        poke_interval=timedelta(minutes=2),
        timeout=timedelta(hours=6),
        execution_timeout=timedelta(hours=1),
        retry_delay=timedelta(seconds=90),
        max_wait=timedelta(minutes=10),
    )
    exec_dict = json.loads(build_row(sensor, "d", DAY, cfg)[0].exec_dict)
    assert (
        exec_dict["poke_interval"],
        exec_dict["timeout"],
        exec_dict["execution_timeout"],
        exec_dict["retry_delay"],
        exec_dict["max_wait"],
    ) == (120, 21600, 3600, 90, 600)
    with pytest.raises(
        SensorDefinitionError, match="timeout must be a number of seconds or a timedelta between 0 s and 31536000 s"
    ):
        HivePartitionSensor(task_id="u", table="db.t", timeout=timedelta(hours=-1))


def test_not_json_serialisable_names_the_field(tmp_path) -> None:
    class Odd(UnmarkedSensor):
        pass

    cfg = make_cfg(tmp_path, "sqlite://")
    with pytest.raises(
        SensorDefinitionError, match="field .name.: values must be text, numbers, booleans, None, lists or dicts"
    ):
        build_row(Odd(task_id="o", name=object()), "d", DAY, cfg)  # type: ignore[arg-type]  # an object on purpose


def test_template_errors_name_the_field(tmp_path) -> None:
    cfg = make_cfg(tmp_path, "sqlite://")
    bad = NamedHivePartitionSensor(task_id="t", partition_names=["demo.events/ds={{ nope }}"])
    with pytest.raises(SensorDefinitionError, match="partition_names"):
        build_row(bad, "d", DAY, cfg)
    sandboxed = NamedHivePartitionSensor(task_id="t", partition_names=["d.t/x={{ ''.__class__.__mro__ }}"])
    with pytest.raises(SensorDefinitionError):
        build_row(sandboxed, "d", DAY, cfg)


def test_bad_sensor_fields_are_clear_errors() -> None:
    with pytest.raises(SensorDefinitionError, match="poke_interval"):
        named().__class__(task_id="x", partition_names=["a.b/c=d"], poke_interval=-1)
    with pytest.raises(SensorDefinitionError, match="retries"):
        named().__class__(task_id="x", partition_names=["a.b/c=d"], retries=1.5)
    with pytest.raises(SensorDefinitionError, match="task_id"):
        NamedHivePartitionSensor(task_id="", partition_names=["a.b/c=d"])
