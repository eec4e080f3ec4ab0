"""The SQL ``SchedulerStore``: the standalone scheduler's reads and guarded writes on SQLite or PostgreSQL, through
the named queries of ``adapters.sql.tasks``."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Engine

from smartsensor.adapters.sql import channels as channel_sql, tasks as task_sql
from smartsensor.adapters.sql.store_errors import store_errors
from smartsensor.domain.keys import TaskKey
from smartsensor.domain.states import State
from smartsensor.ports import DeadRunPlan, ExitedRunPlan, RetryPlan


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
            for row in task_sql.load_up_for_retry(conn):
                step = plan(row)
                if step is None:
                    continue
                key, (state, error) = row.key, step
                if error is None:
                    changed = task_sql.requeue_retry(conn, key, row.try_number, state, now)
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
                if task_sql.end_zombie(conn, key, row.updated_at, state, now, error):
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
            return state if task_sql.end_exited_run(conn, key, try_number, claimant, state, now, error) else None

    def end_try(
        self, key: TaskKey, new_state: str, now: datetime, error: str | None = None, try_number: int | None = None
    ) -> bool:
        """``tasks.end_running_try``: a `run-task` child that could not be started fails its try."""
        with store_errors():
            return task_sql.end_running_try(self.engine, key, new_state, now, error, try_number)
