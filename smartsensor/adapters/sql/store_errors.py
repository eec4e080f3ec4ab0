"""The SQL stores' errors as the ports name them (``ports.StoreError``): a lost or refused connection is
``StoreUnavailable``, a unique key another writer took first is ``InsertConflict``; the SQLAlchemy exception stays
their ``__cause__`` (the CLI reports it as before). Every other error passes unchanged."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from sqlalchemy.exc import IntegrityError, InterfaceError, OperationalError, ProgrammingError, SQLAlchemyError

from smartsensor.ports import InsertConflict, StoreUnavailable
from smartsensor.sensors.errors import first_line


@contextmanager
def store_errors() -> Iterator[None]:
    """Translate the database's outage and unique-key errors raised inside the block into the ports' own."""
    try:
        yield
    except IntegrityError as exc:
        raise InsertConflict(str(exc)) from exc
    except (OperationalError, InterfaceError) as exc:
        raise StoreUnavailable(str(exc), first_line(exc.orig or exc)) from exc


@contextmanager
def any_error_unavailable() -> Iterator[None]:
    """Every database error raised inside the block, an outage or not, as ``StoreUnavailable`` with its message (the
    status side's reads: whatever went wrong, the answer is "not available now")."""
    try:
        yield
    except SQLAlchemyError as exc:
        raise StoreUnavailable(str(exc)) from exc


def database_problem(exc: BaseException) -> tuple[bool, str] | None:
    """What a database library's error says, for a message: (whether the database is unreachable or unusable, the
    reason in one line); None for an error that is not the database library's."""
    if isinstance(exc, (OperationalError, ProgrammingError)):
        return True, first_line(exc.orig or exc)
    if isinstance(exc, SQLAlchemyError):
        return False, first_line(exc)
    return None
