"""What a round decides for the tasks of each vigil (the tasks waiting on one distinct check): the state changes
it asks the store to write.

Pure: no database, no Spark, no clock of its own. The store applies these as guarded updates in one
transaction (``smartsensor.ports.RoundStore.write_round``); states and who moves them are drawn in
ARCHITECTURE.md.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from smartsensor.domain.keys import Cohort, VigilKey
from smartsensor.domain.states import State
from smartsensor.domain.timing import parse_exec, timed_out, timeout_error, timeout_state
from smartsensor.sensors.errors import CheckError, PermanentCheckError, TransientCheckError

Outcome = bool | CheckError | None  # None: not poked this round


@dataclass
class DueVigil:
    """A vigil a round took (the tasks waiting on one distinct check), as cohorts with their counts, and what its
    poke said this round."""

    key: VigilKey
    cohorts: dict[Cohort, int]
    outcome: Outcome = None

    @property
    def size(self) -> int:
        return sum(self.cohorts.values())


@dataclass
class RoundWrites:
    """The state changes of one range's round, grouped the way the store writes them."""

    landed_hashes: list[int] = field(default_factory=list)  # success for every waiting task of these hashes
    landed_vigils: list[VigilKey] = field(default_factory=list)  # success for one exact vigil (hash collision)
    failed: list[tuple[VigilKey, bool, str]] = field(default_factory=list)  # (vigil, collided, error): failed
    # (state, error) → the cohorts whose tries timed out (each written by its exact try: start and number)
    ended: dict[tuple[str, str | None], list[tuple[VigilKey, Cohort]]] = field(default_factory=dict)
    bad: list[tuple[VigilKey, Cohort, str]] = field(default_factory=list)  # cohorts that cannot be planned: failed
    ended_hashes: set[int] = field(default_factory=set)  # hashcodes of the cohorts in ``ended`` and ``bad``

    def empty(self) -> bool:
        return not (self.landed_hashes or self.landed_vigils or self.failed or self.ended or self.bad)

    def hashcodes(self) -> set[int]:
        """Every hashcode these writes end tasks of (what a held states request waits on)."""
        return {
            *self.landed_hashes,
            *(k.hashcode for k in self.landed_vigils),
            *(vigil.hashcode for vigil, _, _ in self.failed),
            *self.ended_hashes,
        }


@dataclass
class Decision:
    """The writes of a round and what they say about its errors (for the round's counters)."""

    writes: RoundWrites
    permanent_errors: int = 0
    transient_errors: int = 0
    transient_example: str | None = None  # the first transient error, for `status`


def combine(outcomes: list[bool | CheckError]) -> bool | CheckError:
    """All checks of a sensor must hold; a permanent error wins over a transient one."""
    for o in outcomes:
        if isinstance(o, PermanentCheckError):
            return o
    for o in outcomes:
        if isinstance(o, CheckError):
            return o
    return all(outcomes)


def _timeout(cohort: Cohort, now: datetime) -> str:
    """The state a cohort's tries end in if they timed out by ``now``, else ''."""
    settings = parse_exec(cohort.exec_dict)
    return timeout_state(cohort.try_number, settings) if timed_out(cohort.start_date, settings, now) else ""


def decide(
    groups: list[DueVigil], collided: set[int], now: datetime, bad: list[tuple[VigilKey, Cohort, str]] | None = None
) -> Decision:
    """The transition rules of a round.

    - landed (True): every waiting task of the vigil → success;
    - a permanent error: every waiting task of the vigil → failed, with the error;
    - otherwise (not landed, not poked, transient error): each cohort whose try has waited its own
      time limit ends: up_for_retry while tries remain, else skipped (soft_fail) or failed, with the
      last check error in ``error``; the others go on waiting;
    - a cohort that cannot be planned (its exec settings, dates that overflow) → failed alone, with the reason.
    Vigils whose hash collides with another vigil's are written by exact vigil, never by hash.
    """
    decision = Decision(RoundWrites())
    writes = decision.writes
    ended: dict[tuple[str, str | None], list[tuple[VigilKey, Cohort]]] = defaultdict(list)
    ending: dict[Cohort, str] = {}  # per cohort, its state after a timeout now ('' while it waits); vigils share them
    for g in groups:
        if g.outcome is True:
            if g.key.hashcode in collided:
                writes.landed_vigils.append(g.key)
            else:
                writes.landed_hashes.append(g.key.hashcode)
            continue
        if isinstance(g.outcome, PermanentCheckError):
            decision.permanent_errors += 1
            writes.failed.append((g.key, g.key.hashcode in collided, str(g.outcome)))
            continue
        if isinstance(g.outcome, TransientCheckError):
            decision.transient_errors += 1
            decision.transient_example = decision.transient_example or str(g.outcome)[:500]
        error = timeout_error(g.outcome if isinstance(g.outcome, CheckError) else None)
        for cohort in g.cohorts:
            state = ending.get(cohort)
            if state is None:
                state = ending[cohort] = _timeout(cohort, now)
            if state:
                ended[(state, None if state == State.UP_FOR_RETRY else error)].append((g.key, cohort))
                writes.ended_hashes.add(g.key.hashcode)
    writes.ended = dict(ended)
    writes.bad = list(bad or ())
    writes.ended_hashes.update(key.hashcode for key, _, _ in writes.bad)
    return decision
