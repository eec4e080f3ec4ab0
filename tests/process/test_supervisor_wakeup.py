"""The supervisor hears a worker's exit (SIGCHLD) instead of looking for one now and then (issue 56, "wake-ups
delivered, not polled"): with its longest look set to ten minutes, a worker that exits is still restarted as soon as
its back-off allows, and a stop still ends it at once."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import threading
import time

import pytest

from smartsensor.adapters.lifecycle import StopRequest
from smartsensor.config import ShardRange
from smartsensor.service import supervisor


def test_a_worker_that_exits_is_restarted_when_heard_not_looked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervisor, "CHILD_LOOK", 600.0)
    spawned: list[float] = []

    def spawn(_shard: ShardRange | None) -> subprocess.Popen:
        spawned.append(time.monotonic())
        code = "import sys; sys.exit(3)" if len(spawned) == 1 else "import time; time.sleep(120)"
        return subprocess.Popen([sys.executable, "-c", code])

    stop, exited, out = StopRequest(), threading.Event(), io.StringIO()

    def stop_once_restarted() -> None:
        deadline = time.monotonic() + 120
        while len(spawned) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.request("test")

    threading.Thread(target=stop_once_restarted, daemon=True).start()
    started = time.monotonic()
    with stop.signals(also={signal.SIGCHLD: exited.set}):
        assert supervisor._supervise([None], spawn, stop, out, 30.0, exited) == 0
    assert len(spawned) == 2, out.getvalue()
    assert "worker #0 leased exited with 3; restart #1" in out.getvalue()
    # The back-off is 1 s after the first start; without the exit heard, the restart would wait out the 600 s look.
    assert spawned[1] - spawned[0] < 120 and time.monotonic() - started < 300
