"""The SQL ``ClassicRunStore``: one classic run's (``run-task``) reads and guarded writes on SQLite or PostgreSQL: its
own named queries (its beat, its hand-back), then the store, which runs them and those of ``adapters.sql.tasks`` each
in a connection or transaction of its own."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, Engine

from smartsensor.adapters.sql import tasks as task_sql
from smartsensor.adapters.sql.store_errors import store_errors
from smartsensor.domain.keys import TaskKey
from smartsensor.domain.rows import TaskRow
from smartsensor.domain.states import State

TI = task_sql.TI


def hand_back_running(conn: Connection, key: TaskKey, now: datetime) -> bool:
    """running → scheduled for a classic run stopped by SIGTERM/SIGINT (a scheduler stop, a deploy).

    The try goes on in the next run: try_number and start_date are kept, so its timeout still counts
    from the first start. False if the task left `running` meanwhile. 1 statement.
    """
    return task_sql.update_task(
        conn, key, [TI.c.state == State.RUNNING], state=State.SCHEDULED, hostname=None, updated_at=now
    )


def heartbeat_running(conn: Connection, key: TaskKey, now: datetime) -> bool:
    """A classic run says it is alive; False once its task left `running` (1 statement)."""
    return task_sql.update_task(conn, key, [TI.c.state == State.RUNNING], updated_at=now)


class SqlClassicRunStore:
    """``smartsensor.ports.ClassicRunStore`` over an SQLAlchemy engine; each operation in a connection or
    transaction of its own."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def claim_run(
        self, key: TaskKey, now: datetime, hostname: str, claimed: bool
    ) -> tuple[TaskRow | None, TaskRow | None]:
        """In one transaction: read the task, claim it for a classic run (``claim_scheduled``, only when it is
        scheduled) unless the scheduler ``claimed`` it already (then it must be running), and read it again.
        Returns (the task as read first, None if there is none; the task as claimed, None when it was not this
        run's to claim). 1-3 statements."""
        with store_errors(), self.engine.begin() as conn:
            found = task_sql.get_task(conn, *key)
            if found is None:
                return None, None
            if claimed:
                ours = found.state == State.RUNNING
            else:
                ours = found.state == State.SCHEDULED and task_sql.claim_scheduled(conn, key, now, hostname)
            return found, (task_sql.get_task(conn, *key) if ours else None)

    def beat(self, key: TaskKey, now: datetime) -> bool:
        """``heartbeat_running`` in a transaction of its own; False once the task left `running` (1 statement)."""
        with store_errors(), self.engine.begin() as conn:
            return heartbeat_running(conn, key, now)

    def hand_back(self, key: TaskKey, now: datetime) -> bool:
        """``hand_back_running`` in a transaction of its own (1 statement)."""
        with store_errors(), self.engine.begin() as conn:
            return hand_back_running(conn, key, now)

    def read_task(self, key: TaskKey) -> TaskRow | None:
        """``get_task`` on a connection of its own (1 statement)."""
        with store_errors(), self.engine.connect() as conn:
            return task_sql.get_task(conn, *key)

    def end_try(
        self, key: TaskKey, new_state: str, now: datetime, error: str | None = None, try_number: int | None = None
    ) -> bool:
        """``tasks.end_running_try``: the run's own end of its try."""
        with store_errors():
            return task_sql.end_running_try(self.engine, key, new_state, now, error, try_number)
