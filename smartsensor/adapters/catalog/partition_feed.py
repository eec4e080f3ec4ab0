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
  *gaps*: ids at or below it not seen yet. The metastore hands out ids in blocks (DataNucleus: each instance takes
  a block of ids and uses it for as long as it runs) and commits concurrent additions in any order, so an id far
  below the mark may still commit, however late: an idle instance's block. A gap is therefore never given up for
  its age, only for its count: the ``max_gaps`` highest are kept (ids handed out and never used, by a restart or
  a rolled-back addition, are the rest), and giving the lowest up makes the next round a verify.
- **Going back.** A failover to a lagging replica or a restore loses the last transactions, and the metastore
  hands their ids out again. Every id the latest delivering round read (up to ``max_witnesses``) is a *witness*:
  the next statement reads those ids back. Those rows committed after every partition the process read before
  them, so losing any partition it read loses a witness too (the database keeps commits in order). A witness gone
  or holding another partition is a *reset*: the coverage is dropped, the feed starts again below the highest id,
  as at the first statement, and the catalog runs the round's statement again, so the round's answers hold
  nothing the database lost.
- **The id sequence.** A loss may also take back the sequence's advance alone (DataNucleus's ``SEQUENCE_TABLE``
  row of ``MPartition``, whose ``NEXT_VAL`` is above every id it handed out): no partition is lost, every witness
  survives, and the ids from ``NEXT_VAL`` up are handed out a second time, while an instance may still hold and use
  them from the first. Each statement therefore also reads ``NEXT_VAL`` (when the metastore has the row). Below
  the value read before (or the row gone) is a reset, as above; and every id at or above it that may have been
  handed out twice (from the value it went back to up to the one before, or to the high-water mark when ids at or
  above the sequence were read: an instance using a block whose allocation was lost) is *reissued*: read by id in
  every round from then on, as a gap is, but kept after it is seen, since its second partition may commit any time
  later (after a drop of its first). A reissued id read back as it was is no delivery; one that holds another
  partition than when last seen is a witness beside the others (unless new ids came in the same round: then
  among them), since it may be a partition of old come back (a failover lost its drop) as well as a new one. The
  ``max_gaps`` highest are kept, giving a lower one up makes the next round a verify.
- **Verify.** Every ``verify_seconds`` (and after gaps were given up) the coverage is dropped, so every due name is
  looked up again: a partition dropped, a table re-created, or an id given up by count shows there, at the latest.
  The feed's position is kept.

The bound: a partition added is seen by the round after it commits, however long after its id was handed out,
as long as its id is above the mark, one of the ``max_gaps`` highest unseen ids below it or a reissued id; a
database that went back is seen by the next round (2 statements in that round), and so is a sequence that went
back as long as a round reads it below what it read before, or at or below the mark. Otherwise, and for a drop,
by the next verify.

The feed's first statement starts ``baseline_span`` ids below the metastore's highest id (and says where), so that
ids handed out before the process started and committed just after are read too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from smartsensor.hive_filter.names import TableName, format_spec
from smartsensor.ports import AnsweredListing, ListingRequest
from smartsensor.sensors.checks import PartitionCheck

VERIFY_SECONDS = 600.0
BASELINE_SPAN = 1_000
MAX_GAPS = 10_000
MAX_WITNESSES = 100
Row = tuple[str | None, str, str]  # a partition's (db, table, name): db None in a catalog other than hive
_UNREAD: Row = (None, "", "")  # a reissued id's partition before a statement asked for it (no table is named "")


def partition_name(columns: Sequence[str], spec: dict[str, str]) -> str:
    """The stored name of the partition ``spec`` gives every column of (``ds=10%3A00/hr=0``)."""
    return format_spec(spec, columns)


def gives_every_column(columns: Sequence[str], spec: dict[str, str]) -> bool:
    """Whether ``spec`` gives every one of ``columns``: it matches one partition at most, by its full name."""
    return len(spec) == len(columns) and all(c in spec for c in columns)


def leading_prefix(columns: Sequence[str], spec: dict[str, str]) -> str:
    """A start every matching partition's name has: the leading columns ``spec`` gives, each followed by ``/``
    ("" when it does not give the first column: every partition of the table). The last column is never part of
    it, since no ``/`` follows it in a name: a spec that gives every column is listed by the columns before it."""
    leading = []
    for column in columns[:-1]:
        if column not in spec:
            break
        leading.append(column)
    return format_spec(spec, leading) + "/" if leading else ""


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
    statement returning that start), the ``gaps`` and the ``reissued`` ids (read by id, as they are now), the
    ``witnesses`` (ids read back as they are now) and the metastore's id sequence."""

    names: tuple[tuple[str, str, str], ...]
    prefixes: tuple[tuple[str, str, str], ...]
    follow: bool = False
    after: int | None = None
    gaps: tuple[int, ...] = ()
    span: int = BASELINE_SPAN
    witnesses: tuple[int, ...] = ()
    reissued: tuple[int, ...] = ()


