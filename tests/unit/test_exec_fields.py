"""The exec fields are declared once (smartsensor.sensors.exec_fields.FIELDS): BaseSensor's keyword arguments and
ExecSettings follow that declaration, and a sensor given no exec values stores exactly the declared defaults."""

from __future__ import annotations

import dataclasses
import inspect
import json

from smartsensor.domain.timing import ExecSettings, parse_exec
from smartsensor.sensors import BaseSensor, SuccessFileSensor
from smartsensor.sensors.base import DEFAULT_EXEC_FIELDS
from smartsensor.sensors.exec_fields import DEFAULTS, FIELDS, NAMES


def test_base_sensor_takes_the_declared_fields_with_their_defaults() -> None:
    params = list(inspect.signature(BaseSensor.__init__).parameters.values())[3:]  # after self, task_id, dag_id
    assert [p.name for p in params] == list(NAMES)
    assert {p.name: p.default for p in params} == DEFAULTS
    assert DEFAULT_EXEC_FIELDS == BaseSensor.exec_fields == NAMES
    assert [n for n in BaseSensor.__annotations__ if n in NAMES] == list(NAMES)


def test_a_sensor_without_exec_arguments_stores_the_declared_defaults() -> None:
    sensor = SuccessFileSensor(task_id="t", path="/data/_SUCCESS")
    stored = json.dumps(sensor.exec_values())
    assert json.loads(stored) == DEFAULTS
    assert [type(v) for v in sensor.exec_values().values()] == [type(f.default) for f in FIELDS]  # 60, not 60.0
    assert parse_exec(stored) == parse_exec("{}") == parse_exec(None) == ExecSettings()


def test_exec_settings_has_the_declared_fields_and_defaults() -> None:
    fields = dataclasses.fields(ExecSettings)
    assert [f.name for f in fields] == list(NAMES)
    assert {f.name: f.default for f in fields} == DEFAULTS
