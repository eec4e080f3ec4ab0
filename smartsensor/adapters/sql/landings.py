"""Landing-publisher queries: the tables watched (``asset_watch``) and the outbox of landed partitions
(``landing_outbox``) that the workers publish to Airflow as asset events (ARCHITECTURE.md, "Schedule on landings").

Every change of a row's state is a guarded update: a claim takes only rows still ``pending``, or ``sending`` under a
claim that lapsed, that no 2xx was counted for, and only at or after their ``next_attempt_at``; a claim's end
(delivered, found in Airflow, failed, unanswered, rejected) matches the claim's token and ``sending``. So two
workers, a retry or a worker that stalled past its claim never end a row they do not hold; what they did anyway (a
post Airflow took after the claim lapsed) is counted on the row (``posts``) and settles it ``delivered`` whoever
holds it now, never lost. A row whose outcome became unknown (a claim of a lapsed ``sending`` row whose post had
begun, a timeout) keeps ``unknown_since`` until an answer settles it. Values travel as bound parameters only.

The functions on an ``Engine`` are the operations the services call, each in its own transaction; those on a
``Connection`` are the statements they are made of."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable, Iterable, Sequence

from sqlalchemy import Connection, Engine, and_, case, delete, func, literal, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from smartsensor.domain.landings import (
    BASELINE,
    DELIVERED,
    PENDING,
    REJECTED,
    SENDING,
    SETTLED,
    SHOWN_PAUSED,
    SHOWN_REJECTED,
    SHOWN_UNKNOWN,
    UNDELIVERED,
    ClaimedLanding,
    WatchRow,
    table_shardcode,
)
from smartsensor.domain.status_rows import OutboxSummary, RejectedLanding, UnknownOutcome
from smartsensor.schema.models import UtcDateTime, asset_watch as AW, landing_outbox as LO

UNSETTLED = (PENDING, SENDING, REJECTED)  # the states a 2xx counted late, or an event found in Airflow, ends
# A watch retention has not forgotten, or one Airflow listed again since (a forgotten watch keeps its row).
WATCHED = or_(AW.c.forgotten_at.is_(None), AW.c.seen_at > AW.c.forgotten_at)

Ranges = Sequence[tuple[int, int]]  # shard ranges [lo, hi)


def _in_ranges(column: Any, ranges: Ranges) -> Any:
    return or_(*(and_(column >= lo, column < hi) for lo, hi in ranges))


def _insert_ignoring_duplicates(conn: Connection, table: Any, rows: list[dict[str, Any]]) -> int:
    """Insert ``rows``, skipping those whose unique key is taken (another worker, an earlier cycle): how many went
    in (1 statement)."""
    if not rows:
        return 0
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    stmt = dialect.insert(table).values(rows).on_conflict_do_nothing()
    return conn.execute(stmt).rowcount


# -- statements ------------------------------------------------------------------------------------------


def touch_watches(conn: Connection, rows: list[dict[str, Any]], now: datetime) -> int:
    """Insert the watches not stored yet; refresh the others' asset id, paused consumers and ``seen_at`` (2
    statements + 1 per watch)."""
    added = _insert_ignoring_duplicates(conn, AW, rows)
    if rows:
        conn.execute(update(AW).where(AW.c.uri.in_([r["uri"] for r in rows])).values(seen_at=now))
    for row in rows:
        paused = row.get("paused_consumers")
        changed = or_(AW.c.asset_id != row["asset_id"], AW.c.paused_consumers.is_distinct_from(paused))
        conn.execute(
            update(AW).where(AW.c.uri == row["uri"], changed).values(asset_id=row["asset_id"], paused_consumers=paused)
        )
    return added


def watches_in(conn: Connection, ranges: Ranges, seen_since: datetime) -> list[WatchRow]:
    """The watched tables in ``ranges`` that Airflow still listed at or after ``seen_since`` (1 statement)."""
    if not ranges:
        return []
    rows = conn.execute(
        select(AW.c.uri, AW.c.asset_id, AW.c.db_name, AW.c.table_name, AW.c.shardcode, AW.c.baselined_at)
        .where(_in_ranges(AW.c.shardcode, ranges), AW.c.seen_at >= seen_since)
        .order_by(AW.c.uri)
    )
    return [WatchRow(u, a, d, t, s, b is not None) for u, a, d, t, s, b in rows]


def outbox_names(conn: Connection, uri: str, names: Sequence[str] | None = None) -> dict[str, int | None]:
    """The partition names of ``uri`` (among ``names``) the outbox holds, in any state, each with the metastore's
    id of the partition its latest generation was (None: not known) (1 statement)."""
    return {name: part_id for name, (_, part_id) in _latest_generations(conn, uri, names)[0].items()}


def take_baseline(conn: Connection, uri: str, now: datetime) -> tuple[bool, bool]:
    """Mark ``uri``'s baseline taken, if nobody took it yet: whether this call did, and whether retention ever forgot
    the table (its landings were published, then forgotten: ``publish_existing`` must not publish them again) (1
    guarded statement)."""
    took = conn.execute(
        update(AW)
        .where(AW.c.uri == uri, AW.c.baselined_at.is_(None))
        .values(baselined_at=now)
        .returning(AW.c.forgotten_at)
    ).first()
    return took is not None, took is not None and took[0] is not None


# -- operations ------------------------------------------------------------------------------------------


def record_watches(engine: Engine, rows: list[dict[str, Any]], now: datetime) -> int:
    """``touch_watches`` in a transaction of its own: how many tables are newly watched."""
    with engine.begin() as conn:
        return touch_watches(conn, rows, now)


def read_watches(engine: Engine, ranges: Ranges, seen_since: datetime) -> list[WatchRow]:
    """``watches_in`` on a connection of its own (1 statement)."""
    with engine.connect() as conn:
        return watches_in(conn, ranges, seen_since)


def newest_watch_seen(engine: Engine) -> datetime | None:
    """When Airflow last listed any watched table (the newest ``seen_at``; None: nothing watched) (1 statement)."""
    with engine.connect() as conn:
        newest: datetime | None = conn.execute(select(func.max(AW.c.seen_at))).scalar_one()
        return newest


def read_outbox_names(engine: Engine, uri: str) -> dict[str, int | None]:
    """``outbox_names`` on a connection of its own (1 statement)."""
    with engine.connect() as conn:
        return outbox_names(conn, uri)


def keep_baseline(conn: Connection, uri: str) -> bool:
    """Whether ``uri``'s watch is still there with its baseline taken, its row held until commit: a guarded write
    that changes nothing, so that a retention pass taking the baseline away (``adapters.sql.retention``) waits for
    this transaction on PostgreSQL (SQLite serialises every writer) (1 statement)."""
    held = update(AW).where(AW.c.uri == uri, AW.c.baselined_at.is_not(None)).values(baselined_at=AW.c.baselined_at)
    return conn.execute(held).rowcount == 1


def enqueue_landings(
    engine: Engine,
    watch: WatchRow,
    landings: Iterable[tuple[str, str, int | None]],
    listed: Callable[[], Iterable[tuple[str, str, int | None]]],
    now: datetime,
    publish_existing: bool,
) -> tuple[str, int]:
    """Put ``landings`` ((partition name, partition key, the metastore's id of the partition or None): those of
    ``watch``'s table not in the outbox yet) into the outbox once, as ``pending``, while the table's baseline
    holds. A table without a baseline (a first watch, or one retention forgot) takes it here: then every partition
    it has (``listed()``) goes in, as ``baseline`` (``publish_existing``, on a table's first watch only:
    ``pending``), so that a partition whose row retention deleted is never taken for a new landing. A watch gone
    meanwhile takes nothing. Returns the state used and how many rows went in (those already there are kept as they
    are). One transaction (2 statements, 3 to take a baseline)."""
    with engine.begin() as conn:
        if keep_baseline(conn, watch.uri):
            state, chosen = PENDING, list(landings)
        else:
            took, forgotten = take_baseline(conn, watch.uri, now)
            if not took:
                return PENDING, 0  # the watch is gone
            state, chosen = (PENDING if publish_existing and not forgotten else BASELINE), list(listed())
        rows = [_landing_row(watch, name, key, state, now, 0, part_id) for name, key, part_id in chosen]
        return state, _insert_ignoring_duplicates(conn, LO, rows)


def _landing_row(
    watch: WatchRow, name: str, key: str, state: str, now: datetime, generation: int, part_id: int | None
) -> dict[str, Any]:
    """A new outbox row of ``watch``'s table: partition ``name`` (its ``key``), landed ``now``, due at once."""
    return {
        "uri": watch.uri,
        "partition_name": name,
        "partition_key": key,
        "shardcode": watch.shardcode,
        "state": state,
        "landed_at": now,
        "next_attempt_at": now,
        "attempts": 0,
        "posts": 0,
        "unknown_outcomes": 0,
        "generation": generation,
        "part_id": part_id,
    }


def enqueue_recreated(
    engine: Engine, watch: WatchRow, listed: dict[str, tuple[str, int]], now: datetime
) -> tuple[int, dict[str, int | None]]:
    """Partitions of ``watch``'s table listed (name → (partition key, the metastore's id now)) whose id may differ
    from their latest outbox row's. An id no row of that name ever had: the partition was dropped and added again, a
    new landing, the next generation (``pending``); lower ids too (each metastore instance hands ids out from a block
    of its own). An id an earlier generation had: a database that went back (a lagging replica), nothing. A latest
    row without an id (enqueued from a listing) takes this one, publishing nothing. Decided on the rows as they are
    in this transaction, while the table's baseline holds, so two workers add a generation once. Returns how many
    went in, and each listed name's id on record now. One transaction (3 statements, and 1 per row given its id)."""
    with engine.begin() as conn:
        if not listed or not keep_baseline(conn, watch.uri):
            return 0, {}
        latest, seen = _latest_generations(conn, watch.uri, sorted(listed))
        record: dict[str, int | None] = {name: row[1] for name, row in latest.items()}
        rows = []
        for name, (generation, part_id) in sorted(latest.items()):  # new rows in name order, as the memory store's
            key, now_id = listed[name]
            if part_id is not None and now_id in seen[name]:
                continue
            record[name] = now_id
            if part_id is None:
                conn.execute(
                    update(LO)
                    .where(LO.c.uri == watch.uri, LO.c.partition_name == name, LO.c.generation == generation)
                    .where(LO.c.part_id.is_(None))
                    .values(part_id=now_id)
                )
                continue
            rows.append(_landing_row(watch, name, key, PENDING, now, generation + 1, now_id))
        return _insert_ignoring_duplicates(conn, LO, rows), record


def _latest_generations(
    conn: Connection, uri: str, names: Sequence[str] | None
) -> tuple[dict[str, tuple[int, int | None]], dict[str, set[int]]]:
    """The latest outbox row of ``uri`` of each name (of ``names``; None: every one): (generation, part_id); and the
    ids every generation of each name had (1 statement)."""
    latest: dict[str, tuple[int, int | None]] = {}
    seen: dict[str, set[int]] = {}
    query = select(LO.c.partition_name, LO.c.generation, LO.c.part_id).where(LO.c.uri == uri)
    if names is not None:
        query = query.where(LO.c.partition_name.in_(list(names)))
    for name, generation, part_id in conn.execute(query):
        if name not in latest or generation > latest[name][0]:
            latest[name] = (generation, part_id)
        if part_id is not None:
            seen.setdefault(name, set()).add(part_id)
    return latest, seen


def read_missing(engine: Engine, uri: str) -> dict[str, datetime]:
    """The names of ``uri`` a listing of its table lacked, each with since when (its rows' earliest mark)
    (1 statement)."""
    query = (
        select(LO.c.partition_name, func.min(LO.c.missing_since))
        .where(LO.c.uri == uri, LO.c.missing_since.is_not(None))
        .group_by(LO.c.partition_name)
    )
    with engine.connect() as conn:
        return {name: since for name, since in conn.execute(query)}


def mark_missing(engine: Engine, uri: str, gone: Sequence[str], back: Sequence[str], now: datetime) -> None:
    """Mark every row of ``uri`` among ``gone`` (names a listing lacked) missing since ``now`` unless it already is,
    and clear the mark of those among ``back`` (listed again). One transaction (a guarded statement each)."""
    with engine.begin() as conn:
        if gone:
            conn.execute(
                update(LO)
                .where(LO.c.uri == uri, LO.c.partition_name.in_(list(gone)), LO.c.missing_since.is_(None))
                .values(missing_since=now)
            )
        if back:
            conn.execute(
                update(LO)
                .where(LO.c.uri == uri, LO.c.partition_name.in_(list(back)), LO.c.missing_since.is_not(None))
                .values(missing_since=None)
            )


def forget_dropped(engine: Engine, uri: str, names: Sequence[str], cutoff: datetime) -> list[str]:
    """Delete the rows of ``uri`` among ``names`` (partitions its table no longer has) missing since before
    ``cutoff``, a name only when all its rows are settled (baseline, delivered, rejected) and missing that long;
    the names deleted. One transaction (1 guarded statement: a name with an undelivered row, or one listed again
    since, keeps every row)."""
    if not names:
        return []
    kept = select(LO.c.partition_name).where(
        LO.c.uri == uri,
        LO.c.partition_name.in_(list(names)),
        or_(
            LO.c.state.not_in(SETTLED),
            LO.c.missing_since.is_(None),
            LO.c.missing_since >= literal(cutoff, UtcDateTime()),
        ),
    )
    with engine.begin() as conn:
        gone = conn.execute(
            delete(LO)
            .where(LO.c.uri == uri, LO.c.partition_name.in_(list(names)), LO.c.partition_name.not_in(kept))
            .returning(LO.c.partition_name)
        ).scalars()
        return sorted(set(gone))


def claim_landings(
    engine: Engine, ranges: Ranges, owner: str, token: str, now: datetime, until: datetime, limit: int
) -> list[ClaimedLanding]:
    """Claim up to ``limit`` due rows of ``ranges`` under ``token`` until ``until``, the oldest landings first: a
    ``pending`` row whose backoff is over, or a ``sending`` one whose claim lapsed (if that claim had begun to post
    it, ``post_started_at``, its outcome is unknown: counted, and unknown since that post began unless it was
    already; a row the lapsed claim never posted is simply claimed again). Never a row a 2xx was counted
    for (``posts``: settled ``delivered`` by ``end_delivered``; guarded here too). One transaction (2 statements: the
    candidates, then one guarded UPDATE … RETURNING the rows it took; a row another worker took in between is not
    among them)."""
    if not ranges or limit <= 0:
        return []
    lapsed = and_(LO.c.state == SENDING, LO.c.claimed_until <= now)
    claimable = and_(or_(LO.c.state == PENDING, lapsed), LO.c.posts == 0)
    posted = and_(LO.c.state == SENDING, LO.c.post_started_at.is_not(None))  # the lapsed claim had begun its post
    with engine.begin() as conn:
        ids = list(
            conn.execute(
                select(LO.c.id)
                .where(LO.c.state.in_(UNDELIVERED), _in_ranges(LO.c.shardcode, ranges), LO.c.next_attempt_at <= now)
                .where(claimable)
                .order_by(LO.c.landed_at, LO.c.id)
                .limit(limit)
            ).scalars()
        )
        if not ids:
            return []
        taken = conn.execute(
            update(LO)
            .where(LO.c.id.in_(ids), claimable, LO.c.next_attempt_at <= now)
            .values(
                state=SENDING,
                claim_token=token,
                claimed_by=owner,
                claimed_until=until,
                attempts=LO.c.attempts + 1,
                unknown_outcomes=LO.c.unknown_outcomes + case((posted, 1), else_=0),
                unknown_since=case(
                    (posted, func.coalesce(LO.c.unknown_since, LO.c.post_started_at)),
                    else_=LO.c.unknown_since,
                ),
                post_started_at=None,
            )
            .returning(
                LO.c.id,
                LO.c.uri,
                LO.c.partition_name,
                LO.c.partition_key,
                LO.c.attempts,
                LO.c.landed_at,
                LO.c.unknown_outcomes,
                LO.c.unknown_since,
            )
        ).all()
    claimed = [ClaimedLanding(i, u, n, k, a, token, t, uo, us) for i, u, n, k, a, t, uo, us in taken]
    return sorted(claimed, key=lambda c: (c.landed_at, c.id))


def _held(row_id: int, token: str) -> Any:
    return and_(LO.c.id == row_id, LO.c.state == SENDING, LO.c.claim_token == token)


_RELEASED = {"claim_token": None, "claimed_until": None, "post_started_at": None}
_SETTLED_NOW = {**_RELEASED, "unknown_since": None}  # an answer settled the row: nothing about it is unknown now


def _unless_taken(state: str, now: datetime) -> dict[str, Any]:
    """``state``, or ``delivered`` (at ``now``) for a row that an earlier post already reached (a 2xx that came
    after its claim lapsed, counted in ``posts``): such a row is never queued to be posted again."""
    taken = LO.c.posts > 0
    return {
        "state": case((taken, DELIVERED), else_=state),
        "delivered_at": case((taken, func.coalesce(LO.c.delivered_at, now)), else_=LO.c.delivered_at),
    }


def end_delivered(engine: Engine, row_id: int, token: str, now: datetime, event_id: int | None) -> bool:
    """Airflow took the row's event: ``delivered``, if the claim still holds it. Else the claim lapsed: the post is
    counted on the row all the same, and a row not ``delivered`` yet is ``delivered`` now, whoever holds it (back
    in ``pending``, ``rejected`` by a later attempt, or claimed by another worker, whose end then finds its claim
    gone and which does not post it: it checks its claim just before it posts); a row already ``delivered`` only
    counts the post (a known duplicate). Each answer is counted once: one guarded statement or the other. Whether
    the claim held. One transaction (1 statement, 2 or 3 when the claim was lost)."""
    with engine.begin() as conn:
        held = (
            conn.execute(
                update(LO)
                .where(_held(row_id, token))
                .values(state=DELIVERED, delivered_at=now, event_id=event_id, posts=LO.c.posts + 1, **_SETTLED_NOW)
            ).rowcount
            == 1
        )
        if held:
            return True
        settled = conn.execute(
            update(LO)
            .where(LO.c.id == row_id, LO.c.state.in_(UNSETTLED))
            .values(state=DELIVERED, delivered_at=now, event_id=event_id, posts=LO.c.posts + 1, **_SETTLED_NOW)
        ).rowcount
        if not settled:
            conn.execute(update(LO).where(LO.c.id == row_id).values(posts=LO.c.posts + 1))
        return False


def end_found(engine: Engine, row_id: int, token: str, now: datetime, event_id: int, events: int = 1) -> bool:
    """Airflow holds the row's event (looked up after an attempt of unknown outcome): ``delivered`` with that event;
    ``posts`` (the 2xx answers read) left as it is, or made ``events`` when Airflow holds more than one for it (a
    duplicate, counted). Like a
    late 2xx, it settles the row whoever holds it, unless it is ``delivered`` already. Whether this claim still
    held it. One transaction (1 statement, 2 when the claim was lost)."""
    values = {
        "state": DELIVERED,
        "delivered_at": now,
        "event_id": event_id,
        "posts": case((LO.c.posts < events, events), else_=LO.c.posts) if events > 1 else LO.c.posts,
        **_SETTLED_NOW,
    }
    with engine.begin() as conn:
        if conn.execute(update(LO).where(_held(row_id, token)).values(**values)).rowcount == 1:
            return True
        conn.execute(update(LO).where(LO.c.id == row_id, LO.c.state.in_(UNSETTLED)).values(**values))
        return False


def end_unanswered(
    engine: Engine, row_id: int, token: str, now: datetime, next_attempt_at: datetime, error: str
) -> bool:
    """Airflow could not say whether it holds the row's event: ``pending`` again until ``next_attempt_at``, not
    posted, still of unknown outcome (``unknown_since`` kept), the error kept. Only under the claim that holds it;
    whether it did (1 statement)."""
    with engine.begin() as conn:
        return (
            conn.execute(
                update(LO)
                .where(_held(row_id, token))
                .values(**_unless_taken(PENDING, now), next_attempt_at=next_attempt_at, last_error=error, **_RELEASED)
            ).rowcount
            == 1
        )


def begin_post(engine: Engine, row_id: int, token: str, now: datetime, until: datetime) -> bool:
    """Just before a post: whether ``token`` still holds the row (its claim not lapsed at ``now``, no late answer
    settled it); if so its claim is extended to ``until`` and the row marked as posting since ``now`` (a claim
    that lapses from here on leaves it of unknown outcome, since ``now``). Whatever was unknown before is known now
    (a row is posted only once Airflow was found not to hold its event): ``unknown_since`` is cleared, so a look-up
    of this post's outcome starts from it. 1 statement."""
    with engine.begin() as conn:
        return (
            conn.execute(
                update(LO)
                .where(_held(row_id, token), LO.c.claimed_until > now)
                .values(claimed_until=until, post_started_at=now, unknown_since=None)
            ).rowcount
            == 1
        )


def end_failed(
    engine: Engine, row_id: int, token: str, now: datetime, next_attempt_at: datetime, error: str, unknown: bool
) -> bool:
    """The attempt failed: back to ``pending`` until ``next_attempt_at``, the error kept; ``unknown``: Airflow may
    have taken it (a timeout), counted, and unknown since ``now`` unless it was already (else the post's outcome is
    known, and so is every earlier one: Airflow was asked before it). A row an earlier post already reached (a late
    2xx counted in ``posts``) is ``delivered`` instead: it is never posted again. Only under the claim that holds
    it; whether it did (1 statement)."""
    with engine.begin() as conn:
        return (
            conn.execute(
                update(LO)
                .where(_held(row_id, token))
                .values(
                    **_unless_taken(PENDING, now),
                    next_attempt_at=next_attempt_at,
                    last_error=error,
                    unknown_outcomes=LO.c.unknown_outcomes + (1 if unknown else 0),
                    unknown_since=func.coalesce(LO.c.unknown_since, literal(now, UtcDateTime())) if unknown else None,
                    **_RELEASED,
                )
            ).rowcount
            == 1
        )


def end_rejected(engine: Engine, row_id: int, token: str, now: datetime, error: str) -> bool:
    """Airflow can never take the row's event: ``rejected``, the error kept (``delivered`` if an earlier post
    reached it). Only under the claim that holds it; whether it did (1 statement)."""
    with engine.begin() as conn:
        return (
            conn.execute(
                update(LO)
                .where(_held(row_id, token))
                .values(**_unless_taken(REJECTED, now), last_error=error, **_SETTLED_NOW)
            ).rowcount
            == 1
        )


def release_unposted(engine: Engine, row_ids: list[int], token: str, now: datetime) -> int:
    """Hand claimed rows back unposted: ``pending`` again at once (``delivered`` if an earlier post reached
    Airflow), the attempt their claim counted taken back. Only rows still held by ``token``; how many (1
    statement)."""
    if not row_ids:
        return 0
    with engine.begin() as conn:
        return conn.execute(
            update(LO)
            .where(LO.c.id.in_(row_ids), LO.c.state == SENDING, LO.c.claim_token == token)
            .values(**_unless_taken(PENDING, now), attempts=LO.c.attempts - 1, **_RELEASED)
        ).rowcount


def reshard_watches(engine: Engine, limit: int) -> int:
    """After ``shard_code_upper_limit`` changed (``db reshard``): each watched table's shardcode and its outbox rows'
    recomputed (``domain.landings.table_shardcode``), so every table falls in a range some worker holds. Not a state
    change, safe while workers run: a worker that still holds the old range publishes nothing of a moved table (its
    reads and claims are by range), the new range's holder takes it on. How many tables moved. One transaction (1
    statement, and 2 per table moved)."""
    moved = 0
    with engine.begin() as conn:
        for uri, db, table, shardcode in conn.execute(
            select(AW.c.uri, AW.c.db_name, AW.c.table_name, AW.c.shardcode)
        ).all():
            wanted = table_shardcode(db, table, limit)
            if wanted == shardcode:
                continue
            conn.execute(update(AW).where(AW.c.uri == uri).values(shardcode=wanted))
            conn.execute(update(LO).where(LO.c.uri == uri).values(shardcode=wanted))
            moved += 1
    return moved


def read_outbox_summary(engine: Engine, shard_limit: int) -> OutboxSummary:
    """The outbox by state, its oldest undelivered landing, its known duplicates and unknown outcomes, the tables
    watched, and the undelivered rows whose outcome is unknown now (how many; the ``SHOWN_UNKNOWN`` longest unknown
    by name), the ``SHOWN_REJECTED`` latest rows refused for good, with why, the ``SHOWN_PAUSED`` watched tables
    whose consumers Airflow has paused, and as many watched tables whose shardcode is outside [0, ``shard_limit``)
    (no range serves them: a limit lowered without `db reshard`), each with its undelivered rows. One connection
    (9 statements)."""
    with engine.connect() as conn:
        by_state = {s: n for s, n in conn.execute(select(LO.c.state, func.count()).group_by(LO.c.state))}
        oldest = conn.execute(select(func.min(LO.c.landed_at)).where(LO.c.state.in_(UNDELIVERED))).scalar_one()
        duplicates, unknown = conn.execute(
            select(
                func.coalesce(func.sum(case((LO.c.posts > 1, LO.c.posts - 1), else_=0)), 0),
                func.coalesce(func.sum(LO.c.unknown_outcomes), 0),
            )
        ).one()
        watched = conn.execute(select(func.count()).select_from(AW).where(WATCHED)).scalar_one()
        unsettled = and_(LO.c.state.in_(UNDELIVERED), LO.c.unknown_since.is_not(None))
        unresolved = conn.execute(select(func.count()).select_from(LO).where(unsettled)).scalar_one()
        rows = conn.execute(
            select(LO.c.id, LO.c.uri, LO.c.partition_name, LO.c.state, LO.c.unknown_since, LO.c.last_error)
            .where(unsettled)
            .order_by(LO.c.unknown_since, LO.c.id)
            .limit(SHOWN_UNKNOWN)
        ).all()
        rejected = conn.execute(
            select(LO.c.id, LO.c.uri, LO.c.partition_name, LO.c.last_error)
            .where(LO.c.state == REJECTED)
            .order_by(LO.c.id.desc())
            .limit(SHOWN_REJECTED)
        ).all()
        paused = conn.execute(
            select(AW.c.uri, AW.c.paused_consumers)
            .where(WATCHED, AW.c.paused_consumers.is_not(None))
            .order_by(AW.c.uri)
            .limit(SHOWN_PAUSED)
        ).all()
        waiting = and_(LO.c.uri == AW.c.uri, LO.c.state.in_(UNDELIVERED))
        orphaned = conn.execute(
            select(AW.c.uri, func.count(LO.c.id))
            .select_from(AW.outerjoin(LO, waiting))
            .where(WATCHED, or_(AW.c.shardcode < 0, AW.c.shardcode >= shard_limit))
            .group_by(AW.c.uri)
            .order_by(AW.c.uri)
            .limit(SHOWN_PAUSED)
        ).all()
    shown = tuple(UnknownOutcome(*r) for r in rows)
    refused = tuple(RejectedLanding(*r) for r in rejected)
    return OutboxSummary(
        by_state,
        oldest,
        int(duplicates),
        int(unknown),
        int(watched),
        int(unresolved),
        shown,
        rejected_rows=refused,
        paused=tuple((u, p) for u, p in paused),
        orphaned=tuple((u, int(n)) for u, n in orphaned),
    )


class SqlOutboxStore:
    """``ports.OutboxStore`` on the metadata database: each operation the function of this module of the same
    name, in a transaction of its own."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def record_watches(self, rows: list[dict[str, Any]], now: datetime) -> int:
        return record_watches(self.engine, rows, now)

    def read_watches(self, ranges: Ranges, seen_since: datetime) -> list[WatchRow]:
        return read_watches(self.engine, ranges, seen_since)

    def newest_watch_seen(self) -> datetime | None:
        return newest_watch_seen(self.engine)

    def read_outbox_names(self, uri: str) -> dict[str, int | None]:
        return read_outbox_names(self.engine, uri)

    def enqueue_landings(
        self,
        watch: WatchRow,
        landings: Iterable[tuple[str, str, int | None]],
        listed: Callable[[], Iterable[tuple[str, str, int | None]]],
        now: datetime,
        publish_existing: bool,
    ) -> tuple[str, int]:
        return enqueue_landings(self.engine, watch, landings, listed, now, publish_existing)

    def enqueue_recreated(
        self, watch: WatchRow, listed: dict[str, tuple[str, int]], now: datetime
    ) -> tuple[int, dict[str, int | None]]:
        return enqueue_recreated(self.engine, watch, listed, now)

    def read_missing(self, uri: str) -> dict[str, datetime]:
        return read_missing(self.engine, uri)

    def mark_missing(self, uri: str, gone: Sequence[str], back: Sequence[str], now: datetime) -> None:
        mark_missing(self.engine, uri, gone, back, now)

    def forget_dropped(self, uri: str, names: Sequence[str], cutoff: datetime) -> list[str]:
        return forget_dropped(self.engine, uri, names, cutoff)

    def claim_landings(
        self, ranges: Ranges, owner: str, token: str, now: datetime, until: datetime, limit: int
    ) -> list[ClaimedLanding]:
        return claim_landings(self.engine, ranges, owner, token, now, until, limit)

    def release_unposted(self, row_ids: list[int], token: str, now: datetime) -> int:
        return release_unposted(self.engine, row_ids, token, now)

    def begin_post(self, row_id: int, token: str, now: datetime, until: datetime) -> bool:
        return begin_post(self.engine, row_id, token, now, until)

    def end_delivered(self, row_id: int, token: str, now: datetime, event_id: int | None) -> bool:
        return end_delivered(self.engine, row_id, token, now, event_id)

    def end_found(self, row_id: int, token: str, now: datetime, event_id: int, events: int = 1) -> bool:
        return end_found(self.engine, row_id, token, now, event_id, events)

    def end_unanswered(self, row_id: int, token: str, now: datetime, next_attempt_at: datetime, error: str) -> bool:
        return end_unanswered(self.engine, row_id, token, now, next_attempt_at, error)

    def end_failed(
        self, row_id: int, token: str, now: datetime, next_attempt_at: datetime, error: str, unknown: bool
    ) -> bool:
        return end_failed(self.engine, row_id, token, now, next_attempt_at, error, unknown)

    def end_rejected(self, row_id: int, token: str, now: datetime, error: str) -> bool:
        return end_rejected(self.engine, row_id, token, now, error)
