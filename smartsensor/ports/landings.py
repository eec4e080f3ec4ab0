"""The landing publisher's world (``OutboxStore``, ``TableListings``, ``AssetEvents``) and the landing signals
pipelines send (``LandingSignals``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable, Iterable, Protocol, Sequence

from smartsensor.domain.landings import ClaimedLanding, EventLookup, HiveAsset, PostOutcome, WatchRow
from smartsensor.hive_filter.names import TableName
from smartsensor.sensors.errors import CheckError


class OutboxStore(Protocol):
    """The landing publisher's records (ARCHITECTURE.md, "Schedule on landings"): the tables watched and the
    outbox of landed partitions. Every change of a row is guarded: a claim takes only due rows nobody holds, a claim's
    end only a row its token still holds, a late 2xx settles a row whoever holds it. ``Ranges``: shard ranges
    ``[lo, hi)``. The SQL store (``adapters.sql.landings.SqlOutboxStore``) and the memory one
    (``adapters.memory_outbox.MemoryOutboxStore``) are held to each other by tests/integration/test_outbox_parity.py."""

    def record_watches(self, rows: list[dict[str, Any]], now: datetime) -> int:
        """Watch the tables of ``rows`` (uri, asset_id, db_name, table_name, shardcode, watched_since, seen_at),
        refreshing those watched already; how many are new."""
        ...

    def read_watches(self, ranges: Sequence[tuple[int, int]], seen_since: datetime) -> list[WatchRow]:
        """The watches of ``ranges`` Airflow listed at or after ``seen_since``, by uri."""
        ...

    def newest_watch_seen(self) -> datetime | None:
        """When Airflow last listed any watched table (None: nothing watched)."""
        ...

    def read_outbox_names(self, uri: str) -> dict[str, int | None]:
        """Each partition name of ``uri`` in the outbox, with the metastore's id of its latest landing (or None)."""
        ...

    def enqueue_landings(
        self,
        watch: WatchRow,
        landings: Iterable[tuple[str, str, int | None]],
        listed: Callable[[], Iterable[tuple[str, str, int | None]]],
        now: datetime,
        publish_existing: bool,
    ) -> tuple[str, int]:
        """Enqueue ``landings`` (name, key, id) while the table's baseline holds, or take the baseline
        (``listed()``); the state used and the rows that went in."""
        ...

    def enqueue_recreated(
        self, watch: WatchRow, listed: dict[str, tuple[str, int]], now: datetime
    ) -> tuple[int, dict[str, int | None]]:
        """The next generation of each listed partition whose id grew (dropped and added again); the rows that went
        in, and each name's id on record now."""
        ...

    def read_missing(self, uri: str) -> dict[str, datetime]:
        """The names of ``uri`` a listing of its table lacked, each with since when."""
        ...

    def mark_missing(self, uri: str, gone: Sequence[str], back: Sequence[str], now: datetime) -> None:
        """Mark the rows of ``uri`` among ``gone`` missing since ``now`` (unless they are), clear those of ``back``."""
        ...

    def forget_dropped(self, uri: str, names: Sequence[str], cutoff: datetime) -> list[str]:
        """Delete the rows of ``uri`` among ``names`` missing since before ``cutoff``, a name only when all its rows
        are settled and missing that long; the names deleted."""
        ...

    def claim_landings(
        self,
        ranges: Sequence[tuple[int, int]],
        owner: str,
        token: str,
        now: datetime,
        until: datetime,
        limit: int,
    ) -> list[ClaimedLanding]:
        """Claim up to ``limit`` due rows of ``ranges`` under ``token`` until ``until``, the oldest first."""
        ...

    def release_unposted(self, row_ids: list[int], token: str, now: datetime) -> int:
        """Hand rows ``token`` holds back unposted; how many."""
        ...

    def begin_post(self, row_id: int, token: str, now: datetime, until: datetime) -> bool:
        """Just before a post: whether ``token`` still holds the row at ``now``; if so its claim lasts until
        ``until``, the row is marked as posting (a claim that lapses from here on leaves it of unknown outcome) and
        nothing earlier is unknown any more (it is posted only once Airflow was found not to hold it)."""
        ...

    def end_delivered(self, row_id: int, token: str, now: datetime, event_id: int | None) -> bool:
        """Airflow took the row's event (counted whoever holds it); whether the claim held."""
        ...

    def end_found(self, row_id: int, token: str, now: datetime, event_id: int, events: int = 1) -> bool:
        """Airflow was found to hold the row's event (``events`` of them: more than one, a duplicate, counted);
        whether the claim held."""
        ...

    def end_unanswered(self, row_id: int, token: str, now: datetime, next_attempt_at: datetime, error: str) -> bool:
        """Airflow could not say whether it holds the event: pending again, still unknown; whether the claim held."""
        ...

    def end_failed(
        self, row_id: int, token: str, now: datetime, next_attempt_at: datetime, error: str, unknown: bool
    ) -> bool:
        """The post failed (``unknown``: it may have reached Airflow): pending again; whether the claim held."""
        ...

    def end_rejected(self, row_id: int, token: str, now: datetime, error: str) -> bool:
        """Airflow can never take the event: rejected; whether the claim held."""
        ...


class TableListings(Protocol):
    """Every partition name of the tables a landing publisher watches, through the worker's catalog backend: by
    listing each table every time, or, where the backend follows the metastore's change record
    (``follows_changes``), only the tables whose partitions changed."""

    follows_changes: bool

    def listings(self, tables: Sequence[TableName]) -> tuple[dict[TableName, list[str] | None | CheckError], int]:
        """The escaped partition names (None: the table is missing; a CheckError: it could not be listed) of those
        of ``tables`` whose partitions may have changed since a call last returned them (all of them, from a
        backend that lists), and the catalog calls made. A table left out has the names it had."""
        ...

    def relist(self) -> None:
        """The next call returns every table asked about (the caller lost what it read)."""
        ...

    def partition_ids(self, db: str, table: str) -> dict[str, int] | None:
        """The metastore's id of each partition name of db.table as the last call returned it (a partition dropped
        and added again has another), or None when this backend cannot tell."""
        ...


class AssetEvents(Protocol):
    """Airflow's side of the landing publisher: the watched assets, and one event per landed partition."""

    def consumed_hive_assets(self, uri_prefix: str) -> list[HiveAsset]:
        """The ``hive://`` assets under ``uri_prefix`` that at least one DAG is scheduled on. Raises on failure."""
        ...

    def paused_dags(self) -> set[str]:
        """The DAGs Airflow has paused (it queues no run of theirs for an asset event). Raises on failure."""
        ...

    def post_event(self, asset_id: int, partition_key: str, extra: dict[str, Any]) -> PostOutcome:
        """Post one asset event; what it came to (never raises for a failure of Airflow or of the way to it)."""
        ...

    def find_events(self, asset_id: int, since: datetime, until: datetime | None, marks: dict[str, Any]) -> EventLookup:
        """The events of ``asset_id`` taken from ``since`` to ``until`` (None: no end) whose ``extra`` holds every
        item of ``marks``, or that Airflow could not tell (bounded in time and pages; never raises for a failure of
        Airflow or of the way to it)."""
        ...


class LandingSignals(Protocol):
    """The landing signals pipelines send ("this partition landed"), kept an hour for whoever listens late."""

    def record(self, canonical_name: str, now: datetime) -> None:
        """Record a signal; its notification is delivered once it is stored."""
        ...

    def delete_before(self, cutoff: datetime) -> int:
        """Drop the signals recorded before ``cutoff``; how many went."""
        ...
