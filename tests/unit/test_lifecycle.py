"""A process's one stop (issue 56, "one lifecycle"): ``StopRequest`` is requested once, by a call or by SIGTERM and
SIGINT, and every waiter and hook sees it at once."""

from __future__ import annotations

import os
import signal
import threading
import time

from smartsensor.adapters.lifecycle import StopRequest


def test_a_stop_is_requested_once_and_every_hook_runs_once() -> None:
    stop, ran = StopRequest(), []
    stop.on_request(lambda: ran.append("first"))
    stop.on_request(_fails)  # a failing hook keeps neither the others nor the stop from happening
    stop.on_request(lambda: ran.append("second"))
    assert not stop.is_set() and not stop.wait(0.01)
    stop.request("because")
    stop.request("again")
    assert stop.is_set() and stop.wait(0) and stop.reason == "because"
    assert ran == ["first", "second"]
    stop.on_request(lambda: ran.append("late"))  # after the stop: at once
    assert ran == ["first", "second", "late"]


def test_a_stop_from_another_thread_ends_a_wait_at_once() -> None:
    stop = StopRequest()
    threading.Timer(0.1, stop.request).start()
    started = time.monotonic()
    assert stop.wait(30)
    assert time.monotonic() - started < 10


def test_sigterm_requests_the_stop_while_the_main_thread_waits_on_it() -> None:
    """The case a handler setting an ``Event`` could deadlock on: the main thread blocked in the stop's own wait."""
    stop = StopRequest()
    before = signal.getsignal(signal.SIGTERM)
    with stop.signals():
        threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGTERM)).start()
        assert stop.wait(30)
    assert stop.reason == "SIGTERM received"
    assert signal.getsignal(signal.SIGTERM) is before  # handlers and the wake-up fd are given back
    assert signal.set_wakeup_fd(-1) == -1


def test_sigint_too_and_only_inside() -> None:
    stop, before = StopRequest(), signal.getsignal(signal.SIGINT)
    with stop.signals():
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.wait(30) and stop.reason == "SIGINT received"
    assert signal.getsignal(signal.SIGINT) is before


def test_outside_the_main_thread_no_handler_is_installed() -> None:
    stop, seen = StopRequest(), []

    def inside() -> None:
        with stop.signals():
            seen.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=inside)
    thread.start()
    thread.join(10)
    assert seen == [before] and not stop.is_set()


def _fails() -> None:
    raise RuntimeError("a hook's bug")


def test_another_signal_runs_its_callback_inside_and_only_inside() -> None:
    """``also``: e.g. SIGCHLD waking a supervisor (SIGUSR1 here), in the stop's thread; it is no stop."""
    stop, heard, before = StopRequest(), threading.Event(), signal.getsignal(signal.SIGUSR1)
    with stop.signals(also={signal.SIGUSR1: heard.set}):
        os.kill(os.getpid(), signal.SIGUSR1)
        assert heard.wait(30)
    assert not stop.is_set()
    assert signal.getsignal(signal.SIGUSR1) is before
