"""The landing publisher's view of the catalog (``ports.TableListings``): every partition name of its watched tables,
at the cost the backend allows.

- ``FollowingChanges`` (``metastore_db`` with ``[catalog] metastore_db_feed``): one statement per call, whatever
  the number of tables, reading the partitions the metastore added since the last one (the feed of
  ``adapters.catalog.partition_feed``); only the tables that gained a partition are returned. The cost follows
  the landings, not the tables watched. Drops are seen at the feed's next verify.
- ``ListingInBatches`` (``thrift``): one listing call per table per call, ``parallelism`` tables at a time.
- ``ListingEachTable`` (``spark``): one listing per table per call, one after another.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Protocol, Sequence

from smartsensor.adapters.catalog.metastore_db import MetastoreDbCatalog
from smartsensor.adapters.catalog.partition_types import TYPES_TTL_SECONDS
from smartsensor.hive_filter.names import TableName
from smartsensor.ports import AnsweredListing, ListingRequest, PartitionLister, PartitionTypeCache, TableListings
from smartsensor.sensors.errors import CheckError

Listings = dict[TableName, "list[str] | None | CheckError"]


class ListingEachTable:
    """Every table listed in full at every call, one after another (a lister without batches: Spark's)."""

    follows_changes = False

    def __init__(self, lister: PartitionLister) -> None:
        self.lister = lister

    def listings(self, tables: Sequence[TableName]) -> tuple[Listings, int]:
        out: Listings = {}
        calls = 0
        for key in tables:
            db, table = key
            try:
                columns = self.lister.types.cached(db, table)
                if columns is None:
                    calls += 1
                    columns = self.lister.types.fetch(db, table)
                if columns is None:
                    out[key] = None
                    continue
                calls += 1
                out[key] = self.lister.list_rows(db, table, {}, columns)
            except CheckError as exc:
                out[key] = exc
        return out, calls

    def relist(self) -> None:
        """Nothing to do: every call lists every table."""

    def partition_ids(self, db: str, table: str) -> None:
        """None: a listing cannot tell a partition dropped and added again from one kept."""
        return None


class Batches(Protocol):
    """What ``ListingInBatches`` needs of a BatchLister (read-only mappings: the thrift backend's answers are
    narrower than the port's)."""

    @property
    def types(self) -> PartitionTypeCache: ...

    def fetch_types(self, tables: Sequence[TableName]) -> tuple[Mapping[TableName, Any], int]: ...

    def list_tables(self, requests: Sequence[ListingRequest]) -> tuple[Mapping[TableName, Any], int]: ...


class ListingInBatches:
    """Every table listed in full at every call, through a BatchLister (thrift: ``parallelism`` tables at once)."""

    follows_changes = False

    def __init__(self, lister: Batches) -> None:
        self.lister = lister

    def listings(self, tables: Sequence[TableName]) -> tuple[Listings, int]:
        out: Listings = {}
        unknown = [key for key in tables if self.lister.types.cached(*key) is None]
        found: Mapping[TableName, Any] = {}
        calls = 0
        if unknown:
            found, calls = self.lister.fetch_types(unknown)
        requests = []
        for key in tables:
            columns = found[key] if key in found else self.lister.types.cached(*key)
            if columns is None or isinstance(columns, CheckError):
                out[key] = columns
            else:
                requests.append(ListingRequest(key[0], key[1], columns, (), {}))
        if requests:
            listed, more = self.lister.list_tables(requests)
            calls += more
            for key, names in listed.items():
                out[key] = names.names if isinstance(names, AnsweredListing) else names
        return out, calls

    def relist(self) -> None:
        """Nothing to do: every call lists every table."""

    def partition_ids(self, db: str, table: str) -> None:
        """None: a listing cannot tell a partition dropped and added again from one kept."""
        return None


class FollowingChanges:
    """The tables whose partitions changed since the last call, from the metastore database's feed: one statement
    per call (two when a table's columns must be read: new, expired from the types cache, or a missing table the
    feed saw a partition of)."""

    follows_changes = True

    def __init__(self, catalog: MetastoreDbCatalog, clock: Callable[[], float] = time.monotonic) -> None:
        if catalog.feed is None:
            raise ValueError("FollowingChanges needs the metastore database's feed ([catalog] metastore_db_feed)")
        self.catalog = catalog
        self.clock = clock
        self._seen: dict[TableName, int] = {}  # a table's feed serial when its names were last returned
        self._missing: dict[
            TableName, float
        ] = {}  # a table found missing → when (its columns are read again after a TTL)

    def listings(self, tables: Sequence[TableName]) -> tuple[Listings, int]:
        now = self.clock()
        types = self.catalog.types
        unknown = [
            key
            for key in tables
            if types.cached(*key) is None and now - self._missing.get(key, -TYPES_TTL_SECONDS) >= TYPES_TTL_SECONDS
        ]
        found, calls = self.catalog.fetch_types(unknown) if unknown else ({}, 0)
        out: Listings = {}
        asked: list[tuple[TableName, dict[str, str]]] = []
        for key in tables:
            columns = found[key] if key in found else types.cached(*key)
            if isinstance(columns, CheckError):
                out[key] = columns
                continue
            if columns is None:  # missing: followed without columns, so that a partition added shows as a change
                if key in found:
                    self._missing[key] = now
                    out[key] = None
                asked.append((key, {}))
                continue
            self._missing.pop(key, None)
            asked.append((key, columns))
        if not asked:
            return out, calls
        listed, made = self.catalog.list_changed(asked, self._seen)
        for key, names in listed.items():
            if key in self._missing:
                if isinstance(names, list) and names:  # the table is back: its columns are read at the next call
                    del self._missing[key]
                    self._seen.pop(key, None)
                continue
            out[key] = names
        return out, calls + made

    def partition_ids(self, db: str, table: str) -> dict[str, int] | None:
        """The PART_ID of each name of db.table as the feed read it (a partition dropped and added again has
        another), where the feed keeps ids (else None)."""
        feed = self.catalog.feed
        return self.catalog.partition_ids(db, table) if feed is not None and feed.keep_ids else None

    def relist(self) -> None:
        """Forget what was returned: the next call returns every table's names."""
        self._seen.clear()


def table_listings(lister: PartitionLister) -> TableListings:
    """The landing publisher's listings over a round's lister: the feed where the metastore database's is
    followed, batches where the backend has them, else one table after another."""
    if isinstance(lister, MetastoreDbCatalog) and lister.feed is not None:
        return FollowingChanges(lister)
    if hasattr(lister, "list_tables") and hasattr(lister, "fetch_types"):
        return ListingInBatches(lister)  # type: ignore[arg-type]  # a BatchLister (thrift), checked by its methods
    return ListingEachTable(lister)
