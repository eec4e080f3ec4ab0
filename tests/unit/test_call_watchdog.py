"""The bound on each call to PostgreSQL (smartsensor.adapters.sql.engine.CallWatchdog): a call whose answer never
comes has its socket shut down past the bound, so the call fails instead of waiting forever; a call that answers in
time is left alone. The same on a real stalled connection: tests/process/test_hosts.py."""

from __future__ import annotations

import socket
import time

from smartsensor.adapters.sql.engine import CallWatchdog


class _Conn:
    """What the watchdog needs of a DB-API connection: its socket's file descriptor."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def fileno(self) -> int:
        return self.sock.fileno()


def test_a_call_without_answer_is_cut_at_the_bound() -> None:
    ours, peer = socket.socketpair()  # the peer never answers, never closes
    watchdog = CallWatchdog(0.3)
    try:
        started = time.monotonic()
        with watchdog.guard(_Conn(ours)):
            ours.settimeout(30)
            got = ours.recv(10)  # blocks until the watchdog shuts the socket down
        took = time.monotonic() - started
        assert got == b"" and 0.3 <= took < 5, took
        assert watchdog.closed == 1
    finally:
        ours.close()
        peer.close()


def test_a_call_answered_in_time_is_left_alone() -> None:
    ours, peer = socket.socketpair()
    watchdog = CallWatchdog(0.5)
    try:
        for _ in range(3):
            with watchdog.guard(_Conn(ours)):
                peer.sendall(b"ok")
                assert ours.recv(10) == b"ok"
        time.sleep(0.8)  # past the bound since the first call: nothing is cut after the calls ended
        peer.sendall(b"still")
        assert ours.recv(10) == b"still" and watchdog.closed == 0
    finally:
        ours.close()
        peer.close()
