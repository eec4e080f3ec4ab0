"""Where a run's time goes: the seconds its tests took (setup, call and teardown), summed by xdist group and by
folder, printed at the end of a run given ``--durations`` (.ci/run gives it). A group's sum is a lower bound of the
run's wall time, since one worker runs a group's tests one after another; the total over the workers is the work
the machine had to do."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

UNGROUPED = "(ungrouped)"


@dataclass
class RunSeconds:
    """Test seconds summed as reports arrive (in the controller under xdist: it sees every worker's reports)."""

    by_group: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    by_folder: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    tests: Counter[str] = field(default_factory=Counter)  # tests per group

    def add(self, nodeid: str, when: str, seconds: float) -> None:
        """One phase (``when``: setup, call or teardown) of the test ``nodeid`` took ``seconds``."""
        path, _, rest = nodeid.partition("::")
        suffix = rest.rsplit("@", 1)[1] if "@" in rest else ""
        group = suffix if suffix and "]" not in suffix else UNGROUPED  # --dist loadgroup's suffix, not a parameter
        folder = "/".join(path.split("/")[:2])
        self.by_group[group] += seconds
        self.by_folder[folder] += seconds
        if when == "call":
            self.tests[group] += 1

    def lines(self, top: int = 12) -> list[str]:
        """The summary: total, then the ``top`` groups and every folder, largest first."""
        total = sum(self.by_group.values())
        out = [f"test seconds: {total:,.0f} in all"]
        out += ["by xdist group (one worker runs a group in turn):"]
        for group, seconds in _largest(self.by_group)[:top]:
            out.append(f"  {seconds:8,.0f}  {group} ({self.tests[group]} tests)")
        out += ["by folder:"]
        out += [f"  {seconds:8,.0f}  {folder}" for folder, seconds in _largest(self.by_folder)]
        return out


def _largest(seconds: dict[str, float]) -> list[tuple[str, float]]:
    return sorted(seconds.items(), key=lambda item: -item[1])
