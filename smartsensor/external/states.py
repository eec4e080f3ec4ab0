"""The states of another scheduler's tries, read back by their own key in batches: each answer is the try's state
and error here, and why it ended as data (``reason``), or ``superseded`` / ``unknown``; and a `serve` process's cache
of the answers that no longer change."""

from __future__ import annotations

import time
from typing import Any, NamedTuple, Sequence

from smartsensor.domain.keys import ExternalKey
from smartsensor.domain.rows import ExternalState
from smartsensor.domain.states import State
from smartsensor.domain.timing import is_timeout_error
from smartsensor.ports import ExternalTryStore
from smartsensor.wire import try_state_json

SUPERSEDED = "superseded"  # a states answer: the key has moved on to a newer try than the one asked about
# The error of a try registered again with another check: on the task instance it superseded, and on the states
# answers that ask about the try by its own hashcode (which then say superseded, never the other check's state).
OTHER_CHECK = "superseded by another check"
OTHER_CHECK_HELP = (
    f"{OTHER_CHECK}: this try of the task was registered again with another check (the run created again, a reset "
    "Airflow database, or two Airflow deployments under one key: give each its own instance name in its "
    "smartsensor connection)"
)
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


class Asked(NamedTuple):
    """One try asked about: its key and try number, and the hashcode of the check it registered when the caller
    knows it (then an answer for another check of the same try is ``superseded``)."""

    key: ExternalKey
    try_number: int
    hashcode: int | None = None


class TerminalAnswers:
    """A `serve` process's cache of answers that no longer change: a try that ended (or was superseded) stays so,
    unless a user sets its state by hand or the same try is registered again with another check, so such an answer
    is kept ``ttl`` seconds (at most ``size`` of them) and asked again only after that. It answers only a request
    with the same hashcode as the one it was read for (a request that names its check is never answered with
    another's), and a registration here that starts a new task instance for a try forgets that try's answer. A try
    that still waits, or is unknown, is always read from the database."""

    def __init__(self, size: int = 200_000, ttl: float = 60.0) -> None:
        self.size, self.ttl = size, ttl
        self._answers: dict[tuple[ExternalKey, int], tuple[float, int | None, dict[str, Any]]] = {}
        self.hits = 0

    def get(self, asked: Asked, now: float) -> dict[str, Any] | None:
        """The answer kept for ``asked`` (a key, a try and its hashcode if given), None when there is none, it was
        read for another hashcode, or it is past ``ttl``."""
        kept = self._answers.get((asked.key, asked.try_number))
        if kept is None or now - kept[0] > self.ttl or kept[1] != asked.hashcode:
            return None
        self.hits += 1
        return kept[2]

    def keep(self, asked: Asked, answer: dict[str, Any], now: float) -> None:
        """Keep ``answer`` for ``asked`` if it can no longer change (the try ended or was superseded)."""
        if answer["state"] == UNKNOWN or still_waiting(answer["state"]):
            return
        if len(self._answers) >= self.size:  # full: start afresh rather than track ages (cheap, bounded)
            self._answers.clear()
        self._answers[(asked.key, asked.try_number)] = (now, asked.hashcode, answer)

    def forget(self, key: ExternalKey, try_number: int) -> None:
        """Drop the answer kept for a try (it was just registered again with another check)."""
        self._answers.pop((key, try_number), None)


def external_states(
    store: ExternalTryStore, asked: Sequence[Asked], cache: TerminalAnswers | None = None
) -> list[dict[str, Any]]:
    """The state of each try asked about, in order: the task instance's state and error, ``superseded`` when the
    key is at a newer try (or, asked with its hashcode, at another check of the same try), ``unknown`` when that try
    was never registered. One statement for the tries ``cache`` does not already know ended (none when it knows them
    all)."""
    now = time.monotonic()
    cached = {a: hit for a in asked if cache is not None and (hit := cache.get(a, now)) is not None}
    found: dict[ExternalKey, ExternalState] = {}
    if len(cached) < len(asked):
        found = store.read_states([a.key for a in asked if a not in cached])
    out = []
    for one in asked:
        answer = cached.get(one)
        if answer is None:
            answer = _answer(one, found.get(one.key))
            if cache is not None:
                cache.keep(one, answer, now)
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


def _answer(asked: Asked, row: ExternalState | None) -> dict[str, Any]:
    """The JSON answer for one try asked about (a document of the API, so a dict: ``wire.try_state_json``)."""
    key, try_number = asked.key, asked.try_number
    error: str | None
    if row is None or row.try_number < try_number:
        state, error, hashcode = UNKNOWN, None, None
    elif row.try_number > try_number:
        state, error, hashcode = SUPERSEDED, None, row.hashcode
    elif asked.hashcode is not None and row.hashcode != asked.hashcode:
        state, error, hashcode = SUPERSEDED, OTHER_CHECK_HELP, row.hashcode
    else:
        state, error, hashcode = row.state, row.error, row.hashcode
    return try_state_json(key, try_number, state, error, end_reason(state, error), hashcode)
