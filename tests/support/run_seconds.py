"""Where a run's time goes: the seconds its tests took (setup, call and teardown), summed by xdist group and by
folder, printed at the end of a run given ``--durations`` (.ci/run gives it). A group's sum is a lower bound of the
run's wall time, since one worker runs a group's tests one after another; the total over the workers is the work
the machine had to do.

Beside the wall seconds, the CPU seconds each phase cost (``TreeCpu``: the process that ran the test and its
descendants, measured there and handed to the controller in the report's ``user_properties``): with four xdist
workers on two cores a test's wall seconds are mostly waiting for a core, so only CPU seconds say which tests make
the machine busy. They are summed by xdist group, by folder, by module and by test, and the modules and tests costing
most are listed."""

from __future__ import annotations

import json
import os
import resource
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from scripts.harness.usage import stat_fields

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

    def dump(self, path: Path) -> None:
        """Every test's and module's CPU seconds as JSON at ``path`` (to compare two runs beyond the top lines)."""
        path.write_text(
            json.dumps(
                {"modules": dict(_largest(self.cpu_by_module)), "tests": dict(_largest(self.cpu_by_test))}, indent=1
            )
        )


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


@dataclass(frozen=True)
class Stat:
    """What ``/proc/<pid>/stat`` says of a process, times in clock ticks."""

    ppid: int
    own: int  # utime + stime
    reaped: int  # cutime + cstime: the children it waited for, with what they waited for
    start: int  # starttime: with the pid, which process this is

    @property
    def ticks(self) -> int:
        return self.own + self.reaped


def parse_stat(text: str) -> Stat:
    """The text of a ``/proc/<pid>/stat`` (its fields: ``scripts.harness.usage.stat_fields``)."""
    fields = stat_fields(text)
    utime, stime, cutime, cstime = (int(value) for value in fields[11:15])
    return Stat(int(fields[1]), utime + stime, cutime + cstime, int(fields[19]))


def _stat(pid: int, proc: Path) -> Stat | None:
    try:
        return parse_stat((proc / str(pid) / "stat").read_text())
    except (OSError, ValueError, IndexError):  # gone (or going) since it was listed
        return None


def _own_rusage() -> tuple[float, float]:
    """CPU seconds of this process (every thread) and of the children it reaped (with what they reaped)."""
    own, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, reaped.ru_utime + reaped.ru_stime


