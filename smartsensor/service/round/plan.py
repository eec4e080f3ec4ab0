"""One range's round between loading and writing: which vigils are due, and which checks answer them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from smartsensor.domain.keys import Cohort, Fence, VigilKey
from smartsensor.domain.transitions import DueVigil
from smartsensor.sensors.base import BaseSensor
from smartsensor.sensors.checks import Check
from smartsensor.service.round.index import VigilIndex
from smartsensor.service.round.report import RoundResult


@dataclass
class RoundPlan:
    """Filled by ``RangeRounds.plan_round``, answered by ``poke.poke_plans``, written by ``finish_round``."""

    result: RoundResult
    collided: set[int]
    now: datetime
    due: list[DueVigil]
    batched: dict[VigilKey, Sequence[Check]] = field(default_factory=dict)  # answered by the catalog in one batch
    sensors: dict[VigilKey, BaseSensor] = field(default_factory=dict)  # user sensors: their own poke()
    bad: list[tuple[VigilKey, Cohort, str]] = field(default_factory=list)  # cohorts that fail alone, with the reason
    fence: Fence | None = None  # the lease epoch the round was planned under: its write applies only under it
    index: VigilIndex | None = None  # the index it planned from (a rebuild meanwhile replaces it)
    seq: int = 0  # the index's sequence number at the plan: tasks joining its vigils later are newer
