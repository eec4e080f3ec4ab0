"""Registration on a real metadata DB (SQLite and Postgres): re-submitting is idempotent, --clear resets."""

from __future__ import annotations

from datetime import timedelta

from smartsensor.adapters.sql import tasks as task_sql
from smartsensor.adapters.sql.registration_store import SqlRegistrationStore
from smartsensor.domain.keys import TaskKey
from smartsensor.domain.states import State
from smartsensor.standalone.registration import register, registered_states
from tests.support.common import DAY, named


def test_register_is_idempotent_and_clear_resets(engine, cfg) -> None:
    sensors = [("d1", named("a")), ("d1", named("b"))]
    first = register(SqlRegistrationStore(engine), sensors, DAY, cfg)
    assert [r.created for r in first] == [True, True]
    with engine.begin() as conn:
        task_sql.set_state(conn, TaskKey("d1", "a", DAY), State.SUCCESS)
    again = register(SqlRegistrationStore(engine), sensors, DAY, cfg)
    assert [r.created for r in again] == [False, False]
    assert again[0].state == State.SUCCESS
    with engine.connect() as conn:
        assert len(task_sql.list_tasks(conn)) == 2
    cleared = register(SqlRegistrationStore(engine), sensors, DAY, cfg, clear=True)
    assert cleared[0].state == State.SMART_PENDING
    with engine.connect() as conn:
        row = task_sql.get_task(conn, "d1", "a", DAY)
    assert row is not None and row.state == State.SMART_PENDING and row.end_date is None


def test_registered_states_are_a_dags_tasks_on_one_day_as_they_stand(engine, cfg) -> None:
    register(SqlRegistrationStore(engine), [("d1", named("a")), ("d1", named("b")), ("d2", named("a"))], DAY, cfg)
    with engine.begin() as conn:
        task_sql.set_state(conn, TaskKey("d1", "b", DAY), State.SUCCESS)
    assert registered_states(SqlRegistrationStore(engine), "d1", DAY) == {"a": State.SMART_PENDING, "b": State.SUCCESS}
    assert registered_states(SqlRegistrationStore(engine), "d2", DAY) == {"a": State.SMART_PENDING}
    assert (
        registered_states(SqlRegistrationStore(engine), "d1", DAY + timedelta(days=1))
        == {}
        == registered_states(SqlRegistrationStore(engine), "d3", DAY)
    )
