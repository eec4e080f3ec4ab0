"""What a process group costs this machine, read from /proc: CPU seconds and resident memory. Airflow's components
run each in its own session (``stack.Processes``), so a component's group holds it and every child it starts (3.x's
trigger runner, 2.10's gunicorn workers, LocalExecutor's task processes)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Usage:
    cpu_seconds: float
    rss_bytes: int


def group_usage(pgid: int) -> Usage:
    """CPU seconds (user + system, with reaped children) and resident memory of every process in a group."""
    cpu, rss = 0.0, 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
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
