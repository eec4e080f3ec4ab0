"""The errors a store raises in place of its own (a database library's types never reach the doors or the service)."""

from __future__ import annotations


class StoreError(Exception):
    """An outcome of a store operation its caller decides on, raised by the adapter in place of its own error (the
    ``__cause__``): a database library's exception types never reach the doors or the service."""


class StoreUnavailable(StoreError):
    """The store could not be reached or lost the connection (the database down or restarting): nothing was
    written, or a write's outcome is not known; the operation may be tried again. ``str()`` is the adapter's message,
    ``reason`` the driver's own words."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = message if reason is None else reason


class InsertConflict(StoreError):
    """Another writer inserted some of the rows meanwhile (a unique key): nothing was written; they exist now."""
