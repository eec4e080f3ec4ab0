"""What an exception from a Spark catalog or file-system call means: retry later, not there yet, or wrong.

Shared by the batched checker and the partition-type cache, which both call the catalog.
"""

from __future__ import annotations

# Messages that mean "the metastore / file system could not be reached", not "the check is wrong".
_TRANSIENT_MARKERS = (
    "TTransportException",
    "Connection refused",
    "Could not connect to meta store",
    "Unable to instantiate",
    "SocketTimeoutException",
    "ConnectException",
    "Failed to connect",
    "Broken pipe",
    "Connection reset",
    "UnknownHostException",
    "No route to host",
    "Py4JNetworkError",
    "Answer from Java side is empty",
    "SparkContext was shut down",
    "Cannot call methods on a stopped SparkContext",
    "Read timed out",
)
_NOT_FOUND_CLASSES = ("TABLE_OR_VIEW_NOT_FOUND", "SCHEMA_NOT_FOUND")
_NOT_FOUND_MARKERS = (*_NOT_FOUND_CLASSES, "NoSuchTableException", "NoSuchDatabaseException")


def classify_error(exc: BaseException) -> str:
    """'transient', 'not_found' or 'permanent' for an exception raised by a catalog call."""
    text = f"{type(exc).__name__}: {exc}"
    if any(marker in text for marker in _TRANSIENT_MARKERS):
        return "transient"
    from py4j.protocol import Py4JError, Py4JJavaError

    # A py4j error that is not a Java exception means the JVM gateway itself is gone or broken.
    if isinstance(exc, Py4JError) and not isinstance(exc, Py4JJavaError):
        return "transient"
    error_class = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
    try:
        cond = error_class() if callable(error_class) else None
    except Exception:  # noqa: BLE001 - best effort, fall back to the message
        cond = None
    if cond in _NOT_FOUND_CLASSES or any(marker in text for marker in _NOT_FOUND_MARKERS):
        return "not_found"
    if isinstance(exc, (ConnectionError, TimeoutError, OSError)):
        return "transient"
    return "permanent"
