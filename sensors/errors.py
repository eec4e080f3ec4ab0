"""Errors the sensor library raises, and the one way an exception becomes a one-line message."""

MAX_MESSAGE_LINE = 1000


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (Spark's carry a JVM stack trace), or its type name.

    Cut at MAX_MESSAGE_LINE characters; an exception whose ``__str__`` itself fails is named by its type.
    """
    try:
        text = str(exc).strip()
    except Exception:  # noqa: BLE001 - a hostile __str__
        text = ""
    return text.splitlines()[0][:MAX_MESSAGE_LINE] if text else type(exc).__name__


class SensorDefinitionError(ValueError):
    """A sensor was defined with a bad field (names the field)."""


class CheckError(Exception):
    """A check could not be answered."""


class TransientCheckError(CheckError):
    """The metastore or file system is unreachable: retry later, never fail a task early for it."""


class PermanentCheckError(CheckError):
    """The check itself is wrong (e.g. a spec the metastore rejects): retrying will not help."""


class SensorRebuildError(TransientCheckError):
    """A sensor class raised something other than its own validation error while being rebuilt from a
    stored attr_dict: possibly another version of the class on this host (a deploy skew), so its tasks
    wait within their timeouts instead of failing."""


class UnknownSensorClass(LookupError):
    """A class path that is not an allowed sensor class. It is never imported."""


class SensorModuleUnavailable(LookupError):
    """A configured ``sensor_modules`` entry cannot be imported on this host (a deploy skew): its tasks
    wait, within their own timeouts, until it can. Transient, unlike UnknownSensorClass."""

    def __init__(self, module: str, message: str) -> None:
        super().__init__(message)
        self.module = module
