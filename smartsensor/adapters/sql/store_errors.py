"""The SQL stores' errors as the ports name them (``ports.StoreError``): a lost or refused connection is
``StoreUnavailable``, a unique key another writer took first is ``InsertConflict``; the SQLAlchemy exception stays
their ``__cause__`` (the CLI reports it as before). Every other error passes unchanged."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from sqlalchemy.exc import IntegrityError, InterfaceError, OperationalError

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
