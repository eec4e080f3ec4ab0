"""What a process, its tree or its group costs this machine, read from /proc: CPU seconds and resident memory (now,
or its peak). Airflow's components run each in its own session (``stack.Processes``), so a component's group holds it
and every child it starts (3.x's trigger runner, 2.10's gunicorn workers, LocalExecutor's task processes). The
benchmarks' and tests/support's one copy (tests/support/run_seconds.py reads the same stat fields)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


def stat_fields(text: str) -> list[str]:
    """The fields of a ``/proc/<pid>/stat`` after the command name, which may hold spaces and parentheses itself (so
    they are counted from its last ")"): ``[0]`` is the state (field 3 of proc(5)), ``[1]`` the parent, ``[11:15]``
    utime, stime, cutime, cstime, ``[19]`` the start time, ``[21]`` the resident pages."""
    return text[text.rindex(")") + 2 :].split()


def cpu_ticks(pid: int) -> int:
    """User + system CPU ticks of process ``pid`` (every thread) so far; OSError once it is gone."""
    fields = stat_fields(Path(f"/proc/{pid}/stat").read_text())
    return int(fields[11]) + int(fields[12])


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (every thread) so far."""
    return cpu_ticks(pid) / TICKS


def status_kb(pid: int, key: str) -> int:
    """A ``/proc/<pid>/status`` figure in kB (``VmRSS``, ``VmHWM``: the peak); 0 when it is not there."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    return 0


def tree(pid: int) -> list[int]:
    """A process and its descendants."""
    out, stack = [], [pid]
    while stack:
        p = stack.pop()
        out.append(p)
        try:
            stack += [int(x) for x in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except OSError:
            pass
    return out


def command_name(pid: int) -> str:
    """A process's command name (``java``); empty once it is gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def tree_peak_rss_mb(pid: int) -> float:
    """Sum of VmHWM (peak RSS) over a process and its descendants, in MB."""
    total = 0
    for p in tree(pid):
        try:
            total += status_kb(p, "VmHWM")
        except OSError:
            pass
    return total / 1024


@dataclass
class Usage:
    cpu_seconds: float
    rss_bytes: int


def tree_groups(pid: int) -> set[int]:
    """The process groups of a process and all its descendants, whichever of its threads started them (Airflow
    2.10's DAG processor manager, a child of the scheduler, makes a group of its own), by the parent of every
    process of the machine."""
    parent: dict[int, tuple[int, int]] = {}  # pid → (ppid, pgrp)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = stat_fields((entry / "stat").read_text())
                parent[int(entry.name)] = (int(fields[1]), int(fields[2]))
            except (OSError, IndexError, ValueError):
                continue
    children: dict[int, list[int]] = {}
    for child, (ppid, _) in parent.items():
        children.setdefault(ppid, []).append(child)
    groups, stack = set(), [pid]
    while stack:
        p = stack.pop()
        if p in parent:
            groups.add(parent[p][1])
        stack += children.get(p, [])
    return groups


def group_usage(pgid: int) -> Usage:
    """CPU seconds (user + system, with reaped children) and resident memory of every process in a group."""
    cpu, rss = 0.0, 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = stat_fields((entry / "stat").read_text())
        except OSError:
            continue
        if int(fields[2]) != pgid:  # after the name: state, ppid, pgrp, ... (proc(5), fields 3 onwards)
            continue
        cpu += sum(int(v) for v in fields[11:15]) / TICKS  # utime, stime, cutime, cstime
        rss += int(fields[21]) * PAGE
    return Usage(cpu, rss)


def process_rss(pid: int) -> int:
    """Resident memory of one process (0 once it is gone): a component's own, without the short-lived children its
    group may hold at the moment of a sample (3.x's dag-processor parses each file in a child)."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def machine_busy_seconds() -> float:
    """CPU seconds this machine has spent busy since boot, over all its cores (/proc/stat: user, nice, system, irq,
    softirq, steal)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) / TICKS
