"""Landing-publisher queries: the tables watched (``asset_watch``) and the outbox of landed partitions
(``landing_outbox``) that the workers publish to Airflow as asset events (ARCHITECTURE.md, "Schedule on landings").

Every change of a row's state is a guarded update: a claim takes only rows still ``pending``, or ``sending`` under a
claim that lapsed, and only at or after their ``next_attempt_at``; a claim's end (delivered, failed, rejected)
matches the claim's token and ``sending``. So two workers, a retry or a worker that stalled past its claim never
end a row they do not hold; what they did anyway (a post Airflow took after the claim lapsed) is counted on the
row (``posts``), never lost. Values travel as bound parameters only.

The functions on an ``Engine`` are the operations the services call, each in its own transaction; those on a
``Connection`` are the statements they are made of."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Iterable, Sequence

from sqlalchemy import Connection, Engine, and_, case, delete, func, literal, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from smartsensor.domain.landings import BASELINE, DELIVERED, PENDING, REJECTED, SENDING, SETTLED, UNDELIVERED
from smartsensor.schema.models import AssetWatch, LandingOutbox, UtcDateTime

AW = AssetWatch.__table__
LO = LandingOutbox.__table__

Ranges = Sequence[tuple[int, int]]  # shard ranges [lo, hi)


@dataclass(frozen=True)
class WatchRow:
    """A watched table as stored: its asset, where it is sharded, whether its baseline was taken."""

    uri: str
    asset_id: int
    db: str
    table: str
    shardcode: int
    baselined: bool


@dataclass(frozen=True)
class ClaimedLanding:
    """An outbox row claimed for one attempt: what to post, and the claim's token that ends it."""

    id: int
    uri: str
    partition_name: str
    partition_key: str
    attempts: int
    token: str
    landed_at: datetime


@dataclass(frozen=True)
class OutboxSummary:
    """What `status` shows of the outbox: rows by state, the oldest undelivered landing, the duplicates known
    (2xx answers past a row's first) and the attempts whose outcome was never known."""

    by_state: dict[str, int]
    oldest_undelivered: datetime | None
    duplicates: int
    unknown_outcomes: int
    watched_tables: int


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
    """Insert the watches not stored yet; refresh the others' asset id and ``seen_at`` (2 statements + 1 per
    changed asset id)."""
    added = _insert_ignoring_duplicates(conn, AW, rows)
    if rows:
        conn.execute(update(AW).where(AW.c.uri.in_([r["uri"] for r in rows])).values(seen_at=now))
    for row in rows:
        conn.execute(
            update(AW).where(AW.c.uri == row["uri"], AW.c.asset_id != row["asset_id"]).values(asset_id=row["asset_id"])
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


def outbox_names(conn: Connection, uri: str) -> set[str]:
    """The partition names of ``uri`` the outbox holds, in any state (1 statement)."""
    return set(conn.execute(select(LO.c.partition_name).where(LO.c.uri == uri)).scalars())


def take_baseline(conn: Connection, uri: str, now: datetime) -> bool:
    """Mark ``uri``'s baseline taken, if nobody took it yet: whether this call did (1 guarded statement)."""
    return (
        conn.execute(update(AW).where(AW.c.uri == uri, AW.c.baselined_at.is_(None)).values(baselined_at=now)).rowcount
        == 1
    )


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


def read_outbox_names(engine: Engine, uri: str) -> set[str]:
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
    landings: Iterable[tuple[str, str]],
    listed: Callable[[], Iterable[tuple[str, str]]],
    now: datetime,
    publish_existing: bool,
) -> tuple[str, int]:
    """Put ``landings`` ((partition name, partition key): those of ``watch``'s table not in the outbox yet) into the
    outbox once, as ``pending``, while the table's baseline holds. A table without a baseline (a first watch, or
    one retention forgot) takes it here: then every partition it has (``listed()``) goes in, as ``baseline``
    (``publish_existing``: ``pending``), so that a partition whose row retention deleted is never taken for a new
    landing. A watch gone meanwhile takes nothing. Returns the state used and how many rows went in (those already
    there are kept as they are). One transaction (2 statements, 3 to take a baseline)."""
    with engine.begin() as conn:
        if keep_baseline(conn, watch.uri):
            state, chosen = PENDING, list(landings)
        elif take_baseline(conn, watch.uri, now):
            state, chosen = (PENDING if publish_existing else BASELINE), list(listed())
        else:
            return PENDING, 0  # retention forgot the watch: Airflow's next listing makes it anew
        rows = [
            {
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
            }
            for name, key in chosen
        ]
        return state, _insert_ignoring_duplicates(conn, LO, rows)


