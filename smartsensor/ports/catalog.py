"""The catalog: batched checks answered (``CheckAnswerer``), partitions listed (``PartitionLister``, ``BatchLister``)
and their columns' types (``PartitionTypeCache``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Protocol, Sequence

from smartsensor.hive_filter.names import TableName
from smartsensor.sensors.checks import Check, PartitionCheck
from smartsensor.sensors.errors import CheckError


class CheckAnswerer(Protocol):
    """Answers checks in batches and counts what that cost."""

    catalog_calls: int
    schema_calls: int
    fs_calls: int
    catalog_seconds: float

    @property
    def spark(self) -> Any:
        """Handed to user sensors' poke(context) as context["spark"]; None without Spark."""
        ...

    def check_all(self, checks: Iterable[Check]) -> dict[Check, bool | CheckError]:
        """Each distinct check's answer: True (landed), False (not yet) or the error it raised."""
        ...


class PartitionTypeCache(Protocol):
    """A catalog backend's partition column types, cached per process
    (``adapters.catalog.partition_types.PartitionTypes``)."""

    def cached(self, db: str, table: str) -> dict[str, str] | None:
        """The table's partition column types if known and fresh, else None (no catalog call)."""
        ...

    def fetch(self, db: str, table: str) -> dict[str, str] | None:
        """One catalog call: {lower-cased partition column: type}, or None if the table is missing."""
        ...

    def forget(self, db: str, table: str) -> None:
        """Drop a table's cached types (it went missing, or its listing was rejected)."""
        ...

    def normalize(
        self, db: str, table: str, types: dict[str, str], specs: list[tuple[tuple[str, str], ...]]
    ) -> Sequence[tuple[tuple[str, str], ...] | CheckError]:
        """Each spec with its values cast as the catalog stores them, or the error naming a value its column
        rejects."""
        ...

    def prepared(self, db: str, table: str) -> dict[Any, Any]:
        """The table's memo of checks made ready for a listing under its cached types (dropped with them)."""
        ...


class PartitionLister(Protocol):
    """One catalog backend's partition listing (Spark's external catalog, or the metastore's thrift API):
    what ``adapters.catalog.batch.BatchChecker`` lists through."""

    @property
    def types(self) -> PartitionTypeCache:
        """The backend's cache of partition column types."""
        ...

    def list_rows(self, db: str, table: str, spec: dict[str, str], columns: dict[str, str]) -> list[str] | None:
        """Escaped partition names (``ds=a%2Fb/hr=00``) of db.table, at least those matching ``spec`` (whose
        keys are all among ``columns``, the table's partition column types); None if the table or database
        is missing. Raises Transient/PermanentCheckError."""
        ...


@dataclass(frozen=True)
class ListingRequest:
    """One table's part of a round's listing: its partition column types (in partition order), its checks with
    values as the catalog stores them, and ``narrowing``, the plain values common to all of them (a listing may
    be narrowed by them)."""

    db: str
    table: str
    columns: dict[str, str]
    checks: tuple[PartitionCheck, ...]
    narrowing: dict[str, str]

    @property
    def table_name(self) -> TableName:
        """The table this request lists: what a listing's answer is keyed by."""
        return TableName(self.db, self.table)


@dataclass(frozen=True)
class AnsweredListing:
    """A table's listing from a backend that decides some of the request's checks itself (the metastore-database
    backend following its feed knows which exact names are present): their ``answers``, and the escaped partition
    ``names`` the other checks are answered from (at least those they match)."""

    answers: dict[PartitionCheck, bool]
    names: list[str]


class BatchLister(PartitionLister, Protocol):
    """A backend that lists many tables in one go (several connections at once, or one statement)."""

    def fetch_types(
        self, tables: Sequence[TableName]
    ) -> tuple[dict[TableName, dict[str, str] | None | CheckError], int]:
        """The partition column types of ``tables`` (None: missing; a CheckError: could not be read), also put
        into ``types``' cache; and the catalog calls made."""
        ...

    def list_tables(
        self, requests: Sequence[ListingRequest]
    ) -> tuple[dict[TableName, list[str] | AnsweredListing | None | CheckError], int]:
        """For each request's table: escaped partition names, at least those its checks match, or an
        AnsweredListing (None: the table or its database is missing; a CheckError: that table could not be
        listed). Also the catalog calls made."""
        ...
