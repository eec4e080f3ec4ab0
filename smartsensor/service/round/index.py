"""The vigils of one shard range, in memory: per vigil (the tasks waiting on one distinct check), its cohorts and
their counts, when it next needs a round, and the tables it reads. No row per task: memory and a round's work
follow the vigils.

A vigil needs a round at its *attention* time: the earliest point, over its cohorts, of the next poke on the
cohort's own schedule or of the cohort's time limit (so a try times out on time even when its vigil is not due).
A heap orders the vigils by it, so finding the due ones costs O(due · log vigils), not O(tasks).

Rounds *hold* the vigils they planned (``hold``) and *release* them after their write (``release``). Tasks may
join a held vigil meanwhile (the other thread's feed, a reconciliation): each join is stamped with the index's
sequence number, and a release removes only the cohorts its round planned that did not join again after its plan.
So a landing never takes along the tasks that arrived while it was being written; they stay, due at once.
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Iterable

from smartsensor.domain.keys import Cohort, CohortRows, VigilKey
from smartsensor.domain.timing import BadExecSettings, next_poke_at, parse_exec
from smartsensor.hive_filter.names import TableName

BadCohort = tuple[VigilKey, Cohort, str]  # a cohort that cannot be planned, and why: it fails alone


@dataclass(slots=True, eq=False)
class Vigil:
    """One vigil of the range, the tasks waiting on one distinct check: its cohorts (count of tasks in each), when
    it was last poked, when it next needs a round (None while a round has it), and the tables its checks read (once
    they were built)."""

    key: VigilKey
    cohorts: dict[Cohort, int] = field(default_factory=dict)
    last_poke: datetime | None = None
    attention: datetime | None = None
    tables: frozenset[TableName] = frozenset()
    holders: int = 0  # rounds that planned it and have not released it yet
    joined: dict[Cohort, int] | None = None  # cohorts counted in while held: the index's sequence number then
    urgent: bool = False  # a round saw it end with tasks left that joined meanwhile: due at the next round


@lru_cache(maxsize=65_536)
def _cohort_attention(cohort: Cohort, last_poke: datetime | None) -> datetime:
    """The cohort's next poke or its time limit, whichever is first. Raises ArithmeticError/ValueError when its
    dates leave the calendar (the cohort then cannot be planned). Cached: the vigils a round pokes share their
    poke time, and the tasks a round started share their start, so 100,000 vigils have a handful of answers."""
    settings = parse_exec(cohort.exec_dict)
    poke = next_poke_at(cohort.start_date, last_poke, settings)
    try:
        limit = cohort.start_date + timedelta(seconds=settings.time_limit)
    except OverflowError:  # a time limit beyond the calendar: it never times out
        return poke
    return min(poke, limit)


class VigilIndex:
    """The vigils of a range, kept between rounds. Not thread-safe: its RangeRounds holds a lock."""

    def __init__(self, seq: int = 0) -> None:
        self.seq = seq  # one more at every ``add``: orders joins against the rounds' plans
        self.vigils: dict[VigilKey, Vigil] = {}
        self.tasks = 0  # waiting tasks counted in the cohorts
        self._heap: list[tuple[datetime, int, VigilKey]] = []
        self._order = itertools.count()
        self._by_table: dict[TableName, set[VigilKey]] = defaultdict(set)
        self._keys_of_hash: dict[int, int] = defaultdict(int)
        self.collided: set[int] = set()  # hashcodes shared by different vigils: never marked together

    def __len__(self) -> int:
        return len(self.vigils)

    @property
    def hashes(self) -> int:
        """Distinct hashcodes (fewer than vigils only when vigils collide)."""
        return len(self._keys_of_hash)

    def add(self, rows: CohortRows, ensure: bool = False) -> tuple[list[Vigil], list[BadCohort]]:
        """Count these (vigil, cohort, n) in; returns the vigils that are new to the index and the cohorts that
        cannot be planned (settings out of bounds, dates that overflow), which are left out.

        ``ensure`` (a reconciliation): the rows are what the database holds, not arrivals; a cohort is counted up
        to ``n``, never twice. A cohort new to its vigil makes the vigil due at the cohort's first poke."""
        new, bad = [], []
        self.seq += 1
        for key, cohort, n in rows:
            try:
                parse_exec(cohort.exec_dict)
                when = _cohort_attention(cohort, None)
            except BadExecSettings as exc:
                bad.append((key, cohort, str(exc)))
                continue
            except (ArithmeticError, ValueError) as exc:
                bad.append((key, cohort, f"cannot schedule the next poke: {type(exc).__name__}: {exc}"))
                continue
            vigil = self.vigils.get(key)
            is_new = vigil is None
            if vigil is None:
                vigil = self.vigils[key] = Vigil(key)
                new.append(vigil)
                self._keys_of_hash[key.hashcode] += 1
                if self._keys_of_hash[key.hashcode] > 1:
                    self.collided.add(key.hashcode)
            have = vigil.cohorts.get(cohort, 0)
            more = max(0, n - have) if ensure else n
            if more:
                vigil.cohorts[cohort] = have + more
                self.tasks += more
            if vigil.holders:  # the rounds that hold it keep this cohort, and the last one reschedules it
                if vigil.joined is None:
                    vigil.joined = {}
                vigil.joined[cohort] = self.seq
            elif is_new or (not have and (vigil.attention is None or when < vigil.attention)):
                self._push(vigil, when)
        return new, bad

    def hold(self, vigil: Vigil) -> dict[Cohort, int]:
        """A round takes this vigil: it leaves the heap until released. Returns its cohorts as planned (a copy: the
        round decides on these, whatever joins meanwhile)."""
        vigil.holders += 1
        vigil.attention = None
        return dict(vigil.cohorts)

    def release(
        self,
        vigil: Vigil,
        plan_seq: int,
        ended: Iterable[Cohort],
        poked_at: datetime | None,
        urgent: bool,
        now: datetime,
    ) -> list[BadCohort]:
        """A round that held this vigil since sequence number ``plan_seq`` is done with it: the cohorts it ended
        leave, unless they joined again after its plan; the last holder reschedules what is left (at once when
        ``urgent``: the vigil ended with tasks left). Returns cohorts whose next poke cannot be computed."""
        vigil.holders = max(0, vigil.holders - 1)
        joined = vigil.joined or {}
        for cohort in ended:
            if joined.get(cohort, -1) <= plan_seq:
                self.remove_cohort(vigil.key, cohort)
        if vigil.key not in self.vigils:
            return []
        if poked_at is not None and (vigil.last_poke is None or poked_at > vigil.last_poke):
            vigil.last_poke = poked_at
        vigil.urgent = vigil.urgent or urgent
        if vigil.holders:
            return []
        vigil.joined = None
        return self.done(vigil, None, now)

    def due(self, now: datetime) -> list[Vigil]:
        """Vigils whose attention time has come. They leave the heap until ``done`` reschedules them."""
        out = []
        while self._heap and self._heap[0][0] <= now:
            when, _, key = heapq.heappop(self._heap)
            vigil = self.vigils.get(key)
            if vigil is not None and vigil.attention == when:
                vigil.attention = None
                out.append(vigil)
        return out

    def on_tables(self, tables: set[TableName]) -> list[Vigil]:
        """Vigils reading any of these tables (a landing signal named them), wherever they are in the heap."""
        keys = set().union(*(self._by_table.get(t, ()) for t in tables)) if tables else set()
        return [self.vigils[k] for k in keys if k in self.vigils]

    def set_tables(self, vigil: Vigil, tables: frozenset[TableName]) -> None:
        """The tables a vigil's built checks read: a landing signal on one of them makes it due."""
        for t in vigil.tables - tables:
            self._by_table[t].discard(vigil.key)
        for t in tables:
            self._by_table[t].add(vigil.key)
        vigil.tables = tables

    def done(self, vigil: Vigil, poked_at: datetime | None, now: datetime | None = None) -> list[BadCohort]:
        """A round is done with this vigil (still waiting): remember its poke, schedule its next attention (``now``
        if it is urgent). Returns cohorts whose dates cannot be planned any more (they are dropped from the index)."""
        if vigil.key not in self.vigils:
            return []
        if poked_at is not None:
            vigil.last_poke = poked_at
        when, bad = None, []
        for cohort in list(vigil.cohorts):
            try:
                at = _cohort_attention(cohort, vigil.last_poke)
            except (ArithmeticError, ValueError) as exc:
                bad.append((vigil.key, cohort, f"cannot schedule the next poke: {type(exc).__name__}: {exc}"))
                self.remove_cohort(vigil.key, cohort)
                continue
            when = at if when is None else min(when, at)
        if when is not None and vigil.urgent and now is not None:
            when = min(when, now)
        vigil.urgent = False
        if when is not None and vigil.key in self.vigils:
            self._push(vigil, when)
        return bad

    def remove(self, key: VigilKey) -> None:
        """A vigil that ended (landed, failed) leaves the index with all its cohorts."""
        vigil = self.vigils.pop(key, None)
        if vigil is None:
            return
        self.tasks -= sum(vigil.cohorts.values())
        for t in vigil.tables:
            self._by_table[t].discard(key)
        self._keys_of_hash[key.hashcode] -= 1
        if self._keys_of_hash[key.hashcode] <= 0:
            del self._keys_of_hash[key.hashcode]
        if self._keys_of_hash.get(key.hashcode, 0) <= 1:
            self.collided.discard(key.hashcode)

    def remove_cohort(self, key: VigilKey, cohort: Cohort) -> None:
        """A cohort whose tries ended (timed out, failed alone); the vigil goes when its last cohort does."""
        vigil = self.vigils.get(key)
        if vigil is None or cohort not in vigil.cohorts:
            return
        self.tasks -= vigil.cohorts.pop(cohort)
        if not vigil.cohorts:
            self.remove(key)

    def _push(self, vigil: Vigil, when: datetime) -> None:
        vigil.attention = when
        heapq.heappush(self._heap, (when, next(self._order), vigil.key))
