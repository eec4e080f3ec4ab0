"""The rules of publishing landings to Airflow as asset events (ARCHITECTURE.md, "Schedule on landings"): the
asset a table is, the partition key a landed partition is sent with, the outbox's states and what one answer of
Airflow's API does to a row.

No I/O here: the outbox's SQL is ``adapters.sql.landings``, the HTTP calls ``adapters.airflow_assets``, the cycle
that ties them ``service.landings``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from smartsensor.domain.hashing import check_hashcode, shardcode_for
from smartsensor.hive_filter.names import PartitionNameError, parse_spec

# An outbox row's states. ``baseline``: present when its table was first watched, never published (unless
# ``[landings] publish_existing``); ``pending``: to publish (now, or after its backoff); ``sending``: claimed by one
# worker until ``claimed_until``; ``delivered``: Airflow answered 2xx, or holds the row's event (looked up after an
# attempt of unknown outcome); ``rejected``: Airflow can never take it (the key is too long, a 4xx other than
# 401/403/404/408/409/429).
BASELINE, PENDING, SENDING, DELIVERED, REJECTED = "baseline", "pending", "sending", "delivered", "rejected"
UNDELIVERED = (PENDING, SENDING)
SETTLED = (BASELINE, DELIVERED, REJECTED)  # never posted again: the rows retention may delete (never an undelivered)
CLAIMABLE = (PENDING, SENDING)  # a sending row is claimable once its claim lapsed (its worker died or stalled)
SHOWN_UNKNOWN = 20  # rows of unknown outcome `status` names, the longest unknown first
SHOWN_REJECTED = 20  # rows refused for good `status` names, the latest first
SHOWN_PAUSED = 20  # watched tables with paused consumers `status` names, by uri

LANDING_ID = "smartsensor_landing_id"  # the key of an event's ``extra`` that names its outbox row
HIVE_PARTITION = "hive_partition"  # the key of an event's ``extra`` that holds the Hive partition's name
# Seconds by which Airflow's clock may differ from the workers': a look-up of a row's events starts this much earlier.
CLOCK_SKEW = 300.0
KEY_DELIMITER = "|"  # ProductMapper's default delimiter in Airflow 3.3
MAX_KEY_LENGTH = 250  # Airflow 3.3's ID_LEN: CreateAssetEventsBody.partition_key's max_length
HIVE_SCHEME = "hive"
TABLE_HASH_CLASS = "smartsensor.landings.table"  # the "class path" a table's shardcode is hashed under


@dataclass(frozen=True)
class HiveAsset:
    """A ``hive://host:port/db/table`` asset as Airflow knows it (its id in Airflow's database)."""

    asset_id: int
    uri: str
    db: str
    table: str
    consumers: tuple[str, ...] = ()  # the DAGs scheduled on it


def parse_hive_uri(uri: str) -> tuple[str, str, str] | None:
    """(``host:port``, db, table) of a ``hive://host:port/db/table`` URI, lower-cased as Hive stores names; None
    for any other URI (another scheme, no host, not exactly a database and a table)."""
    parts = urlsplit(uri)
    if parts.scheme != HIVE_SCHEME or not parts.netloc:
        return None
    path = parts.path.split("/")
    if len(path) != 3 or path[0] != "" or not path[1] or not path[2] or parts.query or parts.fragment:
        return None
    return parts.netloc.lower(), path[1].lower(), path[2].lower()


def table_shardcode(db: str, table: str, limit: int) -> int:
    """The shardcode a watched table is published under: the worker holding the range that contains it publishes
    the table's landings (one host per table)."""
    return shardcode_for(check_hashcode(TABLE_HASH_CLASS, f"{db}.{table}"), limit)


def partition_key(name: str) -> str:
    """The partition key a landed partition is published with: its values, unescaped, in the table's partition
    column order, joined by ``|`` (``ds=2026-11-27/hr=03`` → ``2026-11-27|03``; one column: the value alone).

    A one-column date key suits ``IdentityMapper`` and the temporal mappers (``input_format="%Y-%m-%d"``); several
    columns suit ``ProductMapper`` (one mapper per column, its default delimiter ``|``). The column names are in
    the event's ``extra`` (``partition``: the Hive name as stored), not in the key."""
    try:
        return KEY_DELIMITER.join(value for _, value in parse_spec(name))
    except PartitionNameError:
        raise ValueError(f"not a Hive partition name: {name!r}") from None


