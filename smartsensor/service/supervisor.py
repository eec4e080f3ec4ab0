"""``smartsensor workers``: start N worker processes, restart the ones that die, stop them all on SIGTERM."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, TextIO

from smartsensor.adapters.lifecycle import StopRequest
from smartsensor.adapters.process import pdeathsig_preexec, smartsensor_command
from smartsensor.config import Config, ShardRange

log = logging.getLogger(__name__)

# A worker's exit is delivered (SIGCHLD wakes the supervisor); this is only the longest wait without one, in case a
# signal is lost (the wake-up socket full) or the supervisor runs where no handler can be installed.
CHILD_LOOK = 5.0


def assign_ranges(ranges: list[ShardRange], n: int) -> list[ShardRange]:
    """Give ``n`` workers contiguous blocks of the configured ranges (n <= len(ranges))."""
    n = max(1, min(n, len(ranges)))
    out = []
    for i in range(n):
        lo_idx = i * len(ranges) // n
        hi_idx = (i + 1) * len(ranges) // n
        out.append(ShardRange(ranges[lo_idx].lo, ranges[hi_idx - 1].hi))
    return out


@dataclass
class _Child:
    shard: ShardRange | None
    proc: subprocess.Popen
    started: float
    restarts: int = 0

    @property
    def label(self) -> str:
        return f"[{self.shard.lo},{self.shard.hi})" if self.shard else "leased"


def supervise_workers(
    cfg: Config,
    n: int | None,
    base_args: list[str],
    out: TextIO = sys.stdout,
    extra_args: list[str] | None = None,
    max_backoff: float = 30.0,
    pinned: bool = False,
) -> int:
    """Start N `smartsensor worker` processes, restart crashed ones, stop all on SIGINT/SIGTERM.

    By default the workers claim shard leases (extras stand by and take over); with ``pinned`` each
    gets a fixed contiguous block of the configured ranges instead.
    """
    count = n or len(cfg.resolved_shard_ranges)
    slots: list[ShardRange | None] = list(assign_ranges(cfg.resolved_shard_ranges, count)) if pinned else [None] * count
    stop = StopRequest()

    def spawn(shard: ShardRange | None) -> subprocess.Popen:
        placement = ["--shard-min", str(shard.lo), "--shard-max", str(shard.hi)] if shard else []
        cmd = smartsensor_command(*base_args, "worker", *placement, *(extra_args or []))
        # A supervisor killed outright (kill -9, OOM) must not leave its workers running unsupervised: they get
        # SIGTERM, stop cleanly and release their leases; a restarted supervisor starts a fresh set.
        return subprocess.Popen(cmd, preexec_fn=pdeathsig_preexec())

    exited = threading.Event()
    with stop.signals(also={signal.SIGCHLD: exited.set}):
        return _supervise(slots, spawn, stop, out, max_backoff, exited)


def _supervise(
    slots: list[ShardRange | None],
    spawn: Callable[[ShardRange | None], subprocess.Popen],
    stop: StopRequest,
    out: TextIO,
    max_backoff: float,
    exited: threading.Event,
) -> int:
    """Start a worker per slot, restart the ones that exit (backing off), until ``stop``; then stop them all.
    ``exited`` is set when a worker may have exited (SIGCHLD); the stop sets it too."""
    stop.on_request(exited.set)
    children = [_Child(r, spawn(r), time.monotonic()) for r in slots]
    print(
        f"started {len(children)} workers: " + ", ".join(f"{c.label} pid {c.proc.pid}" for c in children),
        file=out,
        flush=True,
    )
    look = CHILD_LOOK
    while True:
        exited.wait(look)
        exited.clear()  # before the looks below: an exit after them sets it again
        if stop.is_set():
            break
        look = CHILD_LOOK
        for i, c in enumerate(children):
            code = c.proc.poll()
            if code is None:
                continue
            backoff = min(max_backoff, 2 ** min(c.restarts, 5))
            wait_more = c.started + backoff - time.monotonic()
            if wait_more > 0:  # restarted too recently: look again when its back-off ends
                look = min(look, wait_more)
                continue
            c.restarts += 1
            c.proc = spawn(c.shard)
            c.started = time.monotonic()
            print(
                f"worker #{i} {c.label} exited with {code}; restart #{c.restarts} pid {c.proc.pid}",
                file=out,
                flush=True,
            )
    for c in children:
        if c.proc.poll() is None:
            c.proc.terminate()
    deadline = time.monotonic() + 30
    for c in children:
        try:
            c.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            c.proc.kill()
    print("all workers stopped", file=out, flush=True)
    return 0
