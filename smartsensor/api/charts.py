"""Geometry of the status page's inline SVG charts, computed here so the page needs no JavaScript: scales,
stacked areas of tasks by state over time, horizontal bars, and the shard strip 0…limit coloured by owner."""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Callable, Iterable, Sequence

from smartsensor.domain.states import State
from smartsensor.service.status_report import LeaseStatus

# Colour-blind-friendly enough, distinct on white; owners get them in order, so two owners on a page differ.
PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#b07aa1",
    "#76b7b2",
    "#edc948",
    "#e15759",
    "#9c755f",
    "#ff9da7",
    "#17becf",
    "#8c564b",
    "#bcbd22",
)
FREE = "#e4e4e4"  # a lease row without owner
NO_LEASE = "#f6f6f6"  # a part of 0…limit no lease row covers (pinned workers, or none started yet)
STATE_COLOURS: dict[str, str] = {
    State.SUCCESS: "#59a14f",
    State.FAILED: "#e15759",
    State.SKIPPED: "#bab0ac",
    State.SMART_PENDING: "#f28e2b",
    State.SMART_RUNNING: "#edc948",
    State.SCHEDULED: "#76b7b2",
    State.RUNNING: "#4e79a7",
    State.UP_FOR_RETRY: "#b07aa1",
}
STATE_ORDER = (
    State.SUCCESS,
    State.SKIPPED,
    State.FAILED,
    State.UP_FOR_RETRY,
    State.SCHEDULED,
    State.RUNNING,
    State.SMART_RUNNING,
    State.SMART_PENDING,
)
ONE_POINT_HALF_WIDTH = 6.0  # a single sample is drawn as a band this many pixels each side of it


def linear(lo: float, hi: float, out_lo: float, out_hi: float) -> Callable[[float], float]:
    """Maps [lo, hi] onto [out_lo, out_hi]; an empty domain (hi <= lo) maps everything to the middle."""
    if hi <= lo:
        middle = (out_lo + out_hi) / 2
        return lambda _v: middle
    k = (out_hi - out_lo) / (hi - lo)
    return lambda v: out_lo + (v - lo) * k


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 × 10^k at least ``value`` (1 for 0 or less): a chart's top."""
    if value <= 0:
        return 1
    power = 10 ** math.floor(math.log10(value))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= value)


def state_colour(state: str) -> str:
    """A task state's colour on every chart."""
    return STATE_COLOURS.get(state, "#9d9d9d")


def ordered_states(states: Iterable[str]) -> list[str]:
    """Finished states at the bottom of the stack, waiting ones on top; unknown ones after, by name."""
    present = set(states)
    return [s for s in STATE_ORDER if s in present] + sorted(present - set(STATE_ORDER))


@dataclass(frozen=True)
class Area:
    """One state's band of a stacked area chart: an SVG polygon's points."""

    state: str
    colour: str
    points: str


@dataclass(frozen=True)
class StackedChart:
    """A stacked area chart of counts over time, in pixels inside (left, top)-(right, bottom)."""

    areas: list[Area]
    x_ticks: list[tuple[float, str]]
    y_ticks: list[tuple[float, str]]
    left: float
    top: float
    right: float
    bottom: float


def stacked_chart(
    history: Sequence[tuple[datetime, dict[str, int]]],
    width: float,
    height: float,
    margin: tuple[float, float, float, float] = (10, 10, 24, 48),
) -> StackedChart:
    """Bands of tasks per state over time (0 points: no bands; 1 point: a narrow band around it)."""
    top, right, bottom, left = margin[0], width - margin[1], height - margin[2], margin[3]
    if not history:
        return StackedChart([], [], [(bottom, "0")], left, top, right, bottom)
    times = [(t - history[0][0]).total_seconds() for t, _ in history]  # UTC: no local time zone involved
    peak = nice_ceiling(max(sum(c.values()) for _, c in history))
    x, y = linear(times[0], times[-1], left, right), linear(0, peak, bottom, top)
    xs = [x(t) for t in times]
    rows = [c for _, c in history]
    if len(xs) == 1:
        xs, rows = [xs[0] - ONE_POINT_HALF_WIDTH, xs[0] + ONE_POINT_HALF_WIDTH], rows * 2
    below = [0] * len(xs)
    areas = []
    for state in ordered_states(s for c in rows for s in c):
        above = [b + c.get(state, 0) for b, c in zip(below, rows, strict=False)]
        upper = [f"{px:.1f},{y(v):.1f}" for px, v in zip(xs, above, strict=False)]
        lower = [f"{px:.1f},{y(v):.1f}" for px, v in zip(reversed(xs), reversed(below), strict=False)]
        areas.append(Area(state, state_colour(state), " ".join(upper + lower)))
        below = above
    return StackedChart(
        areas,
        time_ticks(history[0][0], history[-1][0], left, right),
        [(y(v), f"{v:g}") for v in (0, peak / 2, peak)],
        left,
        top,
        right,
        bottom,
    )