def forget_dropped(engine: Engine, uri: str, names: Sequence[str], cutoff: datetime) -> list[str]:
    """Delete the settled rows (baseline, delivered, rejected) of ``uri`` among ``names`` (partitions its table no
    longer has) that landed, or were delivered, before ``cutoff``; the names deleted. One transaction (1 guarded
    statement: an undelivered row, or a recent one, is kept)."""
    if not names:
        return []
    with engine.begin() as conn:
        return list(
            conn.execute(
                delete(LO)
                .where(LO.c.uri == uri, LO.c.partition_name.in_(list(names)), LO.c.state.in_(SETTLED))
                .where(func.coalesce(LO.c.delivered_at, LO.c.landed_at) < literal(cutoff, UtcDateTime()))
                .returning(LO.c.partition_name)
            ).scalars()
        )


def claim_landings(
    engine: Engine, ranges: Ranges, owner: str, token: str, now: datetime, until: datetime, limit: int
) -> list[ClaimedLanding]:
    """Claim up to ``limit`` due rows of ``ranges`` under ``token`` until ``until``, the oldest landings first: a
    ``pending`` row whose backoff is over, or a ``sending`` one whose claim lapsed (its attempt's outcome is then
    unknown: counted). One transaction (2 statements: the candidates, then one guarded UPDATE … RETURNING the rows it
    took; a row another worker took in between is not among them)."""
    if not ranges or limit <= 0:
        return []
    claimable = or_(LO.c.state == PENDING, and_(LO.c.state == SENDING, LO.c.claimed_until <= now))
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
                unknown_outcomes=LO.c.unknown_outcomes + case((LO.c.state == SENDING, 1), else_=0),
            )
            .returning(LO.c.id, LO.c.uri, LO.c.partition_name, LO.c.partition_key, LO.c.attempts, LO.c.landed_at)
        ).all()
    claimed = [ClaimedLanding(i, u, n, k, a, token, t) for i, u, n, k, a, t in taken]
    return sorted(claimed, key=lambda c: (c.landed_at, c.id))


def _held(row_id: int, token: str) -> Any:
    return and_(LO.c.id == row_id, LO.c.state == SENDING, LO.c.claim_token == token)


_RELEASED = {"claim_token": None, "claimed_until": None}


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
    counted on the row all the same; a row back in ``pending`` (or ``rejected`` by a later attempt) that no post
    had reached yet is ``delivered`` too (nobody holds it, and posting it again would only start a second run); a
    row another worker holds now stays with that worker, a visible duplicate if its post lands too. Whether the
    claim held. One transaction (1 statement, 2 or 3 when the claim was lost)."""
    with engine.begin() as conn:
        held = (
            conn.execute(
                update(LO)
                .where(_held(row_id, token))
                .values(state=DELIVERED, delivered_at=now, event_id=event_id, posts=LO.c.posts + 1, **_RELEASED)
            ).rowcount
            == 1
        )
        if held:
            return True
        settled = conn.execute(
            update(LO)
            .where(LO.c.id == row_id, LO.c.state.in_((PENDING, REJECTED)), LO.c.posts == 0)
            .values(state=DELIVERED, delivered_at=now, event_id=event_id, posts=1)
        ).rowcount
        if not settled:
            conn.execute(update(LO).where(LO.c.id == row_id).values(posts=LO.c.posts + 1))
        return False


def end_failed(
    engine: Engine, row_id: int, token: str, now: datetime, next_attempt_at: datetime, error: str, unknown: bool
) -> bool:
    """The attempt failed: back to ``pending`` until ``next_attempt_at``, the error kept; ``unknown``: Airflow may
    have taken it (a timeout), counted. A row an earlier post already reached (a late 2xx counted in ``posts``) is
    ``delivered`` instead: it is never posted again. Only under the claim that holds it; whether it did (1
    statement)."""
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
                .values(**_unless_taken(REJECTED, now), last_error=error, **_RELEASED)
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


def read_outbox_summary(engine: Engine) -> OutboxSummary:
    """The outbox by state, its oldest undelivered landing, its known duplicates and unknown outcomes, and the
    tables watched. One connection (4 statements)."""
    with engine.connect() as conn:
        by_state = {s: n for s, n in conn.execute(select(LO.c.state, func.count()).group_by(LO.c.state))}
        oldest = conn.execute(select(func.min(LO.c.landed_at)).where(LO.c.state.in_(UNDELIVERED))).scalar_one()
        duplicates, unknown = conn.execute(
            select(
                func.coalesce(func.sum(case((LO.c.posts > 1, LO.c.posts - 1), else_=0)), 0),
                func.coalesce(func.sum(LO.c.unknown_outcomes), 0),
            )
        ).one()
        watched = conn.execute(select(func.count()).select_from(AW)).scalar_one()
    return OutboxSummary(by_state, oldest, int(duplicates), int(unknown), int(watched))
