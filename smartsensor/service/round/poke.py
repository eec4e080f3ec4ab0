"""The poke step of a round, for all ranges of a process at once: one batch of catalog calls, one
``poke()`` per vigil of a user sensor, each within ``[smart_sensor] poke_timeout``."""

from __future__ import annotations

import logging
from typing import Any, Callable

from smartsensor.domain.transitions import combine
from smartsensor.ports import CheckAnswerer
from smartsensor.sensors.errors import TransientCheckError
from smartsensor.service.round.bounded_poke import poker_for
from smartsensor.service.round.plan import RoundPlan

log = logging.getLogger(__name__)

Counters = dict[str, float]


class PokeContext(dict[str, Any]):
    """A user sensor's poke context: ``context['spark']`` starts Spark only when a sensor asks for it."""

    def __init__(self, checker: CheckAnswerer) -> None:
        super().__init__(checker=checker)
        self._checker = checker

    def __missing__(self, key: str) -> Any:
        if key == "spark":
            return self._checker.spark
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key == "spark" or key in self else default


def poke_plans(plans: list[RoundPlan], answerer: Callable[[], CheckAnswerer], poke_timeout: float) -> Counters:
    """Answer the due vigils of every plan; outcomes go into the plans' groups. Returns the call counters."""
    counters: Counters = {"catalog_calls": 0, "schema_calls": 0, "fs_calls": 0, "poke_calls": 0, "catalog_seconds": 0.0}
    if not any(p.batched or p.sensors for p in plans):
        return counters
    try:
        checker = answerer()
    except Exception as exc:  # noqa: BLE001 - Spark failing to start is an outage, not a bad check
        log.warning("cannot start Spark: %s", exc)
        for p in plans:
            for g in p.due:
                if g.outcome is None:
                    g.outcome = TransientCheckError(f"Spark unavailable: {exc}")
        return counters
    answers = checker.check_all(c for p in plans for checks in p.batched.values() for c in checks)
    context = PokeContext(checker)
    poker = poker_for(poke_timeout)
    for p in plans:
        for g in p.due:
            if g.key in p.batched:
                g.outcome = combine([answers[c] for c in p.batched[g.key]])
                continue
            sensor = p.sensors.get(g.key)
            if sensor is None:
                continue
            counters["poke_calls"] += 1
            g.outcome = poker.poke(g.key, lambda sensor=sensor: sensor.poke(context))  # type: ignore[misc]  # bound per iteration
            if isinstance(g.outcome, TransientCheckError):
                log.warning("poke of %s: %s (treated as transient)", g.key.classpath, g.outcome)
    counters.update(
        catalog_calls=checker.catalog_calls,
        schema_calls=checker.schema_calls,
        fs_calls=checker.fs_calls,
        catalog_seconds=round(checker.catalog_seconds, 4),
    )
    return counters
