"""What the status page reads beside ``status``: the waiting tasks per distinct check, and recent landings."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, func, select

from smartsensor.domain.states import State
from smartsensor.schema.models import TaskInstance

TI = TaskInstance.__table__


def waiting_checks(conn: Connection) -> list[tuple[str | None, str | None, int]]:
    """(operator, attr_dict, waiting tasks) per distinct check of the waiting smart tasks: grouped by hashcode
    in the database, so each distinct attr_dict comes back once (1 statement)."""
    rows = conn.execute(
        select(func.max(TI.c.operator), func.max(TI.c.attr_dict), func.count())
        .where(TI.c.state.in_(State.SMART_WAITING))
        .group_by(TI.c.hashcode)
    )
    return [(op, attrs, n) for op, attrs, n in rows]


def recent_landings(conn: Connection, limit: int) -> list[dict[str, Any]]:
    """The ``limit`` task instances that succeeded last, newest first (1 statement)."""
    query = (
        select(TI.c.dag_id, TI.c.task_id, TI.c.execution_date, TI.c.end_date, TI.c.operator, TI.c.attr_dict)
        .where(TI.c.state == State.SUCCESS, TI.c.end_date.is_not(None))
        .order_by(TI.c.end_date.desc(), TI.c.dag_id, TI.c.task_id)
        .limit(limit)
    )
    return [dict(r) for r in conn.execute(query).mappings()]
