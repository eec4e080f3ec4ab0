"""Child processes that end with their parent (Linux), so nothing is left running when a parent is killed."""

from __future__ import annotations

import os
import signal
from typing import Callable


def pdeathsig_preexec() -> Callable[[], None] | None:
    """A ``preexec_fn``: the child gets SIGTERM when the thread that started it dies, even by SIGKILL or
    os._exit (PR_SET_PDEATHSIG). None where prctl is not available (not Linux): then nothing changes.

    libc is looked up here, before the fork: nothing is imported in the forked child.
    """
    try:
        import ctypes
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before prctl: nobody will signal us
            os._exit(1)
    return preexec
