"""The states of another scheduler's tries, read back by their own key in batches: each answer is the try's state
and error here, and why it ended as data (``reason``), or ``superseded`` / ``unknown``; and a `serve` process's cache
of the answers that no longer change."""

from __future__ import annotations

import time
from typing import Any, Sequence

from sqlalchemy import Engine

from smartsensor.adapters.sql import external as external_sql
from smartsensor.domain.keys import ExternalKey
from smartsensor.domain.rows import ExternalState
from smartsensor.domain.states import State
from smartsensor.domain.timing import is_timeout_error

SUPERSEDED = "superseded"  # a states answer: the key has moved on to a newer try than the one asked about
UNKNOWN = "unknown"  # a states answer: that try of the key was never registered
# A try in one of these has not ended yet: a states request asked to wait is held while all its tries are here.
WAITING_STATES = frozenset({*State.SMART_WAITING, State.UP_FOR_RETRY, State.SCHEDULED, State.RUNNING})
# Why a try's answer says it ended, as data (``reason``; ``error`` keeps the text): ``landed`` (success),
# ``timeout`` (its timeout: failed, or skipped with soft_fail), ``error`` (failed for another reason), ``skipped``
# (skipped for another reason: by hand), ``superseded`` and ``unknown`` (as the state); None while it waits.
REASONS = ("landed", "timeout", "error", "skipped", SUPERSEDED, UNKNOWN)


def still_waiting(state: str) -> bool:
    """True while a try has not ended (nor been superseded, nor is unknown)."""
    return state in WAITING_STATES


class TerminalAnswers:
    """A `serve` process's cache of answers that no longer change: a try that ended (or was superseded) stays so,
    unless a user sets its state by hand, so such an answer is kept ``ttl`` seconds (at most ``size`` of them)
    and asked again only after that. A try that still waits, or is unknown, is always read from the database."""

    def __init__(self, size: int = 200_000, ttl: float = 60.0) -> None:
        self.size, self.ttl = size, ttl
        self._answers: dict[tuple[ExternalKey, int], tuple[float, dict[str, Any]]] = {}
        self.hits = 0

    def get(self, asked: tuple[ExternalKey, int], now: float) -> dict[str, Any] | None:
        """The answer kept for ``asked`` (a key and a try), None when there is none or it is past ``ttl``."""
        kept = self._answers.get(asked)
        if kept is None or now - kept[0] > self.ttl:
            return None
        self.hits += 1
        return kept[1]

    def keep(self, asked: tuple[ExternalKey, int], answer: dict[str, Any], now: float) -> None:
        """Keep ``answer`` for ``asked`` if it can no longer change (the try ended or was superseded)."""
        if answer["state"] == UNKNOWN or still_waiting(answer["state"]):
            return
        if len(self._answers) >= self.size:  # full: start afresh rather than track ages (cheap, bounded)
            self._answers.clear()
        self._answers[asked] = (now, answer)


def external_states(
    engine: Engine, asked: Sequence[tuple[ExternalKey, int]], cache: TerminalAnswers | None = None
) -> list[dict[str, Any]]:
    """The state of each (key, try_number), in order: the task instance's state and error, ``superseded`` when
    the key is at a newer try, ``unknown`` when that try was never registered. One statement for the tries
    ``cache`` does not already know ended (none when it knows them all)."""
    now = time.monotonic()
    cached = {a: hit for a in asked if cache is not None and (hit := cache.get(a, now)) is not None}
    found: dict[ExternalKey, ExternalState] = {}
    if len(cached) < len(asked):
        found = external_sql.read_external_states(engine, [key for key, n in asked if (key, n) not in cached])
    out = []
    for key, try_number in asked:
        answer = cached.get((key, try_number))
        if answer is None:
            answer = _answer(key, try_number, found.get(key))
            if cache is not None:
                cache.keep((key, try_number), answer, now)
        out.append(answer)
    return out


def end_reason(state: str, error: str | None) -> str | None:
    """The ``reason`` of an answer in ``state`` with ``error`` (one of ``REASONS``), None while the try waits."""
    if state in (SUPERSEDED, UNKNOWN):
        return state
    if state == State.SUCCESS:
        return "landed"
    if state in (State.FAILED, State.SKIPPED) and is_timeout_error(error):
        return "timeout"
    if state == State.FAILED:
        return "error"
    return "skipped" if state == State.SKIPPED else None


def _answer(key: ExternalKey, try_number: int, row: ExternalState | None) -> dict[str, Any]:
    """The JSON answer for one (key, try_number) (a document of the API, so a dict)."""
    if row is None or row.try_number < try_number:
        state, error, hashcode = UNKNOWN, None, None
    elif row.try_number > try_number:
        state, error, hashcode = SUPERSEDED, None, row.hashcode
    else:
        state, error, hashcode = row.state, row.error, row.hashcode
    return {
        "dag_id": key.dag_id,
        "task_id": key.task_id,
        "run_id": key.run_id,
        "map_index": key.map_index,
        "try_number": try_number,
        "state": state,
        "error": error,
        "reason": end_reason(state, error),
        "hashcode": hashcode,
    }
