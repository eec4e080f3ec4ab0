"""A process's one notification hub (issue 56, "one lifecycle"): a worker's landing signals and pending tasks and
``serve``'s ended tasks come through ``NotificationHub``, on PostgreSQL's channels or SQLite's polled stand-ins, and
the process's stop ends it at once."""

from __future__ import annotations

import threading
import time
from functools import partial
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from smartsensor.adapters.lifecycle import StopRequest
from smartsensor.adapters.sql import channels as channel_sql, notifications
from smartsensor.adapters.sql.channels import ANY_CODES, ENDED_CHANNEL, PENDING_CHANNEL, SIGNAL_CHANNEL
from smartsensor.adapters.sql.engine import make_engine
from smartsensor.adapters.sql.notifications import NotificationHub
from smartsensor.adapters.sql.signals import SqlLandingSignals
from smartsensor.service.signals import send_signal, signalled_tables
from tests.support.common import wait_until
from tests.support.fault_proxy import FaultProxy
from tests.support.pg import drop_pg_database, needs_test_pg, new_pg_database, postgres_only


class Heard:
    """What a subscriber heard, by channel (the hub's thread appends)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.payloads: dict[str, list[str]] = {}

    def on(self, channel: str) -> Any:
        def deliver(payloads: list[str]) -> None:
            with self.lock:
                self.payloads.setdefault(channel, []).extend(payloads)

        return deliver

    def has(self, channel: str, payload: str) -> bool:
        return payload in self.of(channel)

    def of(self, channel: str) -> list[str]:
        with self.lock:
            return list(self.payloads.get(channel, []))


@pytest.fixture
def stop() -> Any:
    stop = StopRequest()
    yield stop
    stop.request("the test ended")


def test_landing_signals_reach_every_subscriber_once(engine, stop) -> None:
    heard, tables = Heard(), []
    hub = NotificationHub(engine, stop, 0.05, name="test hub")
    hub.subscribe(SIGNAL_CHANNEL, heard.on(SIGNAL_CHANNEL))
    hub.subscribe(SIGNAL_CHANNEL, lambda names: tables.append(signalled_tables(names)))
    assert hub.start()
    send_signal(SqlLandingSignals(engine), "demo.events/ds=2026-11-22")
    send_signal(SqlLandingSignals(engine), "demo.other/ds=10:00")
    wait_until(lambda: len(heard.of(SIGNAL_CHANNEL)) == 2, timeout=30)
    assert heard.of(SIGNAL_CHANNEL) == ["demo.events/ds=2026-11-22", "demo.other/ds=10%3A00"]
    wait_until(lambda: set().union(*tables) == {("demo", "events"), ("demo", "other")}, timeout=30)
    hub.close()
    assert not hub.running
    assert heard.of(SIGNAL_CHANNEL) == ["demo.events/ds=2026-11-22", "demo.other/ds=10%3A00"]  # none twice


def test_ended_tasks_wake_on_either_database(engine, stop) -> None:
    """PostgreSQL: the NOTIFY's hashcodes; SQLite: another connection's commit, as any."""
    heard = Heard()
    hub = NotificationHub(engine, stop, 0.05, name="test hub")
    hub.subscribe(ENDED_CHANNEL, heard.on(ENDED_CHANNEL))
    assert hub.start()
    with engine.begin() as conn:
        channel_sql.notify_ended(conn, [7, 3])
        if engine.dialect.name == "sqlite":
            send_signal(SqlLandingSignals(engine), "demo.events/ds=2026-11-22")  # a commit from another connection
    wait_until(lambda: bool(heard.of(ENDED_CHANNEL)), timeout=30)
    assert heard.of(ENDED_CHANNEL)[0] == ("3,7" if engine.dialect.name == "postgresql" else ANY_CODES)


@postgres_only
def test_pending_tasks_on_postgresql_and_one_connection_for_all_channels(engine, stop) -> None:
    heard = Heard()
    hub = NotificationHub(engine, stop, name="test hub")
    for channel in (SIGNAL_CHANNEL, PENDING_CHANNEL, ENDED_CHANNEL):
        hub.subscribe(channel, heard.on(channel))
    assert hub.start()
    with engine.begin() as conn:
        channel_sql.notify_pending(conn, [5])
    wait_until(lambda: heard.of(PENDING_CHANNEL) == ["5"], timeout=30)
    with engine.connect() as conn:
        listening = conn.execute(
            text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'")
        ).scalar_one()
    assert listening == 1


def test_a_stop_ends_the_hub_in_the_middle_of_its_wait(engine, stop, monkeypatch) -> None:
    """The hub's waits are a minute long here: only the stop's wake-up can end them within the test's bound."""
    monkeypatch.setattr(notifications, "LISTEN_WAIT", 60.0)
    hub = NotificationHub(engine, stop, poll_interval=60.0, name="test hub")
    hub.subscribe(SIGNAL_CHANNEL, lambda _names: None)
    assert hub.start()
    time.sleep(0.2)  # into its wait (nothing asserted on this: the bound below holds either way)
    started = time.monotonic()
    stop.request()
    wait_until(lambda: not hub.running, timeout=30)
    assert time.monotonic() - started < 30


