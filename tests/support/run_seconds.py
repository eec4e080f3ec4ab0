"""Where a run's time goes: the seconds its tests took (setup, call and teardown), summed by xdist group and by
folder, printed at the end of a run given ``--durations`` (.ci/run gives it). A group's sum is a lower bound of the
run's wall time, since one worker runs a group's tests one after another; the total over the workers is the work
the machine had to do.

Beside the wall seconds, the CPU seconds each phase cost (``cpu_seconds_of_tree``, measured in the process that ran
the test and handed to the controller in the report's ``user_properties``): with four xdist workers on two cores a
test's wall seconds are mostly waiting for a core, so only CPU seconds say which tests make the machine busy. They
are summed by xdist group, by folder, by module and by test, and the modules and tests costing most are listed."""

from __future__ import annotations

import os
import resource
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

UNGROUPED = "(ungrouped)"
CPU_PROPERTY = "cpu_seconds"  # the user_properties key a test report carries its phase's CPU seconds under


@dataclass
class RunSeconds:
    """Test seconds summed as reports arrive (in the controller under xdist: it sees every worker's reports)."""

    by_group: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    by_folder: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    tests: Counter[str] = field(default_factory=Counter)  # tests per group
    cpu_by_group: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    cpu_by_folder: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    cpu_by_module: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    cpu_by_test: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))

    def add(self, nodeid: str, when: str, seconds: float, cpu_seconds: float | None = None) -> None:
        """One phase (``when``: setup, call or teardown) of the test ``nodeid`` took ``seconds``, and
        ``cpu_seconds`` of CPU when it was measured."""
        path, test, group = _split(nodeid)
        folder = "/".join(path.split("/")[:2])
        self.by_group[group] += seconds
        self.by_folder[folder] += seconds
        if when == "call":
            self.tests[group] += 1
        if cpu_seconds is not None:
            self.cpu_by_group[group] += cpu_seconds
            self.cpu_by_folder[folder] += cpu_seconds
            self.cpu_by_module[path] += cpu_seconds
            self.cpu_by_test[f"{path}::{test}"] += cpu_seconds

    def lines(self, top: int = 12, top_tests: int = 25) -> list[str]:
        """The summary: total, then the ``top`` groups and every folder, largest first; then, if any phase's CPU
        was measured, the CPU seconds by group and folder, the ``top`` modules and the ``top_tests`` tests."""
        total = sum(self.by_group.values())
        out = [f"test seconds: {total:,.0f} in all"]
        out += ["by xdist group (one worker runs a group in turn):"]
        for group, seconds in _largest(self.by_group)[:top]:
            out.append(f"  {seconds:8,.0f}  {group} ({self.tests[group]} tests)")
        out += ["by folder:"]
        out += [f"  {seconds:8,.0f}  {folder}" for folder, seconds in _largest(self.by_folder)]
        if self.cpu_by_group:
            out += self.cpu_lines(top, top_tests)
        return out

    def cpu_lines(self, top: int = 12, top_tests: int = 25) -> list[str]:
        """The CPU seconds part of the summary, each line with the wall seconds beside it where they are summed
        the same way (groups and folders)."""
        total = sum(self.cpu_by_group.values())
        out = [f"CPU seconds: {total:,.0f} in all (the test processes and their descendants; wall seconds beside)"]
        out += ["by xdist group:"]
        for group, seconds in _largest(self.cpu_by_group)[:top]:
            out.append(f"  {seconds:8,.0f} {self.by_group[group]:8,.0f}  {group} ({self.tests[group]} tests)")
        out += ["by folder:"]
        out += [
            f"  {seconds:8,.0f} {self.by_folder[folder]:8,.0f}  {folder}"
            for folder, seconds in _largest(self.cpu_by_folder)
        ]
        out += [f"top {top} modules (a module-scoped fixture counts in its first test's setup):"]
        out += [f"  {seconds:8,.1f}  {module}" for module, seconds in _largest(self.cpu_by_module)[:top]]
        out += [f"top {top_tests} tests (setup + call + teardown):"]
        out += [f"  {seconds:8,.1f}  {test}" for test, seconds in _largest(self.cpu_by_test)[:top_tests]]
        return out


def _split(nodeid: str) -> tuple[str, str, str]:
    """A node id's path, its test (with parameters, without the xdist group) and its xdist group."""
    path, _, rest = nodeid.partition("::")
    test, at, suffix = rest.rpartition("@")
    if at and suffix and "]" not in suffix:  # --dist loadgroup's suffix, not an @ inside a parameter
        return path, test, suffix
    return path, rest, UNGROUPED


def _largest(seconds: dict[str, float]) -> list[tuple[str, float]]:
    return sorted(seconds.items(), key=lambda item: -item[1])


