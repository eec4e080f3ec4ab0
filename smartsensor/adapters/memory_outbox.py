"""``ports.OutboxStore`` in memory: the landing publisher's watches and outbox with the SQL store's guards, for tests
of the publisher without a database (held to ``adapters.sql.landings.SqlOutboxStore`` by
tests/integration/test_outbox_parity.py). One lock makes each operation a transaction; not shared between
processes."""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Callable, Iterable, Sequence

from smartsensor.domain.landings import (
    BASELINE,
    DELIVERED,
    PENDING,
    REJECTED,
    SENDING,
    SETTLED,
    UNDELIVERED,
    ClaimedLanding,
    WatchRow,
)

UNSETTLED = (PENDING, SENDING, REJECTED)  # the states a late 2xx, or an event found in Airflow, ends


@dataclass(frozen=True)
class Watch:
    """A watched table (``asset_watch``)."""

    uri: str
    asset_id: int
    db_name: str
    table_name: str
    shardcode: int
    watched_since: datetime
    seen_at: datetime
    baselined_at: datetime | None = None
    forgotten_at: datetime | None = None  # when retention forgot it (its last ``seen_at``); it stays, marked
    paused_consumers: str | None = None  # its consumers Airflow had paused at its last listing

    @property
    def watched(self) -> bool:
        """Not forgotten, or listed again since (``adapters.sql.landings.WATCHED``)."""
        return self.forgotten_at is None or self.seen_at > self.forgotten_at


@dataclass(frozen=True)
class Landing:
    """An outbox row (``landing_outbox``)."""

    id: int
    uri: str
    partition_name: str
    partition_key: str
    shardcode: int
    state: str
    landed_at: datetime
    next_attempt_at: datetime
    generation: int = 0
    part_id: int | None = None
    claim_token: str | None = None
    claimed_by: str | None = None
    claimed_until: datetime | None = None
    attempts: int = 0
    posts: int = 0
    unknown_outcomes: int = 0
    last_error: str | None = None
    delivered_at: datetime | None = None
    event_id: int | None = None
    unknown_since: datetime | None = None
    post_started_at: datetime | None = None
    missing_since: datetime | None = None


def _in(shardcode: int, ranges: Sequence[tuple[int, int]]) -> bool:
    return any(lo <= shardcode < hi for lo, hi in ranges)


