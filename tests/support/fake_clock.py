"""A per-process wall clock under Debian's libfaketime (``LD_PRELOAD``): the processes started with
``FakeClock.env`` read the machine's wall clock plus an offset kept in a file (read again at most a second later),
their monotonic clock untouched, as a host whose clock is skewed or stepped by NTP. ``scripts/test.sh`` installs
``faketime`` (``ensure_faketime``); without it a test using this fails, saying so."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest

SITE = Path(__file__).parent / "faketime_site"  # time.sleep that works under libfaketime 0.9.10 (its docstring)


def libfaketime() -> str:
    """The path of libfaketime.so.1; fails the test if it is not installed."""
    found = glob.glob("/usr/lib/*/faketime/libfaketime.so.1")
    if not found:
        pytest.fail("libfaketime is not installed (Debian's faketime; scripts/test.sh installs it)")
    return found[0]


class FakeClock:
    """The wall clock of the processes started with ``env``: the machine's plus ``offset`` seconds, read from a
    file that ``step`` rewrites (those processes see it at most a second later). ``env`` also puts
    ``faketime_site`` first on ``PYTHONPATH`` (after ``pythonpath``, when given)."""

    def __init__(self, folder: Path, offset: int = 0, pythonpath: str | None = None) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.file = folder / "faketime"
        self.offset = offset
        self._write()
        path = os.pathsep.join(p for p in (str(SITE), pythonpath or os.environ.get("PYTHONPATH", "")) if p)
        self.env = {
            "LD_PRELOAD": libfaketime(),
            "FAKETIME_TIMESTAMP_FILE": str(self.file),
            "FAKETIME_CACHE_DURATION": "1",  # the file is read again at most a second later
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",  # NTP steps the wall clock only
            "PYTHONPATH": path,
        }

    def step(self, seconds: int) -> None:
        """Move this clock by ``seconds`` (back if negative)."""
        self.offset += seconds
        self._write()

    def _write(self) -> None:
        part = self.file.with_suffix(".part")  # replaced whole: a reader never sees it half written
        part.write_text(f"{self.offset:+d}\n")
        os.replace(part, self.file)
