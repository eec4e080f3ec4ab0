"""What a process knows of the metastore's partitions between rounds: the change feed of ``PARTITIONS``.

The metastore-database backend (``metastore_db``) looks a partition up once; after that it follows the
partitions the metastore adds, by their ids, instead of asking again. This module is that memory, with no I/O:
``plan`` says what a round's statement must read, ``absorb`` takes what it read, ``listing`` answers a table's
request from memory (its exact checks decided, the names its partial ones need).

- **Coverage.** A partition name (an exact check, or a partial one that gives every column: ``ds='X'`` on a
  table partitioned by ``ds`` alone waits for ``ds=X``) or a name prefix (another partial check) is *covered* once
  a statement has looked it up. From then on it is answered from ``present``: the names found by look-ups plus
  every name the feed has since delivered for that table.
- **The feed.** Each statement also reads the partitions whose ``PART_ID`` is above the high-water mark, and the
  *gaps*: ids at or below it not seen yet. The metastore hands out ids in blocks (DataNucleus) and commits
  concurrent additions in any order, so an id below the mark may still commit; a gap is read again every round
  for ``gap_seconds``, then given up.
- **Verify.** Every ``verify_seconds`` (and when gaps overflow) the coverage is dropped, so every due name is
  looked up again: a partition dropped, a table re-created, or an id that committed after its gap was given up
  shows there, at the latest. The feed's position is kept.

The feed's first statement starts ``baseline_span`` ids below the metastore's highest id (and says where), so that
ids handed out before the process started and committed just after are read too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from smartsensor.ports import AnsweredListing, ListingRequest
from smartsensor.sensors.checks import PartitionCheck
from smartsensor.sensors.partitions import escape_partition_value

Key = tuple[str, str]

GAP_SECONDS = 600.0
VERIFY_SECONDS = 600.0
BASELINE_SPAN = 1_000
MAX_GAPS = 10_000


def partition_name(columns: Sequence[str], spec: dict[str, str]) -> str:
    """The stored name of the partition ``spec`` gives every column of (``ds=10%3A00/hr=0``)."""
    return "/".join(f"{escape_partition_value(c)}={escape_partition_value(spec[c])}" for c in columns)


def gives_every_column(columns: Sequence[str], spec: dict[str, str]) -> bool:
    """Whether ``spec`` gives every one of ``columns``: it matches one partition at most, by its full name."""
    return len(spec) == len(columns) and all(c in spec for c in columns)


def leading_prefix(columns: Sequence[str], spec: dict[str, str]) -> str:
    """A start every matching partition's name has: the leading columns ``spec`` gives, each followed by ``/``
    ("" when it does not give the first column: every partition of the table). The last column is never part of
    it, since no ``/`` follows it in a name: a spec that gives every column is listed by the columns before it."""
    parts = []
    for column in columns[:-1]:
        if column not in spec:
            break
        parts.append(f"{escape_partition_value(column)}={escape_partition_value(spec[column])}/")
    return "".join(parts)


def name_prefixes(name: str) -> list[str]:
    """Every prefix a partial check can look a stored name up by: "" and each run of leading ``col=value/``."""
    out = [""]
    end = name.find("/")
    while end != -1:
        out.append(name[: end + 1])
        end = name.find("/", end + 1)
    return out


@dataclass(frozen=True)
class FeedRead:
    """What one statement reads: the look-ups of names and prefixes not covered yet, as (db, table, text); and,
    when ``follow``, the feed: the ids above ``after`` (None: above ``span`` below the metastore's highest, the
    statement returning that start) and the ``gaps``."""

    names: tuple[tuple[str, str, str], ...]
    prefixes: tuple[tuple[str, str, str], ...]
    follow: bool = False
    after: int | None = None
    gaps: tuple[int, ...] = ()
    span: int = BASELINE_SPAN


@dataclass
class _Table:
    """One table's memory: the names and prefixes looked up, the names known present, and each check's text."""

    columns: tuple[str, ...]
    names: set[str] = field(default_factory=set)
    prefixes: set[str] = field(default_factory=set)
    present: set[str] = field(default_factory=set)
    texts: dict[PartitionCheck, tuple[bool, str]] = field(default_factory=dict)


class PartitionFeed:
    """The process's memory of the metastore's partitions, fed by its ``PARTITIONS`` ids (no I/O; not
    thread-safe: one round at a time, as the metastore-database backend calls it under its lock)."""

    def __init__(
        self,
        gap_seconds: float = GAP_SECONDS,
        verify_seconds: float = VERIFY_SECONDS,
        baseline_span: int = BASELINE_SPAN,
        max_gaps: int = MAX_GAPS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.gap_seconds = gap_seconds
        self.verify_seconds = verify_seconds
        self.baseline_span = baseline_span
        self.max_gaps = max_gaps
        self.clock = clock
        self.high_water: int | None = None  # the highest id read; None until the first statement
        self.gaps: dict[int, float] = {}  # id not seen yet, at or below high_water → when it was first missed
        self.verified_at = clock()
        self.verifies = 0  # coverage dropped so far (the tests and the bench read it)
        self._verify_next = False  # at the next plan: the feed skipped more ids than it follows (this round's
        # answers, read in the same statement as the look-ups, still hold)
        self._tables: dict[Key, _Table] = {}
        # This round's requests: each check's text, and the exact names and prefixes asked (plan → listing).
        self._asked: dict[Key, tuple[dict[PartitionCheck, tuple[bool, str]], set[str], set[str]]] = {}

    # -- the round ---------------------------------------------------------------------------------------

    def plan(self, requests: Sequence[ListingRequest]) -> FeedRead:
        """What this round's statement must read for ``requests``: the feed, and what they ask that is not covered.
        Drops the coverage first when a verify is due."""
        now = self.clock()
        if self._verify_next or now - self.verified_at >= self.verify_seconds:
            self.verify(now)
        names: list[tuple[str, str, str]] = []
        prefixes: list[tuple[str, str, str]] = []
        self._asked = {}
        for request in requests:
            state = self._table(request)
            asked = self._asked[(request.db, request.table)] = self._texts(state, request)
            names.extend((request.db, request.table, n) for n in asked[1] - state.names)
            prefixes.extend((request.db, request.table, p) for p in asked[2] - state.prefixes)
        gaps = tuple(sorted(self.gaps))
        return FeedRead(tuple(names), tuple(prefixes), True, self.high_water, gaps, self.baseline_span)

    def absorb(
        self,
        read: FeedRead,
        delivered: Iterable[tuple[int, str | None, str, str]],
        found: Iterable[tuple[str, str, str]],
        start: int | None = None,
    ) -> None:
        """Take what ``read``'s statement returned: the feed's rows (id, db, table, name; db None for a partition
        no check can ask for, in another catalog: its id is seen all the same), the look-ups' (db, table, name),
        and where the feed started when ``read.after`` was None. The look-ups' names and prefixes are covered from
        now on."""
        for db, table, name in found:
            state = self._tables.get((db, table))
            if state is not None:
                state.present.add(name)
        for db, table, name in read.names:
            self._tables[(db, table)].names.add(name)
        for db, table, prefix in read.prefixes:
            self._tables[(db, table)].prefixes.add(prefix)
        if not read.follow:
            return
        if read.after is None and start is None:
            raise ValueError("the feed's first statement returns where it started")
        after = read.after if read.after is not None else max(start or 0, 0)  # ids start at 1
        seen: set[int] = set()
        for part_id, of_db, table, name in delivered:
            seen.add(part_id)
            state = self._tables.get((of_db, table)) if of_db is not None else None
            if state is not None:
                state.present.add(name)
        self._advance(after, seen)

    def _advance(self, after: int, seen: set[int]) -> None:
        """Move the high-water mark to the highest id read; ids skipped below it become gaps, for a while."""
        now = self.clock()
        for part_id in seen:
            self.gaps.pop(part_id, None)
        top = max(seen, default=after)
        base = self.high_water if self.high_water is not None else after
        if top > base:
            if top - base - len(seen) > self.max_gaps:
                self._verify_next = True  # too many ids skipped to follow one by one: look everything up again
            else:
                for part_id in range(base + 1, top):
                    if part_id not in seen:
                        self.gaps.setdefault(part_id, now)
        self.high_water = max(top, base)
        self.gaps = {i: t for i, t in self.gaps.items() if now - t < self.gap_seconds}
        if len(self.gaps) > self.max_gaps:
            self.gaps.clear()
            self._verify_next = True

    def listing(self, request: ListingRequest) -> AnsweredListing:
        """``request``'s exact checks answered from the names known present, and the present names its partial
        checks (or its narrowing, without checks) ask for."""
        state = self._table(request)
        asked = self._asked.get((request.db, request.table)) or self._texts(state, request)
        present = state.present
        answers = {check: text in present for check, (exact, text) in asked[0].items() if exact}
        prefixes = asked[2]
        if not prefixes:
            return AnsweredListing(answers, [])
        whole = "" in prefixes
        names = [n for n in present if whole or any(p in prefixes for p in name_prefixes(n))]
        return AnsweredListing(answers, names)

    # -- coverage ----------------------------------------------------------------------------------------

    def verify(self, now: float | None = None) -> None:
        """Drop every table's coverage: the next round looks every due name up again."""
        self._tables.clear()
        self._verify_next = False
        self.verified_at = self.clock() if now is None else now
        self.verifies += 1

    def forget(self, db: str, table: str) -> None:
        """Drop one table's coverage (it went missing, or a statement about it was refused)."""
        self._tables.pop((db, table), None)

    def covered(self, db: str, table: str) -> tuple[set[str], set[str]]:
        """The names and prefixes of db.table looked up and followed since (empty when none)."""
        state = self._tables.get((db, table))
        return (set(state.names), set(state.prefixes)) if state is not None else (set(), set())

    def _table(self, request: ListingRequest) -> _Table:
        columns = tuple(request.columns)
        key = (request.db, request.table)
        state = self._tables.get(key)
        if state is None or state.columns != columns:  # new, or its partition columns changed
            state = self._tables[key] = _Table(columns)
        return state

    @staticmethod
    def _texts(
        state: _Table, request: ListingRequest
    ) -> tuple[dict[PartitionCheck, tuple[bool, str]], set[str], set[str]]:
        """Each check's text (computed once per coverage), and the request's exact names and prefixes."""
        texts = state.texts
        mine: dict[PartitionCheck, tuple[bool, str]] = {}
        for check in request.checks:
            text = texts.get(check)
            if text is None:
                spec = dict(check.spec)
                if gives_every_column(state.columns, spec):  # exact or not, it is that partition's name
                    text = texts[check] = (True, partition_name(state.columns, spec))
                else:
                    text = texts[check] = (False, leading_prefix(state.columns, spec))
            mine[check] = text
        names = {text for exact, text in mine.values() if exact}
        prefixes = {text for exact, text in mine.values() if not exact}
        if not request.checks:
            prefixes.add(leading_prefix(state.columns, request.narrowing))
        return mine, names, prefixes