def key_problem(key: str, name: str | None = None) -> str | None:
    """Why Airflow 3.3 would refuse ``key`` as a partition key (its API model: at least one non-blank character,
    at most 250), or why a consumer could not read it back: a value of a partition of several columns (``name``)
    that holds the delimiter ``|`` (``ProductMapper`` would split it into more fields than columns, fail inside
    Airflow and start no run, while the post is answered 2xx); None when it can be published."""
    if not key.strip():
        return "the partition key is blank"
    if len(key) > MAX_KEY_LENGTH:
        return f"the partition key is {len(key)} characters long; Airflow takes {MAX_KEY_LENGTH} at most"
    if name is not None:
        try:
            values = [value for _, value in parse_spec(name)]
        except PartitionNameError:
            return f"not a Hive partition name: {name!r}"
        if len(values) > 1 and any(KEY_DELIMITER in value for value in values):
            return (
                f"a value holds {KEY_DELIMITER!r}, the delimiter of the key's {len(values)} columns: a consumer's "
                "mapper could not split the key back"
            )
    return None


def backoff(attempts: int, base: float, ceiling: float, rng: random.Random | None = None) -> float:
    """Seconds before the next attempt after ``attempts`` failed ones: ``base`` doubled per failure, at most
    ``ceiling``, with up to a quarter taken off at random (``rng``) so that many rows failed together do not all
    come back in the same second."""
    delay = min(ceiling, base * 2.0 ** max(0, attempts - 1))
    if rng is None:
        return delay
    return delay * (1.0 - 0.25 * rng.random())


@dataclass(frozen=True)
class PostOutcome:
    """What one ``POST /api/v2/assets/events`` came to. ``kind``: ``delivered`` (2xx), ``retry`` (Airflow or the
    way to it failed, and it did not take the event: a refused connection, 401/403/404/408/409/429, a 5xx, bad
    answers), ``unknown`` (the request may have reached Airflow: a timeout or a connection dropped after it was
    sent; retried, and counted as a possible duplicate) or ``rejected`` (a 4xx Airflow will answer again)."""

    kind: str
    detail: str = ""
    event_id: int | None = None


RETRY_STATUSES = frozenset({401, 403, 404, 408, 409, 425, 429})


def outcome_of_status(status: int, detail: str, event_id: int | None = None, from_airflow: bool = True) -> PostOutcome:
    """The outcome of an HTTP answer with ``status``. ``from_airflow``: the answer is Airflow's API's own (JSON with
    a ``detail``); any other (a proxy's or a load balancer's page: a 400, a 413, a redirect not followed) is never
    ``rejected``, it says nothing of whether Airflow would take the event: retried."""
    if 200 <= status < 300:
        return PostOutcome("delivered", "", event_id)
    if status in RETRY_STATUSES or status >= 500 or status < 400 or not from_airflow:
        source = "" if from_airflow or status >= 500 else " (not Airflow's answer)"
        return PostOutcome("retry", f"HTTP {status}{source}: {detail}")
    return PostOutcome("rejected", f"HTTP {status}: {detail}")


@dataclass(frozen=True)
class EventLookup:
    """What asking Airflow for one landing's events came to (``GET /api/v2/assets/events``). ``answered``: Airflow
    answered for every event that could be the landing's, and ``event_ids`` are those whose ``extra`` names it
    (none: Airflow does not hold it); not ``answered``: Airflow could not tell (down, a 5xx, too many events to
    read), ``detail`` says why, and the row must not be posted again yet."""

    answered: bool
    event_ids: tuple[int, ...] = ()
    detail: str = ""


def lookup_window(
    unknown_since: datetime | None, landed_at: datetime, claim_seconds: float, request_seconds: float
) -> tuple[datetime, datetime | None]:
    """When (Airflow's clock) an event of a row whose outcome became unknown at ``unknown_since`` can have been
    taken: from ``claim_seconds`` before it (a post begins under a claim that lasts that long: a timeout is seen at
    most that long after the post began), to ``claim_seconds`` + ``request_seconds`` after it (the post that began
    then, if its claim lapsed, ends within its request's time), each widened by ``CLOCK_SKEW``. Bounded at both
    ends, so the events of a busy asset taken later never fill the look-up. A row without ``unknown_since`` is
    looked up from its landing, with no end."""
    skew = timedelta(seconds=CLOCK_SKEW)
    if unknown_since is None:
        return landed_at - skew, None
    return (
        unknown_since - timedelta(seconds=claim_seconds) - skew,
        unknown_since + timedelta(seconds=claim_seconds + request_seconds) + skew,
    )


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
    """An outbox row claimed for one attempt: what to post, and the claim's token that ends it. ``unknown_outcomes``
    above 0: an earlier post may have reached Airflow (Airflow is asked before it is posted again), its outcome
    unknown since ``unknown_since``."""

    id: int
    uri: str
    partition_name: str
    partition_key: str
    attempts: int
    token: str
    landed_at: datetime
    unknown_outcomes: int = 0
    unknown_since: datetime | None = None
