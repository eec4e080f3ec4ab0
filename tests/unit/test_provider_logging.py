"""The provider's log lines never block the triggerer's event loop (``off_loop_log``): Airflow 3.3's trigger runner
writes lines to a socket its supervisor may not drain while it waits on the runner, so a line written on the loop
could stop every trigger. A worker's synchronous request still writes its lines at once (its process may end next)."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
from typing import Callable, Iterator

import pytest

from smartsensor_airflow.client import run_blocking
from smartsensor_airflow.off_loop_log import log_off_loop

TRIGGER_ID: contextvars.ContextVar[int | None] = contextvars.ContextVar("trigger_id", default=None)


class BlockedSocket(logging.Handler):
    """A handler that blocks every write until released, as a full socket does; records what it wrote, in which
    thread and for which trigger (Airflow routes a line to its task's log by context variables)."""

    def __init__(self) -> None:
        super().__init__()
        self.released = threading.Event()
        self.written: list[tuple[str, str, int | None]] = []
        self.loop_thread: int | None = None  # a write from this thread would have blocked the event loop
        self.on_the_loop: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if threading.get_ident() == self.loop_thread and not self.released.is_set():
            self.on_the_loop.append(record.getMessage())
            return
        if not self.released.wait(60):
            raise AssertionError("never released")
        self.written.append((record.getMessage(), threading.current_thread().name, TRIGGER_ID.get()))


@pytest.fixture
def blocked() -> Iterator[tuple[logging.Logger, BlockedSocket]]:
    logger = logging.getLogger("tests.provider_logging")
    handler = BlockedSocket()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield logger, handler
    finally:
        handler.released.set()
        logger.removeHandler(handler)


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    give_up = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > give_up:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


def test_lines_from_the_event_loop_do_not_block_it(blocked: tuple[logging.Logger, BlockedSocket]) -> None:
    logger, handler = blocked

    async def trigger(trigger_id: int) -> int:
        TRIGGER_ID.set(trigger_id)
        for n in range(3):
            log_off_loop(logger, "info", "trigger %d line %d", trigger_id, n)
            await asyncio.sleep(0)
        return trigger_id

    async def many() -> list[int]:
        handler.loop_thread = threading.get_ident()
        return list(await asyncio.gather(*(trigger(i) for i in range(50))))

    # Every trigger ran to its end while the socket was blocked: the loop never waited on a write.
    assert asyncio.run(many()) == list(range(50))
    assert handler.on_the_loop == []
    assert handler.written == []
    handler.released.set()
    wait_for(lambda: len(handler.written) == 150)
    # Each trigger's lines are in order and carry its own context, written by the log thread.
    for i in range(50):
        mine = [(msg, ctx) for msg, _, ctx in handler.written if ctx == i]
        assert mine == [(f"trigger {i} line {n}", i) for n in range(3)]
    assert {thread for _, thread, _ in handler.written} == {"smartsensor-log_0"}


def test_a_synchronous_caller_writes_its_lines_at_once(blocked: tuple[logging.Logger, BlockedSocket]) -> None:
    logger, handler = blocked
    handler.released.set()

    async def request() -> None:
        log_off_loop(logger, "warning", "held request refused")
        # Written before the request goes on: nothing is left queued when the worker's process ends.
        assert [msg for msg, _, _ in handler.written] == ["held request refused"]

    run_blocking(request())
    log_off_loop(logger, "warning", "no loop at all")
    assert [msg for msg, _, _ in handler.written] == ["held request refused", "no loop at all"]
    assert all(not thread.startswith("smartsensor-log") for _, thread, _ in handler.written)