class MemoryOutboxStore:
    """The watches and the outbox as two dicts (uri → Watch, id → Landing)."""

    def __init__(self) -> None:
        self.watches: dict[str, Watch] = {}
        self.outbox: dict[int, Landing] = {}
        self._next_id = 1
        self._lock = threading.Lock()

    @property
    def lock(self) -> AbstractContextManager[Any]:
        """The lock every operation holds: what makes an operation of another store over these rows
        (``adapters.memory_retention``) one transaction."""
        return self._lock

    # -- watches ---------------------------------------------------------------------------------------------

    def record_watches(self, rows: list[dict[str, Any]], now: datetime) -> int:
        with self._lock:
            added = 0
            for row in rows:
                watch = self.watches.get(row["uri"])
                if watch is None:
                    self.watches[row["uri"]] = Watch(**row)
                    added += 1
                else:
                    paused = row.get("paused_consumers")
                    self.watches[row["uri"]] = replace(watch, asset_id=row["asset_id"], paused_consumers=paused)
            for row in rows:
                self.watches[row["uri"]] = replace(self.watches[row["uri"]], seen_at=now)
            return added

    def read_watches(self, ranges: Sequence[tuple[int, int]], seen_since: datetime) -> list[WatchRow]:
        with self._lock:
            return [
                WatchRow(w.uri, w.asset_id, w.db_name, w.table_name, w.shardcode, w.baselined_at is not None)
                for uri, w in sorted(self.watches.items())
                if _in(w.shardcode, ranges) and w.seen_at >= seen_since
            ]

    def newest_watch_seen(self) -> datetime | None:
        with self._lock:
            return max((w.seen_at for w in self.watches.values()), default=None)

    # -- enqueueing --------------------------------------------------------------------------------------------

    def read_outbox_names(self, uri: str) -> dict[str, int | None]:
        with self._lock:
            return {name: part_id for name, (_, part_id) in self._latest(uri, None).items()}

    def _latest(self, uri: str, names: set[str] | None) -> dict[str, tuple[int, int | None]]:
        latest: dict[str, tuple[int, int | None]] = {}
        for row in self.outbox.values():
            if row.uri == uri and (names is None or row.partition_name in names):
                if row.partition_name not in latest or row.generation > latest[row.partition_name][0]:
                    latest[row.partition_name] = (row.generation, row.part_id)
        return latest

    def _insert(
        self, watch: WatchRow, rows: Iterable[tuple[str, str, int, int | None]], state: str, now: datetime
    ) -> int:
        """Rows (name, key, generation, id) not in the outbox yet (unique by uri, name, generation); how many."""
        taken = {(r.uri, r.partition_name, r.generation) for r in self.outbox.values()}
        added = 0
        for name, key, generation, part_id in rows:
            if (watch.uri, name, generation) in taken:
                continue
            taken.add((watch.uri, name, generation))
            self.outbox[self._next_id] = Landing(
                self._next_id, watch.uri, name, key, watch.shardcode, state, now, now, generation, part_id
            )
            self._next_id += 1
            added += 1
        return added

    def _baseline_kept(self, uri: str) -> bool:
        watch = self.watches.get(uri)
        return watch is not None and watch.baselined_at is not None

    def enqueue_landings(
        self,
        watch: WatchRow,
        landings: Iterable[tuple[str, str, int | None]],
        listed: Callable[[], Iterable[tuple[str, str, int | None]]],
        now: datetime,
        publish_existing: bool,
    ) -> tuple[str, int]:
        with self._lock:
            stored = self.watches.get(watch.uri)
            if self._baseline_kept(watch.uri):
                state, chosen = PENDING, list(landings)
            elif stored is not None:
                self.watches[watch.uri] = replace(stored, baselined_at=now)
                fresh = publish_existing and stored.forgotten_at is None
                state, chosen = (PENDING if fresh else BASELINE), list(listed())
            else:
                return PENDING, 0
            return state, self._insert(watch, ((n, k, 0, i) for n, k, i in chosen), state, now)

    def enqueue_recreated(
        self, watch: WatchRow, listed: dict[str, tuple[str, int]], now: datetime
    ) -> tuple[int, dict[str, int | None]]:
        with self._lock:
            if not listed or not self._baseline_kept(watch.uri):
                return 0, {}
            latest = self._latest(watch.uri, set(listed))
            seen = {
                (row.partition_name, row.part_id) for row in self.outbox.values() if row.uri == watch.uri
            }  # every id each name's generations had: one seen before is a database that went back
            record: dict[str, int | None] = {name: row[1] for name, row in latest.items()}
            new: list[tuple[str, str, int, int | None]] = []
            for name, (generation, part_id) in sorted(latest.items()):
                key, now_id = listed[name]
                if part_id is not None and (name, now_id) in seen:
                    continue
                record[name] = now_id
                if part_id is None:
                    for row in self.outbox.values():
                        if (row.uri, row.partition_name, row.generation) == (watch.uri, name, generation):
                            self.outbox[row.id] = replace(row, part_id=now_id)
                    continue
                new.append((name, key, generation + 1, now_id))
            return self._insert(watch, new, PENDING, now), record

    def read_missing(self, uri: str) -> dict[str, datetime]:
        with self._lock:
            missing: dict[str, datetime] = {}
            for row in self.outbox.values():
                if row.uri == uri and row.missing_since is not None:
                    since = missing.get(row.partition_name)
                    missing[row.partition_name] = row.missing_since if since is None else min(since, row.missing_since)
            return missing

    def mark_missing(self, uri: str, gone: Sequence[str], back: Sequence[str], now: datetime) -> None:
        with self._lock:
            for row in list(self.outbox.values()):
                if row.uri != uri:
                    continue
                if row.partition_name in gone and row.missing_since is None:
                    self.outbox[row.id] = replace(row, missing_since=now)
                elif row.partition_name in back and row.missing_since is not None:
                    self.outbox[row.id] = replace(row, missing_since=None)

    def forget_dropped(self, uri: str, names: Sequence[str], cutoff: datetime) -> list[str]:
        with self._lock:
            rows = [row for row in self.outbox.values() if row.uri == uri and row.partition_name in set(names)]
            kept = {
                row.partition_name
                for row in rows
                if row.state not in SETTLED or row.missing_since is None or row.missing_since >= cutoff
            }
            gone = [row for row in rows if row.partition_name not in kept]
            for row in gone:
                del self.outbox[row.id]
            return sorted({row.partition_name for row in gone})

    # -- claims and their ends ---------------------------------------------------------------------------------

    def claim_landings(
        self,
        ranges: Sequence[tuple[int, int]],
        owner: str,
        token: str,
        now: datetime,
        until: datetime,
        limit: int,
    ) -> list[ClaimedLanding]:
        if not ranges or limit <= 0:
            return []
        with self._lock:
            due = sorted(
                (
                    row
                    for row in self.outbox.values()
                    if row.state in UNDELIVERED and _in(row.shardcode, ranges) and row.next_attempt_at <= now
                    if row.posts == 0
                    and (row.state == PENDING or (row.claimed_until is not None and row.claimed_until <= now))
                ),
                key=lambda r: (r.landed_at, r.id),
            )[:limit]
            claimed = []
            for row in due:
                posted = row.state == SENDING and row.post_started_at is not None  # the lapsed claim had posted
                taken = replace(
                    row,
                    state=SENDING,
                    claim_token=token,
                    claimed_by=owner,
                    claimed_until=until,
                    attempts=row.attempts + 1,
                    unknown_outcomes=row.unknown_outcomes + (1 if posted else 0),
                    unknown_since=(row.unknown_since or row.post_started_at) if posted else row.unknown_since,
                    post_started_at=None,
                )
                self.outbox[row.id] = taken
                claimed.append(
                    ClaimedLanding(
                        taken.id,
                        taken.uri,
                        taken.partition_name,
                        taken.partition_key,
                        taken.attempts,
                        token,
                        taken.landed_at,
                        taken.unknown_outcomes,
                        taken.unknown_since,
                    )
                )
            return claimed

    def _held(self, row_id: int, token: str) -> Landing | None:
        row = self.outbox.get(row_id)
        return row if row is not None and row.state == SENDING and row.claim_token == token else None

    @staticmethod
    def _unless_taken(row: Landing, state: str, now: datetime) -> dict[str, Any]:
        """``state``, or ``delivered`` for a row an earlier post reached (its 2xx counted in ``posts``)."""
        if row.posts > 0:
            return {"state": DELIVERED, "delivered_at": row.delivered_at or now}
        return {"state": state}

    def release_unposted(self, row_ids: list[int], token: str, now: datetime) -> int:
        with self._lock:
            released = 0
            for row_id in row_ids:
                row = self._held(row_id, token)
                if row is not None:
                    self.outbox[row_id] = replace(
                        row,
                        **self._unless_taken(row, PENDING, now),
                        attempts=row.attempts - 1,
                        claim_token=None,
                        claimed_until=None,
                        post_started_at=None,
                    )
                    released += 1
            return released

    def begin_post(self, row_id: int, token: str, now: datetime, until: datetime) -> bool:
        with self._lock:
            row = self._held(row_id, token)
            if row is None or row.claimed_until is None or row.claimed_until <= now:
                return False
            self.outbox[row_id] = replace(row, claimed_until=until, post_started_at=now, unknown_since=None)
            return True

    def _settle(self, row_id: int, token: str, values: dict[str, Any], counted: bool, events: int = 0) -> bool:
        """Settle the row ``delivered`` with ``values`` (``counted``: one more 2xx): under the claim if it holds;
        else whoever holds it unless it is settled already (then only the 2xx is counted). Whether it held."""
        row = self.outbox.get(row_id)
        if row is None:
            return False
        settled = {**values, "claim_token": None, "claimed_until": None, "unknown_since": None, "post_started_at": None}
        posts = max(row.posts + (1 if counted else 0), events if events > 1 else 0)
        if self._held(row_id, token) is not None:
            self.outbox[row_id] = replace(row, **settled, posts=posts)
            return True
        if row.state in UNSETTLED:
            self.outbox[row_id] = replace(row, **settled, posts=posts)
        elif counted:
            self.outbox[row_id] = replace(row, posts=posts)
        return False

    def end_delivered(self, row_id: int, token: str, now: datetime, event_id: int | None) -> bool:
        with self._lock:
            return self._settle(row_id, token, {"state": DELIVERED, "delivered_at": now, "event_id": event_id}, True)

    def end_found(self, row_id: int, token: str, now: datetime, event_id: int, events: int = 1) -> bool:
        with self._lock:
            values = {"state": DELIVERED, "delivered_at": now, "event_id": event_id}
            return self._settle(row_id, token, values, False, events)

    def end_unanswered(self, row_id: int, token: str, now: datetime, next_attempt_at: datetime, error: str) -> bool:
        with self._lock:
            row = self._held(row_id, token)
            if row is None:
                return False
            self.outbox[row_id] = replace(
                row,
                **self._unless_taken(row, PENDING, now),
                next_attempt_at=next_attempt_at,
                last_error=error,
                claim_token=None,
                claimed_until=None,
                post_started_at=None,
            )
            return True

    def end_failed(
        self, row_id: int, token: str, now: datetime, next_attempt_at: datetime, error: str, unknown: bool
    ) -> bool:
        with self._lock:
            row = self._held(row_id, token)
            if row is None:
                return False
            self.outbox[row_id] = replace(
                row,
                **self._unless_taken(row, PENDING, now),
                next_attempt_at=next_attempt_at,
                last_error=error,
                unknown_outcomes=row.unknown_outcomes + (1 if unknown else 0),
                unknown_since=(row.unknown_since or now) if unknown else None,
                claim_token=None,
                claimed_until=None,
                post_started_at=None,
            )
            return True

    def end_rejected(self, row_id: int, token: str, now: datetime, error: str) -> bool:
        with self._lock:
            row = self._held(row_id, token)
            if row is None:
                return False
            self.outbox[row_id] = replace(
                row,
                **self._unless_taken(row, REJECTED, now),
                last_error=error,
                claim_token=None,
                claimed_until=None,
                post_started_at=None,
                unknown_since=None,
            )
            return True