def time_ticks(first: datetime, last: datetime, left: float, right: float, count: int = 5) -> list[tuple[float, str]]:
    """Up to ``count`` evenly spaced (x, label) times (UTC), seconds shown for a span under 10 minutes, the
    date for one over a day; one when first == last, and none that repeats the label before it."""
    span = (last - first).total_seconds()
    fmt = "%H:%M:%S" if span < 600 else ("%H:%M" if span <= 86400 and first.date() == last.date() else "%m-%d %H:%M")
    if span <= 0:
        return [((left + right) / 2, first.strftime(fmt))]
    x = linear(0, span, left, right)
    out: list[tuple[float, str]] = []
    for step in (span * i / (count - 1) for i in range(count)):
        label = (first + timedelta(seconds=step)).strftime(fmt)
        if not out or out[-1][1] != label:
            out.append((x(step), label))
    return out


@dataclass(frozen=True)
class Bar:
    """One horizontal bar: its label, value and length in pixels."""

    label: str
    value: int
    length: float


def hbars(items: Sequence[tuple[str, int]], width: float) -> list[Bar]:
    """Bars scaled to the largest value, which gets ``width``; any value above 0 gets at least 1 pixel."""
    peak = max((v for _, v in items), default=0)
    x = linear(0, peak, 0, width)
    return [Bar(label, value, max(1.0, x(value)) if value > 0 else 0.0) for label, value in items]


@dataclass(frozen=True)
class Segment:
    """A part [lo, hi) of the shard strip: a lease row (owner None: free) or, with ``lease`` False, no row."""

    lo: int
    hi: int
    x: float
    width: float
    colour: str
    lease: bool = True
    owner: str | None = None
    epoch: int | None = None
    expired: bool = False


def owner_colours(owners: Iterable[str | None]) -> dict[str, str]:
    """A colour per owner, by sorted name (so distinct on one page until the palette runs out)."""
    named = sorted({o for o in owners if o})
    return {
        o: PALETTE[i] if i < len(PALETTE) else PALETTE[zlib.crc32(o.encode()) % len(PALETTE)]
        for i, o in enumerate(named)
    }


def strip_segments(leases: Sequence[LeaseStatus], limit: int, width: float) -> list[Segment]:
    """The strip 0…``limit`` as segments left to right: each lease row's range (clamped to the strip), and the
    gaps no row covers. Together they cover the whole strip exactly once (overlaps go to the earlier row)."""
    x = linear(0, limit, 0, width)
    colours = owner_colours(row.owner for row in leases)
    out: list[Segment] = []
    edge = 0
    for lease in sorted(leases, key=lambda row: (row.shard_min, row.shard_max)):
        lo, hi = max(lease.shard_min, edge, 0), min(lease.shard_max, limit)
        if hi <= lo:
            continue
        if lo > edge:
            out.append(Segment(edge, lo, x(edge), x(lo) - x(edge), NO_LEASE, lease=False))
        owner = lease.owner
        out.append(
            Segment(
                lo,
                hi,
                x(lo),
                x(hi) - x(lo),
                colours[owner] if owner else FREE,
                owner=owner,
                epoch=lease.epoch,
                expired=lease.expired,
            )
        )
        edge = hi
    if edge < limit:
        out.append(Segment(edge, limit, x(edge), x(limit) - x(edge), NO_LEASE, lease=False))
    return out