@dataclass
class _Table:
    """One table's memory: the names and prefixes looked up, the names known present, and each check's text."""

    columns: tuple[str, ...]
    names: set[str] = field(default_factory=set)
    prefixes: set[str] = field(default_factory=set)
    present: set[str] = field(default_factory=set)
    texts: dict[PartitionCheck, tuple[bool, str]] = field(default_factory=dict)
    changed: int = 0  # the feed's serial when a name was last added here (or the memory started)
    ids: dict[str, int] = field(default_factory=dict)  # a present name → its PART_ID, as last read


class PartitionFeed:
    """The process's memory of the metastore's partitions, fed by its ``PARTITIONS`` ids (no I/O; not
    thread-safe: one round at a time, as the metastore-database backend calls it under its lock)."""

    def __init__(
        self,
        verify_seconds: float = VERIFY_SECONDS,
        baseline_span: int = BASELINE_SPAN,
        max_gaps: int = MAX_GAPS,
        clock: Callable[[], float] = time.monotonic,
        max_witnesses: int = MAX_WITNESSES,
        keep_ids: bool = False,
    ) -> None:
        """``keep_ids``: remember each present name's PART_ID, and count a name read with another id as a change
        (a partition dropped and added again: the landing publisher's); a round's feed needs names alone."""
        self.keep_ids = keep_ids
        self.verify_seconds = verify_seconds
        self.baseline_span = baseline_span
        self.max_gaps = max_gaps
        self.max_witnesses = max_witnesses
        self.clock = clock
        self.high_water: int | None = None  # the highest id read; None until the first statement (and at a reset)
        self.gaps: set[int] = set()  # ids at or below high_water not seen yet, the max_gaps highest
        self.witnesses: dict[int, Row] = {}  # ids the latest delivering round read → what they held
        self.sequence: int | None = None  # the id sequence's NEXT_VAL last read (None: not read, or no row)
        self.reissued: dict[int, Row | None] = {}  # ids maybe handed out twice → what they held when last seen
        self._reissued_floor = 0  # reissued ids below it were given up for their count
        self.verified_at = clock()
        self.verifies = 0  # coverage dropped so far (the tests and the bench read it)
        self.resets = 0  # times the database was found to have gone back
        self.gaps_given_up = 0  # unseen ids given up for their count, so far
        self.reset_pending = False  # absorb found a reset: the round's statement must run again (plan, absorb)
        self._verify_next = False  # at the next plan: the feed gave ids up or went back (this round's answers,
        # read in the same statement as the look-ups, still hold, except after a reset)
        self._tables: dict[TableName, _Table] = {}
        self.serial = 0  # counts the changes to the tables' memories: a table's ``changed`` is one of these
        # This round's requests: each check's text, and the exact names and prefixes asked (plan → listing).
        self._asked: dict[TableName, tuple[dict[PartitionCheck, tuple[bool, str]], set[str], set[str]]] = {}

    # -- the round ---------------------------------------------------------------------------------------

    def plan(self, requests: Sequence[ListingRequest]) -> FeedRead:
        """What this round's statement must read for ``requests``: the feed, and what they ask that is not covered.
        Drops the coverage first when a verify is due."""
        now = self.clock()
        if self._verify_next or now - self.verified_at >= self.verify_seconds:
            self.verify(now)
        self.reset_pending = False
        names: list[tuple[str, str, str]] = []
        prefixes: list[tuple[str, str, str]] = []
        self._asked = {}
        for request in requests:
            state = self._table(request)
            asked = self._asked[request.table_name] = self._texts(state, request)
            names.extend((request.db, request.table, n) for n in asked[1] - state.names)
            prefixes.extend((request.db, request.table, p) for p in asked[2] - state.prefixes)
        return FeedRead(
            tuple(names),
            tuple(prefixes),
            True,
            self.high_water,
            tuple(sorted(self.gaps)),
            self.baseline_span,
            tuple(sorted(self.witnesses)),
            tuple(sorted(self.reissued)),
        )

    def absorb(
        self,
        read: FeedRead,
        delivered: Iterable[tuple[int, str | None, str, str]],
        found: Iterable[tuple[str, str, str, int | None]],
        start: int | None = None,
        witnessed: Iterable[tuple[int, str | None, str, str]] = (),
        sequence: int | None = None,
    ) -> None:
        """Take what ``read``'s statement returned: the feed's rows (id, db, table, name; db None for a partition
        no check can ask for, in another catalog: its id is seen all the same), the look-ups' (db, table, name, id),
        where the feed started when ``read.after`` was None, the witnesses' rows as they are now and the id
        sequence's NEXT_VAL (None: no such row, or no SEQUENCE_TABLE). The look-ups' names and prefixes are covered
        from now on. A witness missing or changed, or the sequence below what was read before, is a reset
        (``reset_pending``; not for the sequence in a statement that starts the feed: it reads everything again)."""
        if read.follow:
            back = self._follow_sequence(sequence)
            now = {part_id: (db, table, name) for part_id, db, table, name in witnessed}
            if (back and read.after is not None) or any(now.get(i) != self.witnesses.get(i) for i in read.witnesses):
                self._reset()
                return
        for db, table, name, found_id in found:
            state = self._tables.get(TableName(db, table))
            if state is not None:
                self._add(state, name, found_id)
        for db, table, name in read.names:
            self._tables[TableName(db, table)].names.add(name)
        for db, table, prefix in read.prefixes:
            self._tables[TableName(db, table)].prefixes.add(prefix)
        if read.follow:
            self._follow(read, delivered, start, sequence)

    def _follow_sequence(self, sequence: int | None) -> bool:
        """Take the id sequence's value read; whether it went back (below the value read before, or its row gone).
        When it did, the ids from there up to where it was (or the mark) may be handed out twice: reissued."""
        back = self.sequence is not None and (sequence is None or sequence < self.sequence)
        if back and self.sequence is not None:
            top = max(self.sequence, (self.high_water or 0) + 1)
            self._reissue(range(max(sequence or 1, 1), top))
        if back or sequence is not None:
            self.sequence = sequence
        return back

    def _follow(
        self,
        read: FeedRead,
        delivered: Iterable[tuple[int, str | None, str, str]],
        start: int | None,
        sequence: int | None,
    ) -> None:
        """The feed's part of ``absorb``: the rows delivered, the witnesses, the mark and the gaps, the sequence."""
        if read.after is None and start is None:
            raise ValueError("the feed's first statement returns where it started")
        after = read.after if read.after is not None else max(start or 0, 0)  # ids start at 1
        rows: dict[int, Row] = {}
        for part_id, of_db, table, name in delivered:
            rows[part_id] = (of_db, table, name)
            state = self._tables.get(TableName(of_db, table)) if of_db is not None else None
            if state is not None:
                self._add(state, name, part_id)
        new, changed = self._reread(read, rows)
        if new:  # they committed after every partition read before them (and before the changed ones, or beside)
            self.witnesses = {i: rows[i] for i in sorted(new | changed, reverse=True)[: self.max_witnesses]}
        elif changed:  # witnesses beside the ones kept: what was read before may still be lost
            room = max(self.max_witnesses - len(self.witnesses), 0)
            self.witnesses.update({i: rows[i] for i in sorted(changed, reverse=True)[:room]})
        self._advance(after, set(rows))
        if sequence is not None and self.high_water is not None and sequence <= self.high_water:
            self._reissue(range(sequence, self.high_water + 1))  # ids read at or above the sequence
        asked = set(read.gaps)
        for part_id, held in self.reissued.items():  # what this statement says of the ids reissued since its plan
            if held == _UNREAD and (part_id in rows or part_id > after or part_id in asked):
                self.reissued[part_id] = rows.get(part_id)

    def _reread(self, read: FeedRead, rows: dict[int, Row]) -> tuple[set[int], set[int]]:
        """The ids ``rows`` delivered that no statement read before (above the mark, gaps), and the reissued ids
        read before that hold another partition than when last seen (an id handed out twice, its second partition;
        or its first again, after a failover lost its drop); what each reissued id holds is kept."""
        new = set(rows)
        changed: set[int] = set()
        gaps = set(read.gaps)
        for part_id in read.reissued:
            if part_id not in self.reissued:
                continue
            before, now = self.reissued[part_id], rows.get(part_id)
            if read.after is not None and part_id <= read.after and part_id not in gaps:
                new.discard(part_id)
                if now is not None and before not in (_UNREAD, now):
                    changed.add(part_id)
            if now is not None or before == _UNREAD:
                self.reissued[part_id] = now
        return new, changed

    def _add(self, state: _Table, name: str, part_id: int | None) -> None:
        """``name`` is present, with ``part_id``: a change when it is new, or (keeping ids) has another id than the
        one read before (dropped and added again since: the drop itself is not in the feed)."""
        if name in state.present and (not self.keep_ids or part_id is None or state.ids.get(name) == part_id):
            return
        state.present.add(name)
        if self.keep_ids and part_id is not None:
            state.ids[name] = part_id
        self.serial += 1
        state.changed = self.serial

    def _reset(self) -> None:
        """The database went back (a failover, a restore): forget what was read, and start the feed again below
        the highest id, as at the first statement. The gaps stay: ids of blocks handed out before may still
        commit; so do the reissued ids."""
        self.resets += 1
        self.reset_pending = True
        self._verify_next = True
        self.high_water = None
        self.witnesses = {}

    def _reissue(self, ids: range) -> None:
        """``ids`` may be handed out twice: read them by id in every round from now on (what they hold not known
        yet), the ``max_gaps`` highest kept (an id given up once is not taken again: its count is not given up at
        every round)."""
        ids = range(max(ids.start, self._reissued_floor), ids.stop)
        if len(ids) > self.max_gaps:
            self._give_up(len(ids) - self.max_gaps)
            ids = ids[-self.max_gaps :]
            self._reissued_floor = ids.start
        for part_id in ids:
            if part_id not in self.reissued:
                self.reissued[part_id] = _UNREAD
        if len(self.reissued) > self.max_gaps:
            kept = sorted(self.reissued)[-self.max_gaps :]
            self._give_up(len(self.reissued) - len(kept))
            self.reissued = {i: self.reissued[i] for i in kept}
            self._reissued_floor = max(self._reissued_floor, kept[0])

    def _advance(self, after: int, seen: set[int]) -> None:
        """Move the high-water mark to the highest id read; ids skipped below it become gaps, the ``max_gaps``
        highest kept."""
        self.gaps -= seen
        top = max(seen, default=after)
        base = self.high_water if self.high_water is not None else after
        if top > base:
            skipped = (top - 1 - base) - sum(1 for i in seen if base < i < top)
            new: list[int] = []
            part_id = top - 1
            while part_id > base and len(new) < self.max_gaps:  # the highest first: lower ones are given up
                if part_id not in seen:
                    new.append(part_id)
                part_id -= 1
            self._give_up(skipped - len(new))
            self.gaps.update(new)
        self.high_water = max(top, base)
        self.gaps = {i for i in self.gaps if i <= self.high_water}
        if len(self.gaps) > self.max_gaps:
            kept = sorted(self.gaps)[-self.max_gaps :]
            self._give_up(len(self.gaps) - len(kept))
            self.gaps = set(kept)

    def _give_up(self, count: int) -> None:
        """``count`` unseen (or reissued) ids are no longer followed: the next round looks every due name up
        again."""
        if count > 0:
            self.gaps_given_up += count
            self._verify_next = True

    def listing(self, request: ListingRequest) -> AnsweredListing:
        """``request``'s exact checks answered from the names known present, and the present names its partial
        checks (or its narrowing, without checks) ask for."""
        state = self._table(request)
        asked = self._asked.get(request.table_name) or self._texts(state, request)
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
        self._tables.pop(TableName(db, table), None)

    def changed_at(self, db: str, table: str) -> int | None:
        """The serial at which db.table's memory last changed (a name added, or the memory started again: after
        a verify, a reset or a change of its columns); None when the feed keeps no memory of it. Equal serials
        mean the same names: a table whose serial has not moved since it was last read needs no new read."""
        state = self._tables.get(TableName(db, table))
        return state.changed if state is not None else None

    def partition_ids(self, db: str, table: str) -> dict[str, int]:
        """The PART_ID of each name of db.table the feed knows present, when it keeps ids (a name dropped since the
        last verify may still be among them)."""
        state = self._tables.get(TableName(db, table))
        return dict(state.ids) if state is not None else {}

    def covered(self, db: str, table: str) -> tuple[set[str], set[str]]:
        """The names and prefixes of db.table looked up and followed since (empty when none)."""
        state = self._tables.get(TableName(db, table))
        return (set(state.names), set(state.prefixes)) if state is not None else (set(), set())

    def _table(self, request: ListingRequest) -> _Table:
        columns = tuple(request.columns)
        key = request.table_name
        state = self._tables.get(key)
        if state is None or state.columns != columns:  # new, or its partition columns changed
            self.serial += 1
            state = self._tables[key] = _Table(columns, changed=self.serial)
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
