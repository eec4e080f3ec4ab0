"""Queries only ``scripts/bench.py`` sends, on its own throwaway database."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, delete, update

from smartsensor.domain.states import State
from smartsensor.schema.models import TaskInstance

TI = TaskInstance.__table__


def delete_all_tasks_for_benchmark(conn: Connection) -> int:
    """Empty task_instance (scripts/bench.py only, on its own throwaway database). 1 statement."""
    return conn.execute(delete(TI)).rowcount


def reset_to_waiting_for_benchmark(conn: Connection, now: datetime) -> int:
    """Every task waiting in its first try since ``now`` (scripts/bench.py only: the same state for each strategy)."""
    return conn.execute(update(TI).values(state=State.SMART_RUNNING, try_number=1, start_date=now, end_date=None,
                                          hostname=None, error=None)).rowcount
