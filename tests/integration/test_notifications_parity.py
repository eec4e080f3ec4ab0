"""The notifications port's contract, written once and run against each implementation (issue 70): the hub on
PostgreSQL's channels, the hub on SQLite's polled stand-ins, and the in-memory twin (``MemoryNotifications``). A
driver per implementation says how a landing signal and a task's end reach it; the contract is what a subscriber
hears:

- subscriptions come before ``start``, which answers True once listening; one after it is refused;
- a landing signal reaches every subscriber of ``SIGNAL_CHANNEL`` once, by its canonical name, and none of the
  others' channels;
- a task's end reaches every subscriber of ``ENDED_CHANNEL`` naming its hashcode, or saying any may have ended
  (``ANY_CODES``: SQLite tells a commit, not what it changed);
- an outage tells every subscriber that gave an ``on_outage`` (the twin by a call; the hubs' own outages are
  ``tests/integration/test_notifications.py``'s).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any, Callable, Protocol

import pytest

from smartsensor.adapters.lifecycle import StopRequest
from smartsensor.adapters.memory_notifications import MemoryNotifications
from smartsensor.adapters.sql import channels as channel_sql, leases as lease_sql
from smartsensor.adapters.sql.channels import ENDED_CHANNEL, SIGNAL_CHANNEL, ended_hashcodes
from smartsensor.adapters.sql.engine import init_db, make_engine
from smartsensor.adapters.sql.notifications import NotificationHub
from smartsensor.adapters.sql.signals import SqlLandingSignals
from smartsensor.domain import clock
from smartsensor.ports import Notifications
from tests.support.common import T0, wait_until
from tests.support.pg import needs_test_pg, pg_engine

LANDED = "demo.events/ds=2026-11-22"


class Driver(Protocol):
    """One implementation of the port, and how its notifications are caused."""

    hub: Notifications

    def land(self, name: str) -> None: ...

    def end(self, hashcode: int) -> None: ...

    def close(self) -> None: ...


class MemoryDriver:
    def __init__(self) -> None:
        self.memory = MemoryNotifications()
        self.hub: Notifications = self.memory

    def land(self, name: str) -> None:
        self.memory.publish(SIGNAL_CHANNEL, [name])

    def end(self, hashcode: int) -> None:
        self.memory.publish(ENDED_CHANNEL, [str(hashcode)])

    def close(self) -> None:
        pass


class HubDriver:
    """The hub over ``engine``: a landing signal recorded as `smartsensor signal` does, a task's end as a round's
    commit does (its NOTIFY on PostgreSQL; on SQLite the commit alone)."""

    def __init__(self, engine: Any) -> None:
        self.engine, self.stop = engine, StopRequest()
        self.sql = NotificationHub(engine, self.stop, 0.05, name="contract hub")
        self.hub: Notifications = self.sql

    def land(self, name: str) -> None:
        SqlLandingSignals(self.engine).record(name, clock.now())

    def end(self, hashcode: int) -> None:
        with self.engine.begin() as conn:
            lease_sql.upsert_worker(conn, "contract", "h", 1, T0, clock.now())  # a write: SQLite's commit to see
            channel_sql.notify_ended(conn, [hashcode])

    def close(self) -> None:
        self.sql.close()
        self.stop.request("the test ended")


class Heard:
    """What each subscriber heard (the hub's thread appends)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.payloads: dict[str, list[str]] = {}
        self.outages: dict[str, int] = {}

    def deliver(self, who: str) -> Callable[[list[str]], None]:
        def deliver(payloads: list[str]) -> None:
            with self.lock:
                self.payloads.setdefault(who, []).extend(payloads)

        return deliver

    def outage(self, who: str) -> Callable[[], None]:
        def outage() -> None:
            with self.lock:
                self.outages[who] = self.outages.get(who, 0) + 1

        return outage

    def of(self, who: str) -> list[str]:
        with self.lock:
            return list(self.payloads.get(who, []))


def sqlite_driver(tmp_path: Any) -> Iterator[Driver]:
    engine = make_engine(f"sqlite:///{tmp_path / 'notifications.db'}")
    init_db(engine)
    driver = HubDriver(engine)
    try:
        yield driver
    finally:
        driver.close()
        engine.dispose()


def postgres_driver(tmp_path: Any) -> Iterator[Driver]:
    with pg_engine() as (engine, _):
        init_db(engine)
        driver = HubDriver(engine)
        try:
            yield driver
        finally:
            driver.close()


def memory_driver(tmp_path: Any) -> Iterator[Driver]:
    yield MemoryDriver()


DRIVERS = [
    pytest.param(memory_driver, id="twin"),
    pytest.param(sqlite_driver, id="sqlite"),
    pytest.param(postgres_driver, id="postgresql", marks=needs_test_pg),
]


@pytest.mark.parametrize("make", DRIVERS)
def test_what_a_subscriber_hears(make: Callable[[Any], Iterator[Driver]], tmp_path: Any) -> None:
    heard = Heard()
    for driver in make(tmp_path):
        hub = driver.hub
        hub.subscribe(SIGNAL_CHANNEL, heard.deliver("a"), heard.outage("a"))
        hub.subscribe(SIGNAL_CHANNEL, heard.deliver("b"))
        hub.subscribe(ENDED_CHANNEL, heard.deliver("c"), heard.outage("c"))
        assert hub.start(timeout=30)
        with pytest.raises(RuntimeError, match="before the hub starts"):
            hub.subscribe(SIGNAL_CHANNEL, heard.deliver("late"))

        driver.land(LANDED)
        wait_until(lambda: heard.of("a") == [LANDED] and heard.of("b") == [LANDED], timeout=30, step=0.05)
        driver.end(4242)

        def told_of_the_end() -> bool:
            return any((codes := ended_hashcodes(p)) is None or 4242 in codes for p in heard.of("c"))

        wait_until(told_of_the_end, timeout=30, step=0.05)
        driver.land("demo.other/ds=1")
        wait_until(lambda: heard.of("a") == [LANDED, "demo.other/ds=1"], timeout=30, step=0.05)
        assert heard.of("b") == heard.of("a")  # once each, in order
        assert LANDED not in heard.of("c") and "late" not in heard.payloads  # no other channel's, none refused's
        if isinstance(driver, MemoryDriver):  # the twin's outage comes by a call
            driver.memory.outage()
            assert heard.outages == {"a": 1, "c": 1}
