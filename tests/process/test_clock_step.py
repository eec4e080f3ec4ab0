"""A real worker whose wall clock steps an hour back, then an hour forward (NTP stepping it), under libfaketime
(``LD_PRELOAD``: the worker's own clock, not the machine's; its monotonic clock untouched): its lease heartbeat
goes on every interval and a SIGTERM still stops it at once. ARCHITECTURE.md, "Periodic side jobs": the clock rule.

test.sh installs Debian's ``faketime`` (``ensure_faketime``); without it this test fails, saying so."""

from __future__ import annotations

import glob
import os
import signal
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from smartsensor.adapters.sql import status as status_sql
from tests.support.common import new_db, wait_until
from tests.support.proc_helpers import CliProcess, cli_env

pytestmark = pytest.mark.slow

HEARTBEAT = 0.5  # [smart_sensor] heartbeat_interval: the stalled heartbeat shows within a few of them


def libfaketime() -> str:
    found = glob.glob("/usr/lib/*/faketime/libfaketime.so.1")
    if not found:
        pytest.fail("libfaketime is not installed (Debian's faketime; scripts/test.sh installs it)")
    return found[0]


class FakeClock:
    """The wall clock of the processes started with ``env``: the machine's plus an offset read from a file."""

    def __init__(self, folder: Path) -> None:
        self.file = folder / "faketime"
        self.offset = 0
        self._write()
        self.env = {
            "LD_PRELOAD": libfaketime(),
            "FAKETIME_TIMESTAMP_FILE": str(self.file),
            "FAKETIME_CACHE_DURATION": "1",  # the file is read again at most a second later
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",  # NTP steps the wall clock only
        }

    def step(self, seconds: int) -> None:
        self.offset += seconds
        self._write()

    def _write(self) -> None:
        part = self.file.with_suffix(".part")  # replaced whole: a reader never sees it half written
        part.write_text(f"{self.offset:+d}\n")
        os.replace(part, self.file)


def heartbeat_at(engine: Any, pid: int) -> datetime | None:
    """The last heartbeat the worker ``pid`` recorded (its own clock's time), None before its first."""
    with engine.connect() as conn:
        return next((w["heartbeat_at"] for w in status_sql.list_workers(conn) if w["pid"] == pid), None)


def test_a_worker_keeps_its_heartbeat_and_stops_on_sigterm_when_its_wall_clock_steps(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'meta.db'}"
    _, engine = new_db(tmp_path / "home", db_url)
    clock = FakeClock(tmp_path)
    env = cli_env(
        tmp_path / "home",
        db_url,
        SMARTSENSOR__SMART_SENSOR__HEARTBEAT_INTERVAL=str(HEARTBEAT),
        SMARTSENSOR__SMART_SENSOR__LEASE_TIMEOUT="3",
        **clock.env,
    )
    # --no-signals: libfaketime 0.9.10 with FAKETIME_DONT_FAKE_MONOTONIC fails time.sleep (EINVAL), which the landing
    # signals' poll on SQLite uses; the side jobs wait on events, which it leaves alone
    worker = CliProcess(["worker", "--interval", "1", "--json", "--no-signals"], env)
    try:
        wait_until(lambda: heartbeat_at(engine, worker.proc.pid) is not None, timeout=60)
        for step in (-3600, +3600, -3600):
            seen: set[datetime | None] = set()
            clock.step(step)

            def beats_again(seen: set[datetime | None] = seen) -> bool:
                # after the step: three heartbeats recorded on the stepped clock (without the fix: none, an hour)
                beat = heartbeat_at(engine, worker.proc.pid)
                if beat is not None and abs((beat - datetime.now(beat.tzinfo)).total_seconds() - clock.offset) < 60:
                    seen.add(beat)
                return len(seen) >= 3

            wait_until(beats_again, timeout=20)
        worker.proc.send_signal(signal.SIGTERM)  # after a step back: the stop request still ends the loop's wait
        worker.proc.wait(timeout=20)
        assert worker.proc.returncode == 0, "\n".join(worker.stderr_lines)
    finally:
        worker.stop(signal.SIGKILL)
        engine.dispose()
