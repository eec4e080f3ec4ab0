"""The SQL ``SchedulerStore``: the standalone scheduler's reads and guarded writes on SQLite or PostgreSQL: its own
named queries (retries, dead runs, exited runs), then the store, which runs them and those of ``adapters.sql.tasks``
each in a connection or transaction of its own."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, Engine, select

from smartsensor.adapters.sql import channels as channel_sql, tasks as task_sql
from smartsensor.adapters.sql.store_errors import store_errors
from smartsensor.domain.keys import TaskKey
from smartsensor.domain.rows import RetryRow
from smartsensor.domain.states import State
from smartsensor.ports import DeadRunPlan, ExitedRunPlan, RetryPlan

TI = task_sql.TI


def load_up_for_retry(conn: Connection) -> list[RetryRow]:
    """Task instances waiting to be retried (1 statement)."""
    columns = [TI.c[name] for name in RetryRow._fields]
    return [RetryRow._make(r) for r in conn.execute(select(*columns).where(TI.c.state == State.UP_FOR_RETRY))]


def requeue_retry(conn: Connection, key: TaskKey, try_number: int, new_state: str, now: datetime) -> bool:
    """up_for_retry → new_state for the next try, if nobody changed it meanwhile. 1 statement."""
    return task_sql.update_task(
        conn,
        key,
        [TI.c.state == State.UP_FOR_RETRY, TI.c.try_number == try_number],
        state=new_state,
        try_number=try_number + 1,
        start_date=None,
        end_date=None,
        hostname=None,
        updated_at=now,
    )


def end_zombie(
    conn: Connection, key: TaskKey, seen_updated_at: datetime, new_state: str, now: datetime, error: str
) -> bool:
    """End a dead run's task, unless it heartbeated or changed since it was read (1 statement)."""
    guard = [TI.c.state == State.RUNNING, TI.c.updated_at == seen_updated_at]
    return task_sql.update_task(conn, key, guard, state=new_state, end_date=now, updated_at=now, error=error)


def end_exited_run(
    conn: Connection, key: TaskKey, try_number: int, claimant: str, new_state: str, now: datetime, error: str
) -> bool:
    """End the try of a classic run whose process exited without ending it, while the task is still `running` in
    that try under that claim (``hostname``): a run that ended, a hand-back, another claim or a user's change
    wins. 1 statement."""
    guard = [TI.c.state == State.RUNNING, TI.c.try_number == try_number, TI.c.hostname == claimant]
    return task_sql.update_task(conn, key, guard, state=new_state, end_date=now, updated_at=now, error=error)


class SqlSchedulerStore:
    """``smartsensor.ports.SchedulerStore`` over an SQLAlchemy engine; each operation in a connection or transaction
    of its own."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def requeue_due_retries(self, now: datetime, plan: RetryPlan) -> list[tuple[str, bool]]:
        """In one transaction: every up_for_retry task (``load_up_for_retry``) as ``plan`` says: its next try queued
        (``requeue_retry``) or the task ended (``set_state`` from up_for_retry in its try), then, on PostgreSQL,
        NOTIFY pending if a next try went smart_pending. (state, whether the row changed) per task planned.
        1 statement, 1 per task planned, and the NOTIFY."""
        done: list[tuple[str, bool]] = []
        with store_errors(), self.engine.begin() as conn:
            for row in load_up_for_retry(conn):
                step = plan(row)
                if step is None:
                    continue
                key, (state, error) = row.key, step
                if error is None:
                    changed = requeue_retry(conn, key, row.try_number, state, now)
                else:
                    changed = task_sql.set_state(
                        conn,
                        key,
                        state,
                        from_states=[State.UP_FOR_RETRY],
                        now=now,
                        error=error,
                        try_number=row.try_number,
                    )
                done.append((state, changed))
            if any(changed and state == State.SMART_PENDING for state, changed in done):
                channel_sql.notify_pending(conn)  # the workers start the next tries at once
        return done

    def end_dead_runs(self, cutoff: datetime, now: datetime, plan: DeadRunPlan) -> list[tuple[TaskKey, str, str]]:
        """In one transaction: every `running` task whose run last heartbeated before ``cutoff`` (``load_zombies``)
        ended as ``plan`` says, (state, error), unless it beat or changed since it was read (``end_zombie``). (key,
        state, error) of those ended. 1 statement, and 1 per such task."""
        ended: list[tuple[TaskKey, str, str]] = []
        with store_errors(), self.engine.begin() as conn:
            for row in task_sql.load_zombies(conn, cutoff):
                key, (state, error) = row.key, plan(row)
                if end_zombie(conn, key, row.updated_at, state, now, error):
                    ended.append((key, state, error))
        return ended

    def scheduled_keys(self, limit: int) -> list[TaskKey]:
        """``keys_in_state`` (scheduled) on a connection of its own (1 statement)."""
        with store_errors(), self.engine.connect() as conn:
            return task_sql.keys_in_state(conn, State.SCHEDULED, limit=limit)

    def claim_scheduled_try(self, key: TaskKey, now: datetime, claimant: str) -> int | None:
        """In one transaction: claim a scheduled task for a run the scheduler starts (``claim_scheduled``) and read
        the try it claimed; None if another process got there first. 1 statement, 2 when claimed."""
        with store_errors(), self.engine.begin() as conn:
            if not task_sql.claim_scheduled(conn, key, now, claimant):
                return None
            return task_sql.get_task(conn, *key).try_number  # type: ignore[union-attr]  # claimed just above

    def end_exited_try(
        self, key: TaskKey, try_number: int, claimant: str, now: datetime, error: str, state_for: ExitedRunPlan
    ) -> str | None:
        """In one transaction: if the task is still `running` in ``try_number``, end that try in the state
        ``state_for`` gives its row (``end_exited_run``, under ``claimant``'s claim). The state it ended in, None
        when nothing ended. 1 statement, 2 when it is still running."""
        with store_errors(), self.engine.begin() as conn:
            row = task_sql.get_task(conn, *key)
            if row is None or row.state != State.RUNNING or row.try_number != try_number:
                return None  # ended by the run, handed back, or changed by someone: nothing to do
            state = state_for(row)
            return state if end_exited_run(conn, key, try_number, claimant, state, now, error) else None

    def end_try(
        self, key: TaskKey, new_state: str, now: datetime, error: str | None = None, try_number: int | None = None
    ) -> bool:
        """``tasks.end_running_try``: a `run-task` child that could not be started fails its try."""
        with store_errors():
            return task_sql.end_running_try(self.engine, key, new_state, now, error, try_number)
