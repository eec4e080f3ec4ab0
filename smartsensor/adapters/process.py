"""Child processes: the command line of a smartsensor child, children that end with their parent (Linux), and the
tail of a child's stderr."""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import IO, Callable, TextIO

# ``-c`` puts the current directory first on sys.path (as ``-m`` does): the child drops it before importing
# smartsensor. Only an empty first entry is dropped: with PYTHONSAFEPATH set, -c adds nothing to drop.
_BOOTSTRAP = """import sys
if sys.path and sys.path[0] == "":
    del sys.path[0]
sys.argv[0] = "smartsensor"
from smartsensor.cli import main
main()
"""


def smartsensor_command(*args: str) -> list[str]:
    """The command line of a ``smartsensor *args`` child process, run by this interpreter.

    The child never takes the current directory onto sys.path, exactly like the ``smartsensor`` console
    script. ``python -m smartsensor.cli`` did: run from a checkout root with a wheel (not editable) install,
    the source tree's ``smartsensor/`` shadowed the install, which alone provides ``smartsensor.sensors`` and
    ``smartsensor.schema`` (through package_dir), and every child died with ModuleNotFoundError. Python 3.11's
    ``-P`` would do for ``-m``; this ``-c`` bootstrap works on 3.10 too. User sensor modules must therefore be
    installed or on PYTHONPATH, as for the console script.
    """
    return [sys.executable, "-c", _BOOTSTRAP, *args]


class StderrTail:
    """Copies a child's stderr (a pipe) to ``echo`` line by line from a thread, and keeps its last non-empty line.

    The pipe is always drained, so a child never blocks on a full pipe; only one line is kept.
    """

    MAX_LINE = 1000  # characters kept of the last line

    def __init__(self, stream: IO[bytes], echo: TextIO | None) -> None:
        self._stream, self._echo = stream, echo
        self._last: str | None = None
        self._thread = threading.Thread(target=self._pump, name="child-stderr", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        try:
            for raw in self._stream:
                line = raw.decode("utf-8", "replace")
                if self._echo is not None:
                    try:
                        self._echo.write(line)
                        self._echo.flush()
                    except (OSError, ValueError):  # our own stderr is gone: keep draining
                        self._echo = None
                if line.strip():
                    self._last = line.strip()[: self.MAX_LINE]
        finally:
            self._stream.close()

    def last_line(self, wait: float = 1.0) -> str | None:
        """The last non-empty line so far, after waiting up to ``wait`` s for the end of the stream (a child's
        own children, e.g. its Spark JVM, may hold the pipe open after it exited)."""
        self._thread.join(wait)
        return self._last


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
