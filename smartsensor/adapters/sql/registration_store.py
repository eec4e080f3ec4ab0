"""The SQL ``RegistrationStore``: the standalone door's registration (``submit``) on SQLite or PostgreSQL, through
the named queries of ``adapters.sql.tasks``."""

from __future__ import annotations

from datetime import datetime
from typing import Iterable, Sequence

from sqlalchemy import Engine

from smartsensor.adapters.sql import channels as channel_sql, tasks as task_sql
from smartsensor.adapters.sql.store_errors import store_errors
from smartsensor.domain.rows import TaskRow
from smartsensor.domain.states import State


class SqlRegistrationStore:
    """``smartsensor.ports.RegistrationStore`` over an SQLAlchemy engine; each operation in a connection or
    transaction of its own."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def register_rows(
        self, rows: Sequence[TaskRow], execution_date: datetime, clear: bool
    ) -> dict[tuple[str, str], str]:
        """Register task rows of one execution date in ONE transaction: read which exist (``existing_states``),
        insert the others in bulk, overwrite the existing ones with their row when ``clear`` (``reset_task``), then,
        on PostgreSQL, NOTIFY the pending channel with the shardcodes of the smart_pending rows inserted or
        overwritten. Returns {(dag_id, task_id): state} of the rows that existed, as they were. InsertConflict
        (nothing written) when another registration inserted some of them meanwhile. Statements:
        ``existing_states``' and ``insert_tasks_bulk``'s, 1 per row overwritten, and the NOTIFY."""
        with store_errors(), self.engine.begin() as conn:
            existing = task_sql.existing_states(conn, execution_date, {row.dag_id for row in rows})
            task_sql.insert_tasks_bulk(conn, [row for row in rows if (row.dag_id, row.task_id) not in existing])
            if clear:
                for row in rows:
                    if (row.dag_id, row.task_id) in existing:
                        task_sql.reset_task(conn, row)
            # their worker starts them and pokes their checks at once, not at its next round
            channel_sql.notify_pending(
                conn,
                [
                    row.shardcode
                    for row in rows
                    if row.state == State.SMART_PENDING and (clear or (row.dag_id, row.task_id) not in existing)
                ],
            )
        return existing

    def read_states(self, execution_date: datetime, dag_ids: Iterable[str]) -> dict[tuple[str, str], str]:
        """``existing_states`` on a connection of its own (1 statement per IN_CHUNK dag_ids)."""
        with store_errors(), self.engine.connect() as conn:
            return task_sql.existing_states(conn, execution_date, dag_ids)
