"""Rows stored by 0.1 name their class ``sensors.hive.…`` (the sensor library was then the top-level package
``sensors``); they still resolve, to the one class of ``smartsensor.sensors``. Importing smartsensor changes
nothing about how Python imports anything else: ``from sensors import …`` is no longer made to work."""

from __future__ import annotations

import sys

import pytest

import smartsensor
from smartsensor.sensors import HivePartitionSensor, NamedHivePartitionSensor, SuccessFileSensor
from smartsensor.sensors.base import current_classpath, resolve_any_class, resolve_smart_class
from smartsensor.sensors.errors import UnknownSensorClass


def test_stored_class_paths_of_the_old_form_map_to_the_new_one() -> None:
    assert (
        current_classpath("sensors.hive.NamedHivePartitionSensor")
        == "smartsensor.sensors.hive.NamedHivePartitionSensor"
    )
    assert (
        current_classpath("smartsensor.sensors.hive.HivePartitionSensor")
        == "smartsensor.sensors.hive.HivePartitionSensor"
    )
    assert current_classpath("my_company.sensors.Mine") == "my_company.sensors.Mine"
    assert current_classpath("sensorsx.Mine") == "sensorsx.Mine"


@pytest.mark.parametrize(
    "stored,cls",
    [
        ("sensors.hive.NamedHivePartitionSensor", NamedHivePartitionSensor),
        ("sensors.hive.HivePartitionSensor", HivePartitionSensor),
        ("sensors.filesystem.SuccessFileSensor", SuccessFileSensor),
    ],
)
def test_a_row_stored_by_0_1_resolves_to_the_current_class(stored: str, cls: type) -> None:
    assert resolve_any_class(stored) is cls  # classic runs
    assert resolve_smart_class(stored, enabled=[cls.__name__]) is cls  # shard rounds
    with pytest.raises(UnknownSensorClass, match="not enabled"):
        resolve_smart_class(stored, enabled=[])


def test_an_old_path_of_a_class_that_never_existed_stays_unknown() -> None:
    assert resolve_any_class("sensors.hive.NoSuchSensor") is None
    with pytest.raises(UnknownSensorClass):
        resolve_smart_class("sensors.nowhere.NamedHivePartitionSensor", enabled=["NamedHivePartitionSensor"])


def test_importing_smartsensor_installs_no_import_hook() -> None:
    assert smartsensor.__name__ == "smartsensor"
    assert [f for f in sys.meta_path if type(f).__module__.startswith(("smartsensor", "sensors"))] == []
