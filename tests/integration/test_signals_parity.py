"""The landing signals' memory twin holds to the SQL store (issue 56: every store has a memory twin held by a
parity test): the same recordings and prunes leave the same signals, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import HealthCheck, given, settings, strategies as st

from smartsensor.adapters.memory_signals import MemoryLandingSignals
from smartsensor.adapters.sql import signals as signal_sql
from smartsensor.adapters.sql.signals import SqlLandingSignals
from smartsensor.service.signals import SIGNAL_RETENTION, prune_old_signals, send_signal
from tests.support.common import T0

# (minutes after T0 a step happens at, the partition signalled, or None for a prune at that time)
STEPS = st.lists(
    st.tuples(st.integers(0, 180), st.one_of(st.none(), st.sampled_from(["db.a/ds=1", "db.b/ds=2", "db.a/ds=3"]))),
    max_size=12,
)


def sql_names(engine) -> list[str]:
    with engine.connect() as conn:
        return [name for _, name in signal_sql.signals_after(conn, 0)]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_the_twin_keeps_what_the_table_keeps(engine, steps: list[tuple[int, str | None]]) -> None:
    with engine.begin() as conn:
        signal_sql.prune_signals(conn, T0 + timedelta(days=365))  # every example starts empty
    sql, memory = SqlLandingSignals(engine), MemoryLandingSignals()
    for minutes, name in sorted(steps, key=lambda s: s[0]):
        now = T0 + timedelta(minutes=minutes)
        if name is None:
            assert sql.delete_before(now - SIGNAL_RETENTION) == memory.delete_before(now - SIGNAL_RETENTION)
        else:
            sql.record(name, now)
            memory.record(name, now)
        assert sql_names(engine) == memory.names()


def test_send_and_prune_through_the_port(engine) -> None:
    memory = MemoryLandingSignals()
    assert send_signal(memory, "db.t/ds=10:00") == "db.t/ds=10%3A00"
    assert send_signal(SqlLandingSignals(engine), "db.t/ds=10:00") == "db.t/ds=10%3A00"
    assert sql_names(engine) == memory.names() == ["db.t/ds=10%3A00"]
    later = T0 + timedelta(days=3650)  # long past both signals' retention
    prune_old_signals(memory, later)
    prune_old_signals(SqlLandingSignals(engine), later)
    assert sql_names(engine) == memory.names() == []
