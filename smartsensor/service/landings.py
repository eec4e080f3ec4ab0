"""The landing publisher: partitions of the tables Airflow DAGs are scheduled on, published as asset events with
their partition key, once each, by the worker whose leases cover the table (ARCHITECTURE.md, "Schedule on
landings"; docs/airflow.md for users).

A worker's cycle (``LandingPublisher.cycle``, its ``landings`` side job, every ``[landings] interval``):

1. **Watch** (every ``assets_refresh_interval``): Airflow's active ``hive://`` assets under ``asset_uri_prefix``
   that a DAG is scheduled on become ``asset_watch`` rows, each with the shardcode of its table.
2. **Enqueue**: for each watched table in the ranges this worker holds, list its partitions through the worker's
   catalog backend; the names the outbox lacks go in, once (a unique index; a name another worker put in first is
   skipped). The first listing of a table is its baseline, never published unless ``publish_existing``: every
   partition listed then goes in. A partition is new only while its table's baseline holds (checked, and the watch
   held, in the transaction that enqueues it): retention deletes a table's rows only after taking its baseline away
   (a table no longer watched), or deletes the rows of partitions the table no longer has (``_track_dropped``), so
   a landing whose row was pruned is not published again. A partition is forgotten only once listings of its table
   have lacked it for ``[retention] max_age_days`` in a row (``missing_since``, ``_track_dropped``).
3. **Publish**: claim the due rows of those ranges (guarded, under a token, until a lease timeout from now), post
   each to Airflow, and end it under the same claim: ``delivered``, ``pending`` again after a backoff, or
   ``rejected``. The oldest landings go first.

A row whose earlier post may have reached Airflow (a timeout; a claim that lapsed with the row ``sending``: its
worker was killed or stalled mid-post; counted in ``unknown_outcomes``, unknown since ``unknown_since``) is never
posted again blindly: Airflow is asked first whether it holds an event whose ``extra`` names the row
(``find_events``). Found: ``delivered``, not posted. Not found: posted. Airflow cannot tell (down, a 5xx): the row
waits (a backoff) and is asked about again, however long that takes; `status` names it, with since when, and says
so once it is past ``[landings] unknown_outcome_patience``. A 2xx read after the claim lapsed settles the row
``delivered`` whoever holds it now, and a claim checks that it still holds the row just before it posts, so a row
Airflow is known to hold is never posted again. What is left (docs/airflow.md, "The guarantee"): a post that
reaches Airflow only after its claim lapsed and after another worker looked its event up.
"""

from __future__ import annotations

import logging
import random
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from functools import partial
from typing import Any, Callable, Sequence

from smartsensor.config import Config, read_secret_file
from smartsensor.domain import clock as wall_clock
from smartsensor.domain.landings import (
    BASELINE,
    HIVE_PARTITION,
    LANDING_ID,
    ClaimedLanding,
    HiveAsset,
    PostOutcome,
    WatchRow,
    backoff,
    key_problem,
    lookup_window,
    partition_key,
    table_shardcode,
)
from smartsensor.hive_filter.names import TableName
from smartsensor.ports import AssetEvents, OutboxStore, TableListings
from smartsensor.sensors.errors import CheckError, first_line

log = logging.getLogger(__name__)

STALE_REFRESHES = 3  # a watched table Airflow has not listed for this many refreshes is no longer published
EVER = datetime.min.replace(tzinfo=timezone.utc)  # every watch, however long since Airflow last listed it
FAILING_IN_A_ROW = 3  # failed posts in a row that end a cycle's batch (the rest are handed back unposted)


def airflow_password(cfg: Config) -> str:
    """The first line of ``[landings] airflow_password_file`` (ConfigError when it cannot be read or is empty)."""
    return read_secret_file(
        cfg.settings.landings.airflow_password_file, "[landings] airflow_password_file", "the password"
    )


@dataclass
class CycleReport:
    """What one cycle did (logged at DEBUG; the tests read it)."""

    watched: int = 0
    listed: int = 0  # tables whose names were read (following the change record: those that changed)
    catalog_calls: int = 0  # calls to the catalog (metastore calls, or statements on its database)
    enqueued: int = 0
    recreated: int = 0  # partitions dropped and added again, enqueued again ([landings] publish_recreated)
    baseline: int = 0
    claimed: int = 0
    delivered: int = 0
    retried: int = 0
    rejected: int = 0
    lost_claims: int = 0  # attempts ended after their claim lapsed: another worker owns the row now
    found: int = 0  # rows of unknown outcome whose event Airflow was found to hold: delivered, not posted again
    unanswered: int = 0  # rows of unknown outcome Airflow could not say it holds: waiting, not posted
    released: int = 0  # claimed rows handed back unposted (Airflow kept failing, or the claim ran short)
    forgotten: int = 0  # settled rows deleted past [retention] max_age_days: their partitions left the table
    errors: list[str] = field(default_factory=list)


