"""The states of a task instance, and which ones count as waiting or finished.

Who moves a task between them is drawn in ARCHITECTURE.md.
"""

from __future__ import annotations

import sys
from enum import Enum
from typing import ClassVar

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # Python 3.10 has no StrEnum: the same behaviour, a str whose str() and format() are its value

    class StrEnum(str, Enum):
        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return str(self.value).__format__(spec)


class State(StrEnum):
    """Task instance states. A member is a str equal to its value (``State.SUCCESS == "success"``, the same hash):
    it binds as a plain string in SQL, and the plain strings read back from the database find it in a dict or a
    tuple of members, and it in theirs.

    The groups (``ALL``, ``SMART_WAITING``, ``FINISHED``) are tuples of members, set after the class: in its body
    they would become members themselves."""

    SCHEDULED = "scheduled"
    RUNNING = "running"
    SMART_PENDING = "smart_pending"
    SMART_RUNNING = "smart_running"
    SUCCESS = "success"
    FAILED = "failed"
    UP_FOR_RETRY = "up_for_retry"
    SKIPPED = "skipped"

    ALL: ClassVar[tuple[State, ...]]
    SMART_WAITING: ClassVar[tuple[State, ...]]
    FINISHED: ClassVar[tuple[State, ...]]


State.ALL = tuple(State)
State.SMART_WAITING = (State.SMART_PENDING, State.SMART_RUNNING)
State.FINISHED = (State.SUCCESS, State.FAILED, State.SKIPPED)
