"""What a round reports: the counters ``worker --json`` prints, ``status`` shows and metrics export."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field


@dataclass
class RoundResult:
    """Counters of one round (printed by ``worker --json``)."""

    shard_min: int
    shard_max: int
    loaded: int = 0
    started: int = 0
    distinct_hashes: int = 0
    distinct_checks: int = 0
    collisions: int = 0
    groups_due: int = 0
    groups_poked: int = 0
    catalog_calls: int = 0
    schema_calls: int = 0
    fs_calls: int = 0
    poke_calls: int = 0
    db_statements: int = 0
    marked: dict[str, int] = field(default_factory=dict)
    transient_errors: int = 0
    permanent_errors: int = 0
    woken: int = 0
    bad_rows: int = 0
    module_errors: dict[str, str] = field(default_factory=dict)
    module_waiting: int = 0
    transient_example: str | None = None  # the first transient error of the round, for `status`
    ranges: list[list[int]] = field(default_factory=list)
    fenced_out: bool = False
    reconciled: int = 0  # waiting tasks a reconciliation found missing from the index (set-state by hand, …)
    rebuilt: int = 0  # ranges whose index was rebuilt from the database this round (first round, takeover, …)
    partial: bool = False  # a wake-up round: the vigils of the tables a signal named, new vigils and due ones
    # vigils this round left due at once: they ended (landed or failed) with tasks that joined while it checked them;
    # a wake-up round follows at once instead of the next timer round
    due_again: int = 0
    seconds: float = 0.0
    write_seconds: float = 0.0  # in the store's write of the round's state changes
    # the wall time of the round's finish step (each range decided, written and its index updated, several ranges at
    # once: [smart_sensor] write_threads); write_seconds sums the ranges' writes, which overlap
    finish_seconds: float = 0.0
    catalog_seconds: float = 0.0
    error: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


_SUMMED = (
    "due_again",
    "loaded",
    "started",
    "distinct_hashes",
    "distinct_checks",
    "collisions",
    "groups_due",
    "groups_poked",
    "transient_errors",
    "permanent_errors",
    "woken",
    "bad_rows",
    "reconciled",
    "module_waiting",
    "rebuilt",
    "write_seconds",
)


def combine_results(results: list[RoundResult], ranges: list[list[int]]) -> RoundResult:
    """The ranges' results of one process round as one result (``ranges`` lists them)."""
    total = RoundResult(min(lo for lo, _ in ranges), max(hi for _, hi in ranges), ranges=ranges)
    for name in _SUMMED:
        setattr(total, name, sum(getattr(r, name) for r in results))
    marked: dict[str, int] = defaultdict(int)
    for r in results:
        for k, v in r.marked.items():
            marked[k] += v
        total.module_errors.update(r.module_errors)
        total.transient_example = total.transient_example or r.transient_example
    total.marked = dict(marked)
    total.fenced_out = any(r.fenced_out for r in results)
    total.partial = any(r.partial for r in results)
    return total


def checks_all_failed(results: list[RoundResult]) -> bool | None:
    """What ``results`` (one process's latest rounds) say of its checks: every check answered was a transient error
    (True: the metastore, or Spark, out of this worker's reach), some answered (False), or none was made (None)."""
    poked = sum(r.groups_poked for r in results if not r.error)
    if poked == 0:
        return None
    return sum(r.transient_errors for r in results if not r.error) >= poked
