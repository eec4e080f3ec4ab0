"""A worker loop on the Notifications port's memory twin (issue 56: every port has a twin): a landing signal and new
pending tasks each run a wake-up round at once, a malformed signal wakes nothing, and the stop ends the loop's
minute-long wait at once; no database anywhere."""

from __future__ import annotations

import threading
import time
from typing import Callable

from smartsensor.adapters.lifecycle import StopRequest
from smartsensor.adapters.memory_notifications import MemoryNotifications
from smartsensor.adapters.memory_signals import MemoryLandingSignals
from smartsensor.adapters.sql.channels import ENDED_CHANNEL, PENDING_CHANNEL, SIGNAL_CHANNEL
from smartsensor.hive_filter.names import TableName
from smartsensor.service.round.report import RoundResult
from smartsensor.service.worker_loop import WorkerLoop
from tests.support.common import make_cfg


class CountedRanges:
    """Served ranges that count what the loop asks of them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.timer = 0
        self.wakes: list[tuple[set[TableName], set[int] | None]] = []
        self.stopped = False

    def follow_leases(self) -> dict[str, list[int]]:
        return {}

    def timer_rounds(self) -> list[RoundResult]:
        with self.lock:
            self.timer += 1
        return [RoundResult(0, 10)]

    def wake_rounds(self, tables: set[TableName], shardcodes: set[int] | None) -> list[RoundResult]:
        with self.lock:
            self.wakes.append((tables, shardcodes))
        return [RoundResult(0, 10)]

    def stop(self, keep_rounds: bool = False) -> None:
        self.stopped = True

    def held_ranges(self) -> list[tuple[int, int]]:
        return [(0, 10)]


def wait_for(predicate: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def test_wake_ups_and_the_stop_through_the_memory_hub(tmp_path) -> None:
    cfg = make_cfg(tmp_path, f"sqlite:///{tmp_path / 'unused.db'}")
    served, hub, stop = CountedRanges(), MemoryNotifications(), StopRequest()
    loop = WorkerLoop(
        served, cfg, 60.0, False, lambda _r: None, signals=MemoryLandingSignals(), notifications=hub, stop_request=stop
    )
    thread = threading.Thread(target=loop.start, daemon=True)
    thread.start()
    wait_for(lambda: hub.started and served.timer == 1)
    assert hub.publish(SIGNAL_CHANNEL, ["db.t/ds=1"]) == 1
    wait_for(lambda: len(served.wakes) == 1)
    assert served.wakes[0] == ({("db", "t")}, set())
    assert hub.publish(PENDING_CHANNEL, ["3,5", "7"]) == 1
    wait_for(lambda: len(served.wakes) == 2)
    assert served.wakes[1] == (set(), {3, 5, 7})
    assert hub.publish(SIGNAL_CHANNEL, ["not a partition"]) == 1  # heard, logged, wakes nothing
    assert hub.publish(ENDED_CHANNEL, ["1"]) == 0  # a worker does not listen for ended tasks
    began = time.monotonic()
    stop.request("the test is done")
    thread.join(30)
    assert not thread.is_alive() and time.monotonic() - began < 30  # not the 60 s interval
    assert served.stopped and served.timer == 1 and len(served.wakes) == 2


def test_nothing_is_delivered_before_the_start_and_an_outage_reaches_every_subscriber() -> None:
    hub, heard, outages = MemoryNotifications(), list[list[str]](), list[str]()
    hub.subscribe(SIGNAL_CHANNEL, heard.append, on_outage=lambda: outages.append("a"))
    hub.subscribe(SIGNAL_CHANNEL, heard.append)
    hub.subscribe(PENDING_CHANNEL, heard.append, on_outage=lambda: outages.append("b"))
    assert hub.publish(SIGNAL_CHANNEL, ["x"]) == 0 and heard == []
    assert hub.start()
    assert hub.publish(SIGNAL_CHANNEL, ["x"]) == 2 and heard == [["x"], ["x"]]
    hub.outage()
    assert outages == ["a", "b"]
