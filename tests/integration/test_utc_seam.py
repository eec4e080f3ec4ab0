"""The storage seam's one clock (``schema.models.UtcDateTime``): times go in and come out aware UTC, on SQLite and
PostgreSQL; a naive time is refused, so that a naive key never meets an aware one (they compare unequal, silently)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import insert, select
from sqlalchemy.exc import StatementError

from smartsensor.adapters.memory import InMemoryStore
from smartsensor.adapters.sql import tasks as task_sql
from smartsensor.adapters.sql.classic_store import SqlClassicRunStore
from smartsensor.adapters.sql.external import SqlExternalTryStore
from smartsensor.adapters.sql.registration_store import SqlRegistrationStore
from smartsensor.domain.clock import NaiveDatetimeError
from smartsensor.domain.keys import ExternalKey, TaskKey
from smartsensor.domain.states import State
from smartsensor.external.registration import register_external
from smartsensor.schema.models import task_instance as TI
from smartsensor.standalone.registration import build_row, register
from tests.support.common import DAY, T0, named


def test_a_naive_datetime_is_refused_at_the_seam(engine) -> None:
    naive = DAY.replace(tzinfo=None)
    with pytest.raises(StatementError) as raised, engine.begin() as conn:
        conn.execute(insert(TI).values(dag_id="d", task_id="t", execution_date=naive, try_number=1, max_tries=0))
    assert isinstance(raised.value.orig, NaiveDatetimeError)
    assert "naive datetime 2026-11-22T00:00:00" in str(raised.value)
    with engine.connect() as conn:
        assert conn.execute(select(TI.c.dag_id)).all() == []  # nothing written
        with pytest.raises(StatementError):  # nor compared: a naive bound would find nothing, silently
            task_sql.get_task(conn, "d", "t", naive)


def test_the_memory_store_refuses_a_naive_datetime_too(cfg) -> None:
    with pytest.raises(NaiveDatetimeError):
        InMemoryStore([build_row(named(), "d", DAY, cfg)[0]._replace(execution_date=DAY.replace(tzinfo=None))])


def test_times_come_back_aware_utc_and_the_same_instant(engine) -> None:
    elsewhere = (T0 + timedelta(microseconds=123456)).astimezone(timezone(timedelta(hours=-5)))
    with engine.begin() as conn:
        conn.execute(
            insert(TI).values(
                dag_id="d", task_id="t", execution_date=DAY, try_number=1, max_tries=0, updated_at=elsewhere
            )
        )
    with engine.connect() as conn:
        day, updated = conn.execute(select(TI.c.execution_date, TI.c.updated_at)).one()
        stored = conn.exec_driver_sql("SELECT updated_at FROM task_instance").scalar_one()
    assert day == DAY and day.tzinfo is timezone.utc
    assert updated == elsewhere and updated.tzinfo is timezone.utc and updated.hour == 6
    assert str(stored).startswith("2026-11-23 06:00:00.123456")  # naive UTC in the table, as rows always were


def test_a_key_registered_and_read_back_equals_the_key_the_service_built(cfg, engine) -> None:
    registered = register(SqlRegistrationStore(engine), [("d", named())], DAY, cfg)
    built = TaskKey("d", "t", registered[0].execution_date)
    assert built == TaskKey("d", "t", DAY)
    with engine.connect() as conn:
        assert task_sql.keys_in_state(conn, State.SMART_PENDING) == [built]
    row = SqlClassicRunStore(engine).read_task(built)
    assert row is not None and row.key == built and row.execution_date.tzinfo is timezone.utc


def test_an_external_try_s_task_instance_reads_back_as_the_key_it_was_given(cfg, engine) -> None:
    done = register_external(
        SqlExternalTryStore(engine),
        cfg,
        ExternalKey("etl", "wait", "scheduled__2026-11-22T00:00:00+00:00"),
        1,
        "NamedHivePartitionSensor",
        {"partition_names": ["db.events/ds=2026-11-22"]},
        {"poke_interval": 30, "timeout": 600},
        logical_date=datetime(2026, 11, 22, tzinfo=timezone.utc),
    )
    assert done.task_instance.execution_date.tzinfo is timezone.utc  # the registration time, microseconds kept
    with engine.connect() as conn:
        assert task_sql.keys_in_state(conn, State.SMART_PENDING) == [done.task_instance]