def test_a_stale_wake_up_byte_does_not_cut_the_reconnect_pause_short(engine, stop) -> None:
    """A wake-up byte with neither a stop nor a close behind it is drained and the pause goes on to its end (before,
    it returned at once: a reconnect loop could spin)."""
    hub = NotificationHub(engine, stop, name="test hub")
    hub._wake_writer.send(b"x")
    started = time.monotonic()
    hub._pause(0.5)
    assert time.monotonic() - started >= 0.45
    stop.request()
    started = time.monotonic()
    hub._pause(60.0)  # the stop's own byte ends it at once
    assert time.monotonic() - started < 30


def test_a_subscriber_that_fails_leaves_the_others_their_notifications(engine, stop, caplog) -> None:
    heard = Heard()

    def broken(_payloads: list[str]) -> None:
        raise RuntimeError("a subscriber's bug")

    hub = NotificationHub(engine, stop, 0.05, name="test hub")
    hub.subscribe(SIGNAL_CHANNEL, broken)
    hub.subscribe(SIGNAL_CHANNEL, heard.on(SIGNAL_CHANNEL))
    assert hub.start()
    for day in ("2026-11-20", "2026-11-21"):
        name = send_signal(SqlLandingSignals(engine), f"demo.events/ds={day}")
        wait_until(partial(heard.has, SIGNAL_CHANNEL, name), timeout=30)
    assert "a subscriber failed" in caplog.text and hub.running


def test_a_database_away_at_start_is_an_outage_then_it_listens(tmp_path, stop, caplog) -> None:
    """SQLite whose file cannot be opened yet: ``start`` returns (first attempt failed), subscribers hear the
    outage, one WARNING; once the database is there the hub listens and delivers."""
    from smartsensor.adapters.sql.engine import init_db, make_engine

    folder = tmp_path / "not-yet"
    folder.mkdir()
    engine = make_engine(f"sqlite:///{folder / 'meta.db'}")
    folder.rmdir()  # SQLite cannot open (or create) the file now
    outages, heard = [], Heard()
    hub = NotificationHub(engine, stop, 0.05, name="test hub")
    hub.subscribe(SIGNAL_CHANNEL, heard.on(SIGNAL_CHANNEL), on_outage=lambda: outages.append(1))
    assert not hub.start()
    assert outages and not hub.listening
    folder.mkdir()
    init_db(engine)
    wait_until(lambda: hub.listening, timeout=30)
    send_signal(SqlLandingSignals(engine), "demo.events/ds=2026-11-22")
    wait_until(lambda: bool(heard.of(SIGNAL_CHANNEL)), timeout=30)
    warnings = [r.getMessage() for r in caplog.records if r.name == notifications.__name__ and r.levelname == "WARNING"]
    assert len(warnings) == 1 and warnings[0].startswith("test hub: "), warnings


