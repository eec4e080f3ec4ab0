"""Errors the sensor library raises."""


class SensorDefinitionError(ValueError):
    """A sensor was defined with a bad field (names the field)."""


class CheckError(Exception):
    """A check could not be answered."""


class TransientCheckError(CheckError):
    """The metastore or file system is unreachable: retry later, never fail a task early for it."""


class PermanentCheckError(CheckError):
    """The check itself is wrong (e.g. a spec the metastore rejects): retrying will not help."""


class UnknownSensorClass(LookupError):
    """A class path that is not an allowed sensor class. It is never imported."""


class SensorModuleUnavailable(LookupError):
    """A configured ``sensor_modules`` entry cannot be imported on this host (a deploy skew): its tasks
    wait, within their own timeouts, until it can. Transient, unlike UnknownSensorClass."""

    def __init__(self, module: str, message: str) -> None:
        super().__init__(message)
        self.module = module
