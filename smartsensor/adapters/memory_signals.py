"""The in-memory twin of ``ports.LandingSignals``: the landing signals in a list, as ``adapters.sql.signals`` keeps
them in ``partition_signal`` (held to it by tests/integration/test_signals_parity.py). It notifies no one: one
process has nothing to wake."""

from __future__ import annotations

import threading
from datetime import datetime


class MemoryLandingSignals:
    """Landing signals in recording order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._signals: list[tuple[str, datetime]] = []

    def record(self, canonical_name: str, now: datetime) -> None:
        """Keep a signal."""
        with self._lock:
            self._signals.append((canonical_name, now))

    def delete_before(self, cutoff: datetime) -> int:
        """Drop the signals recorded before ``cutoff``; how many went."""
        with self._lock:
            kept = [s for s in self._signals if s[1] >= cutoff]
            gone, self._signals = len(self._signals) - len(kept), kept
        return gone

    def names(self) -> list[str]:
        """The signals kept, oldest first."""
        with self._lock:
            return [name for name, _ in self._signals]
