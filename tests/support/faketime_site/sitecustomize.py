"""Put on ``PYTHONPATH`` of a process run under libfaketime (tests.support.fake_clock): Debian's libfaketime 0.9.10,
with ``FAKETIME_DONT_FAKE_MONOTONIC`` (the wall clock faked, the monotonic one left alone), fails every
``time.sleep`` with EINVAL (Python sleeps with an absolute ``clock_nanosleep`` on the monotonic clock, which that
version converts wrongly), while waits on a ``threading.Event`` work. A real host with a skewed or stepped clock
sleeps fine, so this makes ``time.sleep`` the same wait on an Event, which nothing sets: the same duration on the
monotonic clock, the same exceptions for a bad argument."""

from __future__ import annotations

import threading
import time
from typing import SupportsIndex

_real_sleep = time.sleep


def _sleep(seconds: float | SupportsIndex) -> None:
    wait = float(seconds.__index__() if isinstance(seconds, SupportsIndex) else seconds)
    if wait < 0:
        _real_sleep(wait)  # raises ValueError, as the real one does
    threading.Event().wait(wait)


time.sleep = _sleep
