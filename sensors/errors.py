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
