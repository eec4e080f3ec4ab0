"""Per-task timing from exec_dict: poke schedule (with exponential backoff), time limit, outcome on timeout."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

from smartsensor.domain.states import State
from smartsensor.sensors import exec_fields
from smartsensor.sensors.errors import SensorDefinitionError

DEFAULT_MAX_WAIT = 3600.0


def _default(name: str) -> Any:
    """An exec field's declared default (smartsensor.sensors.exec_fields.FIELDS); a duration as float seconds."""
    field = exec_fields.BY_NAME[name]
    return float(field.default) if field.kind == "duration" and field.default is not None else field.default


@dataclass(frozen=True)
class ExecSettings:
    """How a sensor task runs, as stored in exec_dict: one attribute per exec field, each with the default its
    declaration gives it (smartsensor.sensors.exec_fields.FIELDS, the same names in the same order)."""

    poke_interval: float = _default("poke_interval")
    timeout: float = _default("timeout")
    execution_timeout: float | None = _default("execution_timeout")
    retries: int = _default("retries")
    retry_delay: float = _default("retry_delay")
    soft_fail: bool = _default("soft_fail")
    exponential_backoff: bool = _default("exponential_backoff")
    max_wait: float | None = _default("max_wait")

    @property
    def time_limit(self) -> float:
        """Seconds a try may wait: min(timeout, execution_timeout)."""
        return min(self.timeout, self.execution_timeout if self.execution_timeout is not None else math.inf)

    def interval(self, poke_number: int) -> float:
        """Seconds between poke ``poke_number`` and the next (doubling with backoff, capped)."""
        if not self.exponential_backoff:
            return self.poke_interval
        return min(self.poke_interval * (2 ** min(poke_number, 60)), self.backoff_cap)

    @property
    def backoff_cap(self) -> float:
        """Longest interval with exponential backoff: max_wait, else an hour (never below poke_interval)."""
        return max(self.max_wait if self.max_wait is not None else DEFAULT_MAX_WAIT, self.poke_interval)


class BadExecSettings(SensorDefinitionError):
    """A stored exec_dict that cannot be planned (not JSON, or a value out of bounds): its task fails alone."""


@lru_cache(maxsize=4096)
def parse_exec(exec_dict: str | None) -> ExecSettings:
    """ExecSettings from exec_dict JSON; unknown keys are ignored, missing ones take defaults.

    Every known value is checked against the same bounds as at registration (smartsensor.sensors.exec_fields),
    so a row written by hand or by an older version cannot overflow a date or a timer later;
    it raises BadExecSettings naming the field instead.
    """
    try:
        data = json.loads(exec_dict) if exec_dict else {}
    except (ValueError, RecursionError) as exc:
        raise BadExecSettings(f"exec_dict is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadExecSettings("exec_dict is not a JSON object")
    known = {}
    for name, value in data.items():
        field = exec_fields.BY_NAME.get(name)
        if field is not None:
            try:
                known[name] = field.check(value)
            except SensorDefinitionError as exc:
                raise BadExecSettings(f"exec_dict: {exc}") from None
    return ExecSettings(**known)


def next_poke_at(start: datetime, last_poke: datetime | None, settings: ExecSettings) -> datetime:
    """The first point of the task's poke schedule after ``last_poke`` (``start`` if never poked).

    The schedule is t0 = start, t(k+1) = t(k) + interval(k): derived from the start of the try, so
    a worker that restarts or takes over needs no stored per-task poke state.
    """
    if last_poke is None or last_poke < start:
        return start
    elapsed = (last_poke - start).total_seconds()
    if not settings.exponential_backoff:
        k = math.floor(elapsed / settings.poke_interval) + 1
        return start + timedelta(seconds=k * settings.poke_interval)
    t, k = 0.0, 0
    while t <= elapsed:
        step = settings.interval(k)
        if step >= settings.backoff_cap:  # constant steps from here on: jump straight past `elapsed`
            t += (math.floor((elapsed - t) / step) + 1) * step
            break
        t += step
        k += 1
    return start + timedelta(seconds=t)


def is_due(start: datetime, last_poke: datetime | None, settings: ExecSettings, now: datetime) -> bool:
    """True when a point of the task's own poke schedule has passed since its check was last poked."""
    return next_poke_at(start, last_poke, settings) <= now


def timed_out(start: datetime, settings: ExecSettings, now: datetime) -> bool:
    """True once the try has waited its time limit."""
    return (now - start).total_seconds() >= settings.time_limit


def retry_or(try_number: int, retries: int, final_state: State) -> State:
    """The one retry rule: up_for_retry while try_number <= retries (try 1 is the first), else ``final_state``."""
    return State.UP_FOR_RETRY if try_number <= retries else final_state


def timeout_state(try_number: int, settings: ExecSettings) -> State:
    """State after a timeout: up_for_retry while tries remain, else skipped (soft_fail) or failed."""
    return retry_or(try_number, settings.retries, State.SKIPPED if settings.soft_fail else State.FAILED)


TIMED_OUT = "timed out waiting"
_LAST_ERROR = "; last check error: "


def timeout_error(last_error: object | None) -> str:
    """The ``error`` of a try that timed out: with the last check error it saw, if any (cut to 2,000 chars)."""
    return (TIMED_OUT + (f"{_LAST_ERROR}{last_error}" if last_error else ""))[:2000]


def is_timeout_error(error: object) -> bool:
    """Whether ``error`` is one ``timeout_error`` wrote (not a check error that happens to start alike)."""
    return isinstance(error, str) and (error == TIMED_OUT or error.startswith(TIMED_OUT + _LAST_ERROR))
