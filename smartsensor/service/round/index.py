"""The waiting checks of one shard range, in memory: per distinct check, its cohorts and their counts, when it
next needs a round, and the tables it reads. No row per task: memory and a round's work follow the checks.

A check needs a round at its *attention* time: the earliest point, over its cohorts, of the next poke on the
cohort's own schedule or of the cohort's time limit (so a try times out on time even when its check is not due).
A heap orders the checks by it, so finding the due ones costs O(due · log checks), not O(tasks).

Rounds *hold* the checks they planned (``hold``) and *release* them after their write (``release``). Tasks may
join a held check meanwhile (the other thread's feed, a reconciliation): each join is stamped with the index's
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
    holders: int = 0  # rounds that planned it and have not released it yet
    joined: dict[Cohort, int] | None = None  # cohorts counted in while held: the index's sequence number then
    urgent: bool = False  # a round saw it end with tasks left that joined meanwhile: due at the next round


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
    """The waiting checks of a range, kept between rounds. Not thread-safe: its RangeRounds holds a lock."""

    def __init__(self, seq: int = 0) -> None:
        self.seq = seq  # one more at every ``add``: orders joins against the rounds' plans
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

    def add(self, rows: CohortRows, ensure: bool = False) -> tuple[list[WaitingCheck], list[BadCohort]]:
        """Count these (check, cohort, n) in; returns the checks that are new to the index and the cohorts that
        cannot be planned (settings out of bounds, dates that overflow), which are left out.

        ``ensure`` (a reconciliation): the rows are what the database holds, not arrivals; a cohort is counted up
        to ``n``, never twice. A cohort new to its check makes the check due at the cohort's first poke."""
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
            check = self.checks.get(key)
            is_new = check is None
            if check is None:
                check = self.checks[key] = WaitingCheck(key)
                new.append(check)
                self._keys_of_hash[key.hashcode] += 1
                if self._keys_of_hash[key.hashcode] > 1:
                    self.collided.add(key.hashcode)
            have = check.cohorts.get(cohort, 0)
            more = max(0, n - have) if ensure else n
            if more:
                check.cohorts[cohort] = have + more
                self.tasks += more
            if check.holders:  # the rounds that hold it keep this cohort, and the last one reschedules it
                if check.joined is None:
                    check.joined = {}
                check.joined[cohort] = self.seq
            elif is_new or (not have and (check.attention is None or when < check.attention)):
                self._push(check, when)
        return new, bad

    def hold(self, check: WaitingCheck) -> dict[Cohort, int]:
        """A round takes this check: it leaves the heap until released. Returns its cohorts as planned (a copy: the
        round decides on these, whatever joins meanwhile)."""
        check.holders += 1
        check.attention = None
        return dict(check.cohorts)

    def release(
        self,
        check: WaitingCheck,
        plan_seq: int,
        ended: Iterable[Cohort],
        poked_at: datetime | None,
        urgent: bool,
        now: datetime,
    ) -> list[BadCohort]:
        """A round that held this check since sequence number ``plan_seq`` is done with it: the cohorts it ended
        leave, unless they joined again after its plan; the last holder reschedules what is left (at once when
        ``urgent``: the check ended with tasks left). Returns cohorts whose next poke cannot be computed."""
        check.holders = max(0, check.holders - 1)
        joined = check.joined or {}
        for cohort in ended:
            if joined.get(cohort, -1) <= plan_seq:
                self.remove_cohort(check.key, cohort)
        if check.key not in self.checks:
            return []
        if poked_at is not None and (check.last_poke is None or poked_at > check.last_poke):
            check.last_poke = poked_at
        check.urgent = check.urgent or urgent
        if check.holders:
            return []
        check.joined = None
        return self.done(check, None, now)

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

    def done(self, check: WaitingCheck, poked_at: datetime | None, now: datetime | None = None) -> list[BadCohort]:
        """A round is done with this check (still waiting): remember its poke, schedule its next attention (``now``
        if it is urgent). Returns cohorts whose dates cannot be planned any more (they are dropped from the index)."""
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
        if when is not None and check.urgent and now is not None:
            when = min(when, now)
        check.urgent = False
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
        self._keys_of_hash[key.hashcode] -= 1
        if self._keys_of_hash[key.hashcode] <= 0:
            del self._keys_of_hash[key.hashcode]
        if self._keys_of_hash.get(key.hashcode, 0) <= 1:
            self.collided.discard(key.hashcode)

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