class LandingPublisher:
    """One worker's landing publisher: ``cycle(ranges)`` with the shard ranges it holds."""

    def __init__(
        self,
        store: OutboxStore,
        cfg: Config,
        events: AssetEvents,
        listings: TableListings,
        owner: str,
        clock: Callable[[], datetime] = wall_clock.now,
        rng: random.Random | None = None,
    ) -> None:
        self.store, self.cfg, self.events, self.listings, self.owner = store, cfg, events, listings, owner
        self.settings = cfg.settings.landings
        # A cycle over the change record costs one catalog call whatever the tables: it can run more often.
        self.interval = self.settings.change_record_interval if listings.follows_changes else self.settings.interval
        self.clock = clock
        self.rng = rng if rng is not None else random.Random()
        self.claim_seconds = cfg.settings.smart_sensor.lease_timeout  # a claim lapses as a lease does
        self._refreshed_at: datetime | None = None
        # uri → the partition names known to be in the outbox, each with the metastore's id of its latest landing
        self._known: dict[str, dict[str, int | None]] = {}
        self._missing: dict[str, dict[str, datetime]] = {}  # uri → names its listings lack, each since when
        self._forgot_at: dict[str, datetime] = {}  # uri → when its dropped partitions' rows were last deleted
        self._failing: dict[str, str] = {}  # what failed last (its kind → the line logged), one WARNING per outage
        self.watched: set[TableName] = set()  # (db, table) watched in the ranges of the latest enqueue

    # -- the steps ---------------------------------------------------------------------------------------

    def refresh_watches(self, now: datetime) -> int:
        """Read Airflow's watched assets into ``asset_watch``: how many tables are newly watched. Raises on an
        Airflow or database failure."""
        assets: list[HiveAsset] = self.events.consumed_hive_assets(self.settings.asset_uri_prefix)
        paused = self._paused_dags() if assets else set()
        limit = self.cfg.shard_code_upper_limit
        rows = [
            {
                "uri": a.uri,
                "asset_id": a.asset_id,
                "db_name": a.db,
                "table_name": a.table,
                "shardcode": table_shardcode(a.db, a.table, limit),
                "watched_since": now,
                "seen_at": now,
                # Airflow queues no run of a paused DAG for an event: `status` names them (docs/airflow.md)
                "paused_consumers": ", ".join(c for c in a.consumers if c in paused) or None,
            }
            for a in assets
        ]
        added = self.store.record_watches(rows, now)
        self._refreshed_at = now
        if added:
            log.info("landings: %d more tables watched (%d in all)", added, len(rows))
        return added

    def enqueue(
        self,
        ranges: Sequence[tuple[int, int]],
        now: datetime,
        report: CycleReport,
        only: set[TableName] | None = None,
    ) -> None:
        """Put the partitions that landed on the watched tables of ``ranges`` (``only``: those of them among these
        tables) into the outbox, once each. A table that cannot be listed is skipped this cycle (logged)."""
        # Stale means "not in Airflow's last few answers", counted from this worker's latest refresh that worked (or,
        # before its first, the newest one on record): while Airflow cannot be asked, every table stays watched.
        stale = timedelta(seconds=STALE_REFRESHES * self.settings.assets_refresh_interval)
        anchor = self._refreshed_at or self.store.newest_watch_seen() or now
        watches = self.store.read_watches(ranges, anchor - stale)
        self.watched = {TableName(w.db, w.table) for w in watches}
        if only is None:  # what this worker no longer publishes (a range handed over, a table unwatched) is forgotten
            uris = {w.uri for w in watches}
            self._known = {uri: names for uri, names in self._known.items() if uri in uris}
            self._missing = {uri: names for uri, names in self._missing.items() if uri in uris}
            self._forgot_at = {uri: at for uri, at in self._forgot_at.items() if uri in uris}
        else:
            watches = [w for w in watches if (w.db, w.table) in only]
        report.watched = len(watches)
        knowns: dict[str, dict[str, int | None]] = {}
        for watch in watches:  # read before the listing: a row retention deletes later is of a partition it lacks
            known = self._known.get(watch.uri)
            if known is None:
                known = self._known[watch.uri] = self.store.read_outbox_names(watch.uri)
            knowns[watch.uri] = known
        listed, calls = self.listings.listings(list(dict.fromkeys(TableName(w.db, w.table) for w in watches)))
        report.catalog_calls += calls
        for watch in watches:
            table = TableName(watch.db, watch.table)
            if table not in listed:
                continue  # its partitions have not changed since it was last listed
            names = listed[table]
            if isinstance(names, CheckError):  # one table's catalog failure must not stop the others
                report.errors.append(f"listing {watch.db}.{watch.table}: {first_line(names)}")
                continue
            report.listed += 1
            self._enqueue_table(watch, names, knowns[watch.uri], now, report)

    def _enqueue_table(
        self,
        watch: WatchRow,
        names: list[str] | None,
        known: dict[str, int | None],
        now: datetime,
        report: CycleReport,
    ) -> None:
        """Enqueue what landed on one table listed (``names``; None: the table is missing), ``known`` being the
        outbox's names of it (each with the metastore's id of its latest landing): the names it lacks, and, for a
        table of ``publish_recreated``, the names whose partition has another id now (dropped and added again)."""
        if names is None:
            names = []  # the table is missing from the catalog: nothing landed (its baseline is empty)
        else:
            report.forgotten += self._track_dropped(watch.uri, names, known, now)
        ids = self.listings.partition_ids(watch.db, watch.table) or {}
        new = [n for n in names if n not in known]
        if new or not watch.baselined:
            state, added = self.store.enqueue_landings(
                watch, _keyed(new, ids), partial(_keyed, names, ids), now, self.settings.publish_existing
            )
            known.update((n, ids.get(n)) for n in names if n not in known)  # new ones, or all at the baseline
            if state == BASELINE:
                report.baseline += added
                log.info("landings: %s watched from now on (%d partitions present are its baseline)", watch.uri, added)
            else:
                report.enqueued += added
        if ids and self._publishes_recreated(watch):
            present = set(names)
            moved = {n: (_key_or_blank(n), i) for n, i in ids.items() if n in present and _newer(i, known.get(n))}
            if moved:
                added, recorded = self.store.enqueue_recreated(watch, moved, now)
                known.update(recorded)
                report.recreated += added
                if added:
                    log.info("landings: %s: %d partitions dropped and added again, published again", watch.uri, added)

    def _publishes_recreated(self, watch: WatchRow) -> bool:
        chosen = self.settings.publish_recreated
        return "*" in chosen or f"{watch.db}.{watch.table}" in chosen

    def _forget_memory(self) -> None:
        """Drop what this worker remembers of the outbox: it is read again before the next listing."""
        self._known.clear()
        self._missing.clear()
        self._forgot_at.clear()

    def _track_dropped(self, uri: str, names: list[str], known: dict[str, int | None], now: datetime) -> int:
        """Note which landings of ``uri`` its table's listing (``names``) lacks, since when, and which it has again;
        then, once per ``[retention] interval`` (with ``[retention] enabled`` and ``forget_dropped_landings``),
        delete the settled rows of partitions missing ``max_age_days`` in a row; how many names were forgotten. A
        partition back before that keeps its row (a replica that lagged, a table rebuilt: no second event); one
        made anew after it is a new landing. ``batch_size`` names per statement."""
        retention = self.cfg.settings.retention
        missing = self._missing.get(uri)
        if missing is None:
            missing = self._missing[uri] = self.store.read_missing(uri)
        present = set(names)
        back = [n for n in missing if n in present]
        gone = sorted(n for n in known if n not in present and n not in missing)
        for i in range(0, max(len(back), len(gone)), retention.batch_size):
            self.store.mark_missing(uri, gone[i : i + retention.batch_size], back[i : i + retention.batch_size], now)
        for name in back:
            del missing[name]
        missing.update((name, now) for name in gone)
        last = self._forgot_at.get(uri)
        if not (retention.enabled and retention.forget_dropped_landings) or (
            last is not None and (now - last).total_seconds() < retention.interval
        ):
            return 0
        self._forgot_at[uri] = now
        cutoff = now - timedelta(days=retention.max_age_days)
        due = sorted(n for n, since in missing.items() if since < cutoff)
        forgotten = 0
        for i in range(0, len(due), retention.batch_size):
            for name in self.store.forget_dropped(uri, due[i : i + retention.batch_size], cutoff):
                known.pop(name, None)
                missing.pop(name, None)
                forgotten += 1
        return forgotten

    def publish(self, ranges: Sequence[tuple[int, int]], now: datetime, report: CycleReport) -> None:
        """Claim the due outbox rows of ``ranges`` and post each; every attempt ends under its claim."""
        token = uuid.uuid4().hex
        until = now + timedelta(seconds=self.claim_seconds)
        claimed = self.store.claim_landings(ranges, self.owner, token, now, until, self.settings.batch)
        report.claimed = len(claimed)
        if not claimed:
            return
        asset_ids = {w.uri: w.asset_id for w in self.store.read_watches(ranges, EVER)}
        # Stop early, handing the rows not posted back at once, when Airflow fails FAILING_IN_A_ROW times running (it
        # is down: the rest would only wait out their timeouts). Each post extends its row's claim as it begins
        # (``begin_post``): a slow look-up or post before it costs the rest of the batch nothing but waiting, and a
        # row whose claim lapsed meanwhile is not posted (another worker may hold it now).
        failures = 0
        for i, row in enumerate(claimed):
            if failures >= FAILING_IN_A_ROW:
                report.released += self.store.release_unposted([r.id for r in claimed[i:]], token, self.clock())
                return
            failed = self._attempt(row, asset_ids.get(row.uri), report)
            failures = failures + 1 if failed else 0

    def _attempt(self, row: ClaimedLanding, asset_id: int | None, report: CycleReport) -> bool:
        """Post one claimed row and end it under its claim; whether Airflow or the way to it failed. A row of
        unknown outcome is looked up first (``_settled_by_lookup``); a row is posted only while its claim still
        holds it, extended as the post begins (``begin_post``)."""
        problem = key_problem(row.partition_key, row.partition_name)
        if problem is not None or asset_id is None:
            why = problem or f"{row.uri} is no longer watched"
            if self.store.end_rejected(row.id, row.token, self.clock(), why):
                report.rejected += 1
                log.warning("landings: %s %s not published: %s", row.uri, row.partition_name, why)
            else:
                report.lost_claims += 1
            return False
        if row.unknown_since is not None:  # unknown now (an outcome known since, a 503, cleared it)
            settled = self._settled_by_lookup(row, asset_id, report)
            if settled is not None:
                return settled
        now = self.clock()
        if not self.store.begin_post(
            row.id, row.token, now, now + timedelta(seconds=self.claim_seconds)
        ):  # the claim lapsed (another worker may hold the row now), or a late 2xx settled the row: not posted
            if self.store.release_unposted([row.id], row.token, self.clock()):
                report.released += 1
            else:
                report.lost_claims += 1
            return False
        extra: dict[str, Any] = {
            HIVE_PARTITION: row.partition_name,
            "landed_at": wall_clock.iso(row.landed_at) + "Z",
            LANDING_ID: row.id,
        }
        return self.end_attempt(row, self.events.post_event(asset_id, row.partition_key, extra), report)

    def _settled_by_lookup(self, row: ClaimedLanding, asset_id: int, report: CycleReport) -> bool | None:
        """Ask Airflow whether it holds the event of a row whose earlier post had an unknown outcome. Found: the
        row is ``delivered`` (False: not a failure). Airflow cannot tell: the row waits a backoff, not posted
        (True: a failure). Not found: None, post it."""
        since, until = lookup_window(
            row.unknown_since, row.landed_at, self.claim_seconds, self.settings.request_timeout
        )
        marks = {LANDING_ID: row.id, HIVE_PARTITION: row.partition_name}
        lookup = self.events.find_events(asset_id, since, until, marks)
        now = self.clock()
        if lookup.answered and lookup.event_ids:
            if self.store.end_found(row.id, row.token, now, lookup.event_ids[0], len(lookup.event_ids)):
                report.found += 1
            else:
                report.lost_claims += 1
            many = f" ({len(lookup.event_ids)} events: a duplicate)" if len(lookup.event_ids) > 1 else ""
            log.info(
                "landings: %s %s: Airflow holds its event %d%s; not posted again",
                row.uri,
                row.partition_name,
                lookup.event_ids[0],
                many,
            )
            return False
        if lookup.answered:
            return None
        delay = backoff(row.attempts, self.settings.retry_base, self.settings.retry_max, self.rng)
        why = f"outcome unknown, asking Airflow: {lookup.detail}"
        if self.store.end_unanswered(row.id, row.token, now, now + timedelta(seconds=delay), why):
            report.unanswered += 1
        else:
            report.lost_claims += 1
        unknown_for = (now - row.unknown_since).total_seconds() if row.unknown_since else 0.0
        past = unknown_for > self.settings.unknown_outcome_patience
        report.errors.append(
            f"{row.uri} {row.partition_key!r} (landing {row.id}): {why}"
            + (
                f"; unknown for {unknown_for:.0f} s, past [landings] unknown_outcome_patience: still not posted again"
                if past
                else ""
            )
        )
        return True

    def end_attempt(self, row: ClaimedLanding, outcome: PostOutcome, report: CycleReport) -> bool:
        """End a posted row under its claim as ``outcome`` says; whether Airflow or the way to it failed."""
        if outcome.kind == "delivered":
            if self.store.end_delivered(row.id, row.token, self.clock(), outcome.event_id):
                report.delivered += 1
            else:
                report.lost_claims += 1
                log.warning(
                    "landings: %s %s posted after this worker's claim lapsed: counted on the row, which is delivered "
                    "now (a duplicate only if the worker that took it over had posted it already)",
                    row.uri,
                    row.partition_name,
                )
            return False
        if outcome.kind == "rejected":
            ended = self.store.end_rejected(row.id, row.token, self.clock(), outcome.detail)
            report.rejected += ended
            log.warning("landings: Airflow refused %s %s for good: %s", row.uri, row.partition_name, outcome.detail)
        else:
            delay = backoff(row.attempts, self.settings.retry_base, self.settings.retry_max, self.rng)
            now = self.clock()
            unknown = outcome.kind == "unknown"
            next_at = now + timedelta(seconds=delay)
            ended = self.store.end_failed(row.id, row.token, now, next_at, outcome.detail, unknown)
            report.retried += ended
            report.errors.append(f"posting {row.uri} {row.partition_key!r} (attempt {row.attempts}): {outcome.detail}")
        if not ended:
            report.lost_claims += 1
        return outcome.kind in ("retry", "unknown")

    # -- the cycle -----------------------------------------------------------------------------------------

    def cycle(self, ranges: Sequence[tuple[int, int]], only: set[TableName] | None = None) -> CycleReport:
        """One cycle over ``ranges`` (the shard ranges this worker holds): refresh the watches when due, enqueue
        (``only``: these tables, named by landing signals), publish. A failure of Airflow, the catalog or the
        database is logged (one WARNING per kind until it clears) and the next cycle retries; nothing is lost
        meanwhile."""
        report = CycleReport()
        now = self.clock()
        refresh = timedelta(seconds=self.settings.assets_refresh_interval)
        steps: list[tuple[str, Callable[[], Any]]] = []
        if self._refreshed_at is None or now - self._refreshed_at >= refresh:
            steps.append(("reading Airflow's assets", lambda: self.refresh_watches(now)))
        if ranges:
            steps.append(("enqueueing landings", lambda: self.enqueue(ranges, now, report, only)))
            steps.append(("publishing landings", lambda: self.publish(ranges, self.clock(), report)))
        else:  # no range held: nothing to remember
            self._forget_memory()
        for what, step in steps:
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - Airflow or the database is down: the next cycle retries
                self._failed(what, first_line(exc))
                if what != "reading Airflow's assets":
                    self._forget_memory()  # re-read from the outbox: a failed transaction may have left it unsure
                    self.listings.relist()  # and every table listed again: a listing read may not be enqueued
                continue
            if what in self._failing:
                log.info("landings: %s works again", what)
                del self._failing[what]
        for error in report.errors:
            log.warning("landings: %s", error)
        return report

    def _paused_dags(self) -> set[str]:
        """Airflow's paused DAGs, for `status` only: a failure to read them (an Airflow user without read on DAGs,
        an API without the listing) is logged once and watches every table all the same, none named paused."""
        what = "reading Airflow's paused DAGs (status names no paused consumer meanwhile)"
        try:
            paused = self.events.paused_dags()
        except Exception as exc:  # noqa: BLE001 - informational: the landings go on without it
            self._failed(what, first_line(exc))
            return set()
        if self._failing.pop(what, None) is not None:
            log.info("landings: %s works again", what)
        return paused

    def _failed(self, what: str, line: str) -> None:
        level = logging.DEBUG if self._failing.get(what) == line else logging.WARNING
        log.log(level, "landings: %s failed: %s", what, line)
        self._failing[what] = line


def _newer(part_id: int, known: int | None) -> bool:
    """Whether a partition listed with ``part_id`` may be another landing than the one on record (``known``: its
    id; None: not known): any other id, lower too (each metastore instance hands out ids from a block of its own).
    The outbox decides (``OutboxStore.enqueue_recreated``): an id no landing of that name had is a new one; an id
    one had is a database that went back."""
    return known is None or part_id != known


def _keyed(names: list[str], ids: dict[str, int]) -> list[tuple[str, str, int | None]]:
    """(name, its partition key or "", the metastore's id of its partition or None) of each of ``names``."""
    return [(n, _key_or_blank(n), ids.get(n)) for n in names]


def _key_or_blank(name: str) -> str:
    """The partition key of ``name``, or "" for a name no key can be made of (rejected when its turn comes)."""
    try:
        return partition_key(name)
    except ValueError:
        return ""
