"""The states of a task instance, and which ones count as waiting or finished.

Who moves a task between them is drawn in ARCHITECTURE.md.
"""

from __future__ import annotations


class State:
    """Task instance states."""

    SCHEDULED = "scheduled"
    RUNNING = "running"
    SMART_PENDING = "smart_pending"
    SMART_RUNNING = "smart_running"
    SUCCESS = "success"
    FAILED = "failed"
    UP_FOR_RETRY = "up_for_retry"
    SKIPPED = "skipped"

    ALL = (SCHEDULED, RUNNING, SMART_PENDING, SMART_RUNNING, SUCCESS, FAILED, UP_FOR_RETRY, SKIPPED)
    SMART_WAITING = (SMART_PENDING, SMART_RUNNING)
    FINISHED = (SUCCESS, FAILED, SKIPPED)