@needs_test_pg
def test_a_stalled_listen_connection_is_replaced_and_notifications_heard_again(stop, caplog) -> None:
    """The LISTEN connection stalls without closing (tests.support.fault_proxy: no RST, no FIN, its kernel still
    acknowledging): to ``select`` that is a quiet channel, for good. The hub asks it ``SELECT 1`` after
    ``check_interval`` seconds of silence, bounded by the call watchdog (``[core] sql_call_timeout``), drops it and
    listens on a new one once connections go through: a notification sent then is heard, without a restart (issue
    57; without the check it never was)."""
    name, url = new_pg_database()
    server = make_url(url)
    proxy = FaultProxy("127.0.0.1", (server.host or "127.0.0.1", server.port or 5432))
    via_proxy = server.set(host=proxy.address[0], port=proxy.address[1]).render_as_string(hide_password=False)
    engine, direct = make_engine(via_proxy, call_timeout=1.0), make_engine(url)
    heard = Heard()
    hub = NotificationHub(engine, stop, 0.05, name="test hub", check_interval=0.5)
    try:
        hub.subscribe(ENDED_CHANNEL, heard.on(ENDED_CHANNEL))
        assert hub.start()
        with direct.begin() as conn:
            channel_sql.notify_ended(conn, [1])
        wait_until(lambda: heard.of(ENDED_CHANNEL) == ["1"], timeout=30)
        proxy.stall()
        stalled = time.monotonic()
        wait_until(lambda: not hub.listening, timeout=30, step=0.05)  # noticed: checked, failed, reconnecting
        noticed = time.monotonic() - stalled
        proxy.heal()  # new connections go through; the stalled one stays open and silent
        wait_until(lambda: hub.listening, timeout=30, step=0.05)
        with direct.begin() as conn:
            channel_sql.notify_ended(conn, [2])
        wait_until(lambda: heard.of(ENDED_CHANNEL) == ["1", "2"], timeout=30)
        assert noticed <= 0.5 + 1.0 + 2, noticed  # check_interval + the call's bound + slack
        assert hub.running
    finally:
        hub.close()
        proxy.close()
        engine.dispose()
        direct.dispose()
        drop_pg_database(name)


@postgres_only
def test_listening_again_after_an_outage_tells_the_subscribers_to_read_again(engine, stop) -> None:
    """The LISTEN connection is lost (its backend terminated): the hub calls ``on_outage`` and reconnects a second
    later. A notification sent in between is heard by nobody, so once the hub listens again it calls ``on_outage``
    once more, and a waiter reads again: before, a held request woken at the failure, whose task ended in that gap,
    waited until its hold ran out (tests/process/test_hosts.py, `serve` behind a stalled PostgreSQL: 20 s)."""
    calls: list[bool] = []  # whether the hub listened when on_outage was called
    heard = Heard()
    hub = NotificationHub(engine, stop, 0.05, name="test hub")
    hub.subscribe(ENDED_CHANNEL, heard.on(ENDED_CHANNEL), on_outage=lambda: calls.append(hub.listening))
    try:
        assert hub.start()
        with engine.begin() as conn:
            ended = conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()"
                )
            ).all()
        assert ended == [(True,)], ended
        wait_until(lambda: bool(calls), timeout=30, step=0.02)  # the failure: nothing is heard until it listens
        with engine.begin() as conn:
            channel_sql.notify_ended(conn, [1])  # sent while nobody listens: lost
        wait_until(lambda: hub.listening, timeout=30, step=0.02)
        wait_until(lambda: True in calls, timeout=5, step=0.02)  # told again, listening: a waiter reads again
        assert calls[0] is False, calls
        assert heard.of(ENDED_CHANNEL) == []  # the lost one was not heard: only the reading again tells
    finally:
        hub.close()
