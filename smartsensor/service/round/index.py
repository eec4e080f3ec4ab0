"""The waiting checks of one shard range, in memory: per distinct check, its cohorts and their counts, when it
next needs a round, and the tables it reads. No row per task: memory and a round's work follow the checks.

A check needs a round at its *attention* time: the earliest point, over its cohorts, of the next poke on the
cohort's own schedule or of the cohort's time limit (so a try times out on time even when its check is not due).
A heap orders the checks by it, so finding the due ones costs O(due · log checks), not O(tasks).
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache

from smartsensor.domain.keys import CheckKey, Cohort, CohortRows
from smartsensor.domain.timing import BadExecSettings, next_poke_at, parse_exec

Table = tuple[str, str]
BadCohort = tuple[CheckKey, Cohort, str]  # a cohort that cannot be planned, and why: it fails alone


@dataclass(slots=True, eq=False)
class WaitingCheck:
    """One distinct check of the range: its cohorts (count of tasks in each), when it was last poked, when it
    next needs a round (None while a round has it), and the tables its checks read (once they were built)."""

    key: CheckKey
    cohorts: dict[Cohort, int] = field(default_factory=dict)
    last_poke: datetime | None = None
    attention: datetime | None = None
    tables: frozenset[Table] = frozenset()


@lru_cache(maxsize=65_536)
def _cohort_attention(cohort: Cohort, last_poke: datetime | None) -> datetime:
    """The cohort's next poke or its time limit, whichever is first. Raises ArithmeticError/ValueError when its
    dates leave the calendar (the cohort then cannot be planned). Cached: the checks a round pokes share their
    poke time, and the tasks a round started share their start, so 100,000 checks have a handful of answers."""
    settings = parse_exec(cohort.exec_dict)
    poke = next_poke_at(cohort.start_date, last_poke, settings)
    try:
        limit = cohort.start_date + timedelta(seconds=settings.time_limit)
    except OverflowError:  # a time limit beyond the calendar: it never times out
        return poke
    return min(poke, limit)


class CheckIndex:
    """The waiting checks of a range, kept between rounds. Not thread-safe: its ShardWorker holds a lock."""

    def __init__(self) -> None:
        self.checks: dict[CheckKey, WaitingCheck] = {}
        self.tasks = 0  # waiting tasks counted in the cohorts
        self._heap: list[tuple[datetime, int, CheckKey]] = []
        self._order = itertools.count()
        self._by_table: dict[Table, set[CheckKey]] = defaultdict(set)
        self._keys_of_hash: dict[int, int] = defaultdict(int)
        self.collided: set[int] = set()  # hashcodes shared by different checks: never marked together

    def __len__(self) -> int:
        return len(self.checks)

    @property
    def hashes(self) -> int:
        """Distinct hashcodes (fewer than checks only when checks collide)."""
        return len(self._keys_of_hash)

    def add(self, rows: CohortRows) -> tuple[list[WaitingCheck], list[BadCohort]]:
        """Count these (check, cohort, n) in; returns the checks that are new to the index and the cohorts that
        cannot be planned (settings out of bounds, dates that overflow), which are left out."""
        new, bad = [], []
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
            check = self.checks.get(key)
            is_new = check is None
            if check is None:
                check = self.checks[key] = WaitingCheck(key)
                new.append(check)
                self._keys_of_hash[key[0]] += 1
                if self._keys_of_hash[key[0]] > 1:
                    self.collided.add(key[0])
            check.cohorts[cohort] = check.cohorts.get(cohort, 0) + n
            self.tasks += n
            # A check a round has (attention None) is rescheduled by that round, with this cohort.
            if is_new or (check.attention is not None and when < check.attention):
                self._push(check, when)
        return new, bad

    def due(self, now: datetime) -> list[WaitingCheck]:
        """Checks whose attention time has come. They leave the heap until ``done`` reschedules them."""
        out = []
        while self._heap and self._heap[0][0] <= now:
            when, _, key = heapq.heappop(self._heap)
            check = self.checks.get(key)
            if check is not None and check.attention == when:
                check.attention = None
                out.append(check)
        return out

    def on_tables(self, tables: set[Table]) -> list[WaitingCheck]:
        """Checks reading any of these tables (a landing signal named them), wherever they are in the heap."""
        keys = set().union(*(self._by_table.get(t, ()) for t in tables)) if tables else set()
        return [self.checks[k] for k in keys if k in self.checks]

    def set_tables(self, check: WaitingCheck, tables: frozenset[Table]) -> None:
        """The tables a check's built checks read: a landing signal on one of them makes it due."""
        for t in check.tables - tables:
            self._by_table[t].discard(check.key)
        for t in tables:
            self._by_table[t].add(check.key)
        check.tables = tables

    def done(self, check: WaitingCheck, poked_at: datetime | None) -> list[BadCohort]:
        """A round is done with this check (still waiting): remember its poke, schedule its next attention.
        Returns cohorts whose dates cannot be planned any more (they are dropped from the index)."""
        if check.key not in self.checks:
            return []
        if poked_at is not None:
            check.last_poke = poked_at
        when, bad = None, []
        for cohort in list(check.cohorts):
            try:
                at = _cohort_attention(cohort, check.last_poke)
            except (ArithmeticError, ValueError) as exc:
                bad.append((check.key, cohort, f"cannot schedule the next poke: {type(exc).__name__}: {exc}"))
                self.remove_cohort(check.key, cohort)
                continue
            when = at if when is None else min(when, at)
        if when is not None and check.key in self.checks:
            self._push(check, when)
        return bad

    def remove(self, key: CheckKey) -> None:
        """A check that ended (landed, failed) leaves the index with all its cohorts."""
        check = self.checks.pop(key, None)
        if check is None:
            return
        self.tasks -= sum(check.cohorts.values())
        for t in check.tables:
            self._by_table[t].discard(key)
        self._keys_of_hash[key[0]] -= 1
        if self._keys_of_hash[key[0]] <= 0:
            del self._keys_of_hash[key[0]]
        if self._keys_of_hash.get(key[0], 0) <= 1:
            self.collided.discard(key[0])

    def remove_cohort(self, key: CheckKey, cohort: Cohort) -> None:
        """A cohort whose tries ended (timed out, failed alone); the check goes when its last cohort does."""
        check = self.checks.get(key)
        if check is None or cohort not in check.cohorts:
            return
        self.tasks -= check.cohorts.pop(cohort)
        if not check.cohorts:
            self.remove(key)

    def _push(self, check: WaitingCheck, when: datetime) -> None:
        check.attention = when
        heapq.heappush(self._heap, (when, next(self._order), check.key))