class TreeCpu:
    """The CPU seconds (user + system) a process and its descendants have used so far, read at every phase boundary
    and, while the run lasts, by a thread every ``interval`` seconds (``start_sampling``):

    - the process's own ``getrusage``, itself and the children it reaped (``RUSAGE_CHILDREN``, with what they reaped);
    - utime + stime + cutime + cstime of every live descendant in ``/proc/<pid>/stat``, found through
      ``/proc/<pid>/task/*/children`` (or a scan of every process's parent where the kernel lacks those files);
    - a descendant that a sample saw and that then left the tree alive (its parent exited first: a JVM outliving the
      CLI process that started it, a server that ``pg_ctl`` started) is followed on its own, with its descendants,
      until it ends; and when processes a sample saw have ended, the part of their time that no reaper in the tree
      took over (the ones init reaped) is added: a lower bound, as what the tree reaped meanwhile hides it.

    A sample costs about 5 ms of CPU with two JVMs in the tree (a read of every thread's children file), hence one
    every 2 s. Missed: a process that leaves the tree before any sample saw it (born and orphaned within ``interval``),
    the time an orphan used after the last sample that saw it, and
    everything outside the tree (the PostgreSQL and MariaDB servers ``scripts/test.sh`` starts for the session, and
    another developer's work). A descendant that outlives its test (a session-scoped metastore service or Spark
    JVM) counts in whichever phase is running while it works. /proc counts in ticks (1/100 s here)."""

    def __init__(
        self,
        root: int | None = None,
        interval: float = 2.0,
        rusage: Callable[[], tuple[float, float]] = _own_rusage,
        proc: Path = PROC,
        ticks: int = TICKS,
    ) -> None:
        # The /proc read and its clock ticks are the instance's own (a unit test's fake /proc never reaches the
        # sampling thread of the run that is measuring it).
        self.root = os.getpid() if root is None else root
        self.proc, self.ticks = proc, ticks
        self.interval = interval
        self._rusage = rusage
        self._lock = threading.Lock()
        self._seen: dict[int, Stat] | None = None  # every process counted at the last sample, followed ones included
        self._followed: set[int] = set()  # roots that left the tree alive
        self._reaped = 0.0  # seconds reaped at the last sample: RUSAGE_CHILDREN + the counted processes' reaped
        self._lost = 0.0  # seconds of ended processes that nobody counted took over
        self._thread: threading.Thread | None = None

    def read(self) -> float:
        """Sample now; the tree's CPU seconds so far."""
        with self._lock:
            own, children = self._rusage()
            seen = self._sample()
            total = own + children + sum(st.ticks for st in seen.values()) / self.ticks
            # What the tree has reaped, read again after the walk: a process the walk did not find any more had been
            # reaped before it looked, so a reaper read now has its time (the walk may have read the reaper first).
            _, children = self._rusage()
            for pid, st in seen.items():
                again = _stat(pid, self.proc)
                if again is not None and again.start == st.start:
                    seen[pid] = replace(st, reaped=again.reaped)
            reaped = children + sum(st.reaped for st in seen.values()) / self.ticks
            if self._seen is not None:
                ended = [self._seen[pid] for pid in self._seen.keys() - seen.keys()]
                # what the tree reaped since the last sample, the ended ones' own reaped part given back
                took_over = reaped - self._reaped + sum(st.reaped for st in ended) / self.ticks
                self._lost += max(0.0, sum(st.ticks for st in ended) / self.ticks - took_over)
            self._seen, self._reaped = seen, reaped
            return total + self._lost

    def start_sampling(self) -> None:
        """Sample every ``interval`` seconds from a daemon thread (once; later calls do nothing)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._sample_forever, name="tree-cpu", daemon=True)
            self._thread.start()

    def _sample_forever(self) -> None:
        while True:
            time.sleep(self.interval)
            self.read()

    def _sample(self) -> dict[int, Stat]:
        seen = _descendants(self.root, self.proc)
        last = self._seen or {}
        for pid in sorted(self._followed):
            st = _stat(pid, self.proc)
            if st is None or st.start != last.get(pid, st).start:
                self._followed.discard(pid)  # ended (its pid perhaps reused)
            else:
                seen[pid] = st
                seen.update(_descendants(pid, self.proc))
        for pid in last.keys() - seen.keys():
            st = _stat(pid, self.proc)
            if st is not None and st.start == last[pid].start:  # alive outside the tree: followed from now on
                self._followed.add(pid)
                seen[pid] = st
                seen.update(_descendants(pid, self.proc))
        return seen


def _descendants(root: int, proc: Path = PROC) -> dict[int, Stat]:
    """Every live descendant of ``root`` (in the /proc at ``proc``)."""
    found: dict[int, Stat] = {}
    stack = _children_files(root, proc)
    if stack is None:
        return _descendants_by_scan(root, proc)
    while stack:
        pid = stack.pop()
        st = _stat(pid, proc)
        if st is None or pid in found:  # gone since it was listed: its parent reaps (and counts) it
            continue
        found[pid] = st
        stack.extend(_children_files(pid, proc) or [])
    return found


def _children_files(pid: int, proc: Path) -> list[int] | None:
    """The children of every thread of ``pid`` (None: the kernel has no children files)."""
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except OSError:
        return []
    children: list[int] = []
    for task in tasks:
        try:
            children += [int(child) for child in (task / "children").read_text().split()]
        except FileNotFoundError:
            if not (task / "stat").exists():  # the thread ended (its children went to another thread)
                continue
            return None  # no CONFIG_PROC_CHILDREN
        except OSError:
            continue
    return children


def _descendants_by_scan(root: int, proc: Path) -> dict[int, Stat]:
    by_parent: defaultdict[int, list[tuple[int, Stat]]] = defaultdict(list)
    for entry in proc.iterdir():
        if entry.name.isdigit():
            st = _stat(int(entry.name), proc)
            if st is not None:
                by_parent[st.ppid].append((int(entry.name), st))
    found: dict[int, Stat] = {}
    stack = [root]
    while stack:
        for pid, st in by_parent.get(stack.pop(), []):
            if pid not in found:
                found[pid] = st
                stack.append(pid)
    return found


class PhaseCpu:
    """CPU seconds per test phase in the process that runs the tests: ``begin`` before a test's setup, ``lap`` after
    each of its phases returns that phase's seconds (the time since the last reading; never below 0)."""

    def __init__(self, read: Callable[[], float] | None = None) -> None:
        self._tree = TreeCpu() if read is None else None
        self._read = read or self._tree_read
        self._last: float | None = None

    def _tree_read(self) -> float:
        assert self._tree is not None
        self._tree.start_sampling()
        return self._tree.read()

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
