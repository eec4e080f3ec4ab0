"""What the status page reads beside ``status``: the waiting tasks per distinct check, and recent landings;
``read_overview`` reads them with the history's samples on one connection."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, func, select

from smartsensor.adapters.sql import history as history_sql
from smartsensor.domain.states import State
from smartsensor.domain.status_rows import OverviewRows
from smartsensor.schema.models import task_instance as TI


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


def read_overview(engine: Engine, since: datetime, landings: int) -> OverviewRows:
    """The samples from ``since`` on, the waiting tasks per check and the ``landings`` last landings, on one
    connection (3 statements)."""
    with engine.connect() as conn:
        return OverviewRows(
            history_sql.load_samples(conn, since), waiting_checks(conn), recent_landings(conn, landings)
        )
