"""The sensor library: BaseSensor, the @smart_eligible marker, and Spark/Hive sensors.

Poke logic here knows nothing of the metadata database.
"""

from sensors.base import BaseSensor, classpath_of, is_smart_eligible, smart_eligible
from sensors.checks import PartitionCheck, PathCheck
from sensors.errors import (CheckError, PermanentCheckError, SensorDefinitionError, SensorModuleUnavailable,
                            TransientCheckError, UnknownSensorClass)
from sensors.filesystem import SuccessFileSensor
from sensors.hive import HivePartitionSensor, NamedHivePartitionSensor

__all__ = [
    "BaseSensor", "smart_eligible", "is_smart_eligible", "classpath_of",
    "NamedHivePartitionSensor", "HivePartitionSensor", "SuccessFileSensor",
    "PartitionCheck", "PathCheck",
    "CheckError", "TransientCheckError", "PermanentCheckError", "SensorDefinitionError", "UnknownSensorClass",
    "SensorModuleUnavailable",
]
