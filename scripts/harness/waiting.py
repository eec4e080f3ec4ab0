"""Polling until a condition holds: the tests' waits (tests/support/common.py) and the benchmarks' one copy."""

from __future__ import annotations

import time
from typing import Callable


class NotReached(AssertionError):
    """A condition not reached in time: an AssertionError, so that a test's wait fails as an assertion does."""


def wait_until(predicate: Callable[[], bool], timeout: float, step: float = 0.05) -> float:
    """Poll ``predicate`` until true; return the seconds it took, or raise NotReached after ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return time.monotonic() - start
        time.sleep(step)
    raise NotReached("condition not reached in time")