def cpu_property(user_properties: list[tuple[str, object]]) -> float | None:
    """The CPU seconds a test report carries in its ``user_properties`` (None: not measured)."""
    for name, value in user_properties:
        if name == CPU_PROPERTY and isinstance(value, (int, float)):
            return float(value)
    return None


PROC = Path("/proc")
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds_of_tree(pid: int | None = None) -> float:
    """The CPU seconds (user + system) a test process and its descendants have used so far: its own
    ``getrusage(RUSAGE_SELF)`` and ``RUSAGE_CHILDREN`` (the children it reaped, with what they reaped), plus
    utime + stime + cutime + cstime of every live descendant, read from ``/proc/<pid>/stat`` (one walk of the tree
    through ``/proc/<pid>/task/*/children``, or a scan of every ``/proc/<pid>/stat`` for parents where the kernel has
    no children files). ``pid`` is for the tests of this module; the rusage part is always this process's.

    The difference between two readings is what the tree used in between, with these misses and leaks:

    - a process daemonised away from the tree (reparented to init, e.g. a PostgreSQL that ``pg_ctl`` starts, or a
      grandchild whose parent exits before it) stops counting the moment it leaves, and its time until then drops
      out too (a phase's figure can go down: it is kept at 0 by the caller);
    - services started outside the test process (the PostgreSQL and MariaDB servers ``scripts/test.sh`` starts for
      the session, another developer's work) never count, however hard a test makes them work;
    - a descendant that outlives its test (a session-scoped metastore service or SparkSession's JVM) counts in
      whichever phase is running while it uses CPU, not in the test that started it;
    - /proc counts in clock ticks (1/100 s here), and what the worker does between phases (xdist's own messaging)
      counts nowhere."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    return total + sum(ticks for _, ticks in _descendant_ticks(os.getpid() if pid is None else pid)) / TICKS


def _descendant_ticks(root: int) -> list[tuple[int, int]]:
    """(pid, utime + stime + cutime + cstime in ticks) of every live descendant of ``root``."""
    found: list[tuple[int, int]] = []
    children = _children_files(root)
    if children is None:
        return _descendant_ticks_by_scan(root)
    stack = children
    while stack:
        pid = stack.pop()
        stat = _stat(pid)
        if stat is None:  # gone since it was listed: its parent reaps (and counts) it
            continue
        found.append((pid, stat[1]))
        stack.extend(_children_files(pid) or [])
    return found


def _children_files(pid: int) -> list[int] | None:
    """The children of every thread of ``pid`` (None: the kernel has no children files)."""
    try:
        tasks = list((PROC / str(pid) / "task").iterdir())
    except OSError:
        return []
    children: list[int] = []
    for task in tasks:
        try:
            children += [int(child) for child in (task / "children").read_text().split()]
        except FileNotFoundError:
            if not (task / "stat").exists():  # the thread ended
                continue
            return None  # no CONFIG_PROC_CHILDREN
        except OSError:
            continue
    return children


def _descendant_ticks_by_scan(root: int) -> list[tuple[int, int]]:
    by_parent: defaultdict[int, list[tuple[int, int]]] = defaultdict(list)
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                by_parent[stat[0]].append((int(entry.name), stat[1]))
    found: list[tuple[int, int]] = []
    stack = [root]
    while stack:
        for pid, ticks in by_parent.get(stack.pop(), []):
            found.append((pid, ticks))
            stack.append(pid)
    return found


def _stat(pid: int) -> tuple[int, int] | None:
    """(ppid, utime + stime + cutime + cstime) from ``/proc/<pid>/stat``; None if the process is gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return parse_stat(text)


def parse_stat(text: str) -> tuple[int, int]:
    """(ppid, utime + stime + cutime + cstime in clock ticks) from the text of a ``/proc/<pid>/stat``; the command
    name in parentheses may hold spaces and parentheses itself, so the fields are counted from its last ")"."""
    fields = text[text.rindex(")") + 2 :].split()
    # fields[0] is the state (field 3 of proc(5)); ppid is field 4, utime..cstime are fields 14-17
    return int(fields[1]), sum(int(value) for value in fields[11:15])


class PhaseCpu:
    """CPU seconds per test phase in the process that runs the tests, one reading of the tree per phase boundary:
    ``begin`` before a test's setup, ``lap`` after each of its phases returns that phase's seconds (the time since
    the last reading; never below 0, see ``cpu_seconds_of_tree`` for what leaves the tree)."""

    def __init__(self, read: Callable[[], float] = cpu_seconds_of_tree) -> None:
        self._read = read
        self._last: float | None = None

    def begin(self) -> None:
        """Read the tree's CPU before a test's first phase."""
        self._last = self._read()

    def lap(self) -> float | None:
        """The CPU seconds since the last reading (None if ``begin`` was not called)."""
        if self._last is None:
            return None
        now = self._read()
        seconds, self._last = now - self._last, now
        return max(seconds, 0.0)
