"""Running `smartsensor` CLI processes, and the repository's scripts, in tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from queue import Empty, Queue
from typing import Any, Callable

from smartsensor.adapters.process import pdeathsig_preexec
from tests.support.common import ROOT


def cli_env(home: Path, db_url: str, **extra: str) -> dict[str, str]:
    """This process's environment for a `smartsensor` process on ``home`` and ``db_url``, plus ``extra``."""
    env = dict(os.environ, SMARTSENSOR_HOME=str(home), SMARTSENSOR__CORE__SQL_ALCHEMY_CONN=db_url)
    env.pop("SMARTSENSOR_CONFIG", None)
    env.update(extra)
    return env


def run_cli(
    args: list[str], env: dict[str, str], timeout: float = 120, check: bool = False
) -> subprocess.CompletedProcess[str]:
    """``smartsensor *args`` run to its end; with ``check``, fail showing its output unless it exits 0."""
    proc = subprocess.run(
        [sys.executable, "-m", "smartsensor.cli", *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{args} failed ({proc.returncode}): {proc.stdout}\n{proc.stderr}")
    return proc


def run_script(
    args: list[str], env: dict[str, str], timeout: float, tail: int = 2000
) -> subprocess.CompletedProcess[str]:
    """A script of the repository (``[sys.executable, "-m", "scripts.…", …]`` or ``["bash", "scripts/….sh", …]``)
    run to its end from the repository root; fails showing the last ``tail`` characters of its output unless it
    exits 0."""
    proc = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-tail:] + proc.stderr[-tail:]
    return proc


class CliProcess:
    """A background `smartsensor ...` process; threads collect its stdout lines and drain its stderr.

    stderr MUST be drained while the process runs: a worker logs a few KB per round during an outage
    (and its Spark JVM shares the fd), so an unread 64 KiB pipe fills and the logging thread blocks
    in write(2) -- the worker then silently stops running rounds.
    """

    STDERR_TAIL = 200  # lines kept for failure messages

    def __init__(self, args: list[str], env: dict[str, str], program: list[str] | None = None) -> None:
        # pdeathsig: if the test process dies without teardown (SIGKILL, pytest-timeout's thread
        # method), the worker gets SIGTERM and stops cleanly; its Spark JVM exits when its stdin closes.
        # ``program``: another command than `smartsensor` (a stand-in printing rounds, to test these helpers).
        self.proc = subprocess.Popen(
            [*(program or [sys.executable, "-m", "smartsensor.cli"]), *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            preexec_fn=pdeathsig_preexec(),
        )
        self.lines: Queue[str] = Queue()
        self.seen: list[str] = []
        self.stderr_lines: deque[str] = deque(maxlen=self.STDERR_TAIL)
        self._stderr_done = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=self._pump_stderr, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        try:
            for line in self.proc.stderr:
                self.stderr_lines.append(line.rstrip("\n"))
        finally:
            self._stderr_done.set()

    def stderr_tail(self, lines: int = 30) -> str:
        return "\n".join(list(self.stderr_lines)[-lines:])

    def wait_for(self, predicate: Callable[[str], bool], timeout: float = 90) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except Empty:
                if self.proc.poll() is not None:
                    self._stderr_done.wait(5)
                    raise AssertionError(f"process exited {self.proc.returncode}: {self.stderr_tail()}") from None
                continue
            self.seen.append(line)
            if predicate(line):
                return line
        raise AssertionError(f"timed out; output so far: {self.seen[-10:]}\nstderr tail:\n{self.stderr_tail()}")

    def wait_round(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 90) -> dict[str, Any]:
        def ok(line: str) -> bool:
            try:
                return predicate(json.loads(line))
            except json.JSONDecodeError:
                return False

        return json.loads(self.wait_for(ok, timeout))

    def settle(self, timeout: float = 120) -> None:
        """Wait until every timer round that committed before this call has printed what it marked: the rounds
        printed so far are taken first (``json_rounds``), then two more timer rounds are awaited (the first may have
        been under way at this call; the second began after it, as timer rounds run one at a time). Waiting for
        two lines without taking those already queued returned at once on rounds printed long before, while the
        round that had just committed was still recording its status: its marks were missing (CI's kill -9
        [postgres]: 11 of 24)."""
        self.json_rounds()
        for _ in range(2):
            self.wait_round(lambda r: not r["partial"], timeout)

    def json_rounds(self) -> list[dict[str, Any]]:
        """Every round object printed so far (``worker --json``), including lines not yet waited for."""
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        return [json.loads(line) for line in self.seen if line.startswith("{")]

    def marked(self, state: str = "success") -> int:
        """Task instances this process reported marking ``state``, over all its rounds so far."""
        return sum(r["marked"].get(state, 0) for r in self.json_rounds())

    def marks_seen(self) -> str:
        """For a failure message: each round's marks, ranges and error, any line that is not a round object, every
        round that reported an error, and the warnings and errors of stderr (not only its tail: a round that failed
        early is what explains marks missing later)."""
        rounds = self.json_rounds()
        marked = [(r["marked"], r["ranges"], r.get("error")) for r in rounds if r["marked"]]
        errors = [(r["ranges"], r["error"]) for r in rounds if r.get("error") and not r["marked"]]
        other = [line for line in self.seen if not line.startswith("{")]
        warnings = [line for line in self.stderr_lines if " WARNING " in line or " ERROR " in line]
        return (
            f"pid {self.proc.pid}, {len(rounds)} rounds; rounds that marked: {marked}; rounds that failed: "
            f"{errors[-10:]}; other output: {other[-10:]}; stderr warnings ({len(warnings)}):\n"
            + "\n".join(warnings[-30:])
            + f"\nstderr tail:\n{self.stderr_tail(15)}"
        )

    def kill(self) -> int:
        """SIGKILL, resuming it first if it is SIGSTOPped (a test's cleanup, whatever state it left it in)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
        return self.stop(signal.SIGKILL)

    def stop(self, sig: int | None = None, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            if sig is None:
                self.proc.terminate()
            else:
                self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode
