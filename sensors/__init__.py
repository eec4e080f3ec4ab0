"""The sensor library: BaseSensor, the @smart_eligible marker, and Spark/Hive smartsensor.sensors.

Poke logic here knows nothing of the metadata database.
"""

from smartsensor.sensors.base import BaseSensor, classpath_of, is_smart_eligible, smart_eligible
from smartsensor.sensors.checks import PartitionCheck, PathCheck
from smartsensor.sensors.errors import (
    CheckError,
    PermanentCheckError,
    SensorDefinitionError,
    SensorModuleUnavailable,
    TransientCheckError,
    UnknownSensorClass,
)
from smartsensor.sensors.filesystem import SuccessFileSensor
from smartsensor.sensors.hive import HivePartitionSensor, NamedHivePartitionSensor

__all__ = [
    "BaseSensor",
    "smart_eligible",
    "is_smart_eligible",
    "classpath_of",
    "NamedHivePartitionSensor",
    "HivePartitionSensor",
    "SuccessFileSensor",
    "PartitionCheck",
    "PathCheck",
    "CheckError",
    "TransientCheckError",
    "PermanentCheckError",
    "SensorDefinitionError",
    "UnknownSensorClass",
    "SensorModuleUnavailable",
]
