"""Running `smartsensor` CLI processes in tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from queue import Empty, Queue
from typing import Any, Callable


def cli_env(home: Path, db_url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ, SMARTSENSOR_HOME=str(home), SMARTSENSOR__CORE__SQL_ALCHEMY_CONN=db_url)
    env.pop("SMARTSENSOR_CONFIG", None)
    env.update(extra)
    return env


class CliProcess:
    """A background `smartsensor ...` process whose stdout lines are collected by a thread."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "smartsensor.cli", *args], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: Queue[str] = Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, predicate: Callable[[str], bool], timeout: float = 90) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except Empty:
                if self.proc.poll() is not None:
                    raise AssertionError(f"process exited {self.proc.returncode}: {self.proc.stderr.read()}")
                continue
            self.seen.append(line)
            if predicate(line):
                return line
        raise AssertionError(f"timed out; output so far: {self.seen[-10:]}")

    def wait_round(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 90) -> dict[str, Any]:
        def ok(line: str) -> bool:
            try:
                return predicate(json.loads(line))
            except json.JSONDecodeError:
                return False
        return json.loads(self.wait_for(ok, timeout))

    def json_rounds(self) -> list[dict[str, Any]]:
        """Every round object printed so far (``worker --json``), including lines not yet waited for."""
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        return [json.loads(line) for line in self.seen if line.startswith("{")]

    def marked(self, state: str = "success") -> int:
        """Task instances this process reported marking ``state``, over all its rounds so far."""
        return sum(r["marked"].get(state, 0) for r in self.json_rounds())

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
