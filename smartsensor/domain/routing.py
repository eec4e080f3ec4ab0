"""The routing rule: which sensor classes go to the shard workers (smart_pending) and which run classic (scheduled)."""

from __future__ import annotations

from smartsensor.config import Config
from smartsensor.domain.states import State
from smartsensor.sensors.base import BUILTIN_MODULES, is_smart_eligible, resolve_smart_class
from smartsensor.sensors.errors import SensorModuleUnavailable, UnknownSensorClass


def worker_can_load(cls: type, cfg: Config) -> bool:
    """True if shard workers can find this class without importing a DAG file."""
    module = cls.__module__
    return module in BUILTIN_MODULES or module in cfg.sensor_modules


def class_route(cls: type, cfg: Config) -> tuple[State, str]:
    """The routing rule for a class (registration and retries): (smart_pending, "smart") only if smart
    sensors are on, the class is marked @smart_eligible in code, enabled in config and loadable by
    workers; otherwise (scheduled, why)."""
    if not cfg.use_smart_sensor:
        return State.SCHEDULED, "use_smart_sensor is off"
    if not is_smart_eligible(cls):
        return State.SCHEDULED, f"{cls.__name__} is not marked @smart_eligible"
    if cls.__name__ not in cfg.sensors_enabled:
        return State.SCHEDULED, f"{cls.__name__} is not in [smart_sensor] sensors_enabled"
    if not worker_can_load(cls, cfg):
        return State.SCHEDULED, (f"module {cls.__module__} of {cls.__name__} is not in [smart_sensor] sensor_modules")
    return State.SMART_PENDING, "smart"


def smart_route_for(classpath: str, cfg: Config) -> State:
    """smart_pending if the class may still run in the shard workers, else scheduled."""
    if not cfg.use_smart_sensor:
        return State.SCHEDULED
    try:
        cls = resolve_smart_class(classpath, cfg.sensors_enabled, cfg.sensor_modules)
    except SensorModuleUnavailable:  # a deploy skew on this host, not a reason to change the task's route
        return State.SMART_PENDING
    except UnknownSensorClass:
        return State.SCHEDULED
    return class_route(cls, cfg)[0]
