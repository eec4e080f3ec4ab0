"""An Airflow metadata database on SQLite with the real schema of 2.10.5 or 3.3.2 (tests/support/airflow_schema, from
``airflow db migrate``), and rows written the way each version writes them: naive UTC timestamps, a new ``id`` per
try and ``task_reschedule.ti_id`` on 3.x (rows stamped when recorded: start ~ end ~ the end of the poke), keys and
try numbers on 2.10 (each row its poke's own start and end). Used by tests/integration/test_airflow_report.py."""

from __future__ import annotations

import itertools
import json
import sqlite3
import uuid
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

SCHEMAS = Path(__file__).resolve().parent / "airflow_schema"
VERSIONS = ("2.10.5", "3.3.2")
_ids = itertools.count(1)


def _ts(when: datetime | None) -> str | None:
    return None if when is None else when.strftime("%Y-%m-%d %H:%M:%S.%f")


@dataclass
class Try:
    """One try of a task instance: [start, end], and for a reschedule-mode try its pokes (start of each)."""

    number: int
    start: datetime
    end: datetime
    state: str = "success"
    queued: datetime | None = None  # default: 1 s before start
    next_method: str | None = None
    pokes: list[datetime] = field(default_factory=list)  # reschedule mode: when each earlier poke started
    poke_seconds: float = 2.0
    poke_interval: float = 300.0


class AirflowDb:
    """A SQLite file with one Airflow version's tables, and writers for its rows."""

    def __init__(self, path: Path, version: str) -> None:
        self.path, self.version = path, version
        self.major = int(version.split(".")[0])
        self.conn = sqlite3.connect(path)
        self.conn.executescript((SCHEMAS / f"airflow-{version}.sql").read_text())
        self.rows: dict[str, list[dict[str, Any]]] = {}  # every row written, by table, times as datetimes

    @property
    def url(self) -> str:
        return f"sqlite:///{self.path}"

    def close(self) -> None:
        self.conn.commit()
        self.conn.close()

    def task(
        self, dag_id: str, task_id: str, run_id: str, operator: str, tries: list[Try], rendered: dict[str, Any] | None
    ) -> None:
        """A task instance: its last try in task_instance, the earlier ones in task_instance_history, the
        reschedule rows of each try (3.x: only the last try's, as Airflow deletes them at a retry), its rendered
        fields (None: gone)."""
        *earlier, last = tries
        for one in earlier:
            self._insert("task_instance_history", self._row(dag_id, task_id, run_id, operator, one, history=True))
            if self.major < 3:
                self._pokes(dag_id, task_id, run_id, one, None)
        row = self._row(dag_id, task_id, run_id, operator, last, history=False)
        self._insert("task_instance", row)
        self._pokes(dag_id, task_id, run_id, last, row.get("id"))
        if rendered is not None:
            key = dict(dag_id=dag_id, task_id=task_id, run_id=run_id, map_index=-1)
            self._insert("rendered_task_instance_fields", {**key, "rendered_fields": json.dumps(rendered)})

    def serialized_dag(self, dag_id: str, tasks: list[dict[str, Any]], compressed: bool, updated: datetime) -> None:
        """One serialized version of a DAG (3.x keeps one per version; 2.10 one per DAG)."""
        data = {"__version": 3 if self.major >= 3 else 1, "dag": {"dag_id": dag_id, "tasks": tasks}}
        text = json.dumps(data)
        row: dict[str, Any] = dict(
            dag_id=dag_id,
            data=None if compressed else text,
            data_compressed=zlib.compress(text.encode()) if compressed else None,
            last_updated=updated,
            dag_hash="0" * 32,
        )
        if self.major >= 3:
            row.update(id=uuid.uuid4().hex, created_at=updated, dag_version_id=uuid.uuid4().hex)
        else:
            row.update(fileloc=f"/dags/{dag_id}.py", fileloc_hash=next(_ids))
        self._insert("serialized_dag", row)

    def _row(self, dag_id: str, task_id: str, run_id: str, operator: str, one: Try, history: bool) -> dict[str, Any]:
        row: dict[str, Any] = dict(
            dag_id=dag_id,
            task_id=task_id,
            run_id=run_id,
            map_index=-1,
            try_number=one.number,
            start_date=one.start,
            end_date=one.end,
            duration=(one.end - one.start).total_seconds(),
            state=one.state,
            operator=operator,
            pool="default_pool",
            pool_slots=1,
            queued_dttm=one.queued or one.start - timedelta(seconds=1),
            next_method=one.next_method,
        )
        if self.major >= 3:
            row["task_instance_id" if history else "id"] = uuid.uuid4().hex
        return row

    def _pokes(self, dag_id: str, task_id: str, run_id: str, one: Try, ti_id: str | None) -> None:
        for started in one.pokes:
            ended = started + timedelta(seconds=one.poke_seconds)
            row: dict[str, Any] = dict(
                end_date=ended,
                reschedule_date=ended + timedelta(seconds=one.poke_interval),
                duration=int(one.poke_seconds),
            )
            if self.major >= 3:  # stamped by the API when it records the reschedule, at the end of the poke
                row.update(ti_id=ti_id, start_date=ended, duration=0)
            else:
                row.update(
                    dag_id=dag_id,
                    task_id=task_id,
                    run_id=run_id,
                    map_index=-1,
                    try_number=one.number,
                    start_date=started,
                )
            self._insert("task_reschedule", row)

    def _insert(self, table: str, row: dict[str, Any]) -> None:
        """``row`` into ``table`` (its times as Airflow's SQLite text), and as it is into ``rows``."""
        self.rows.setdefault(table, []).append(row)
        names = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        values = [_ts(v) if isinstance(v, datetime) else v for v in row.values()]
        self.conn.execute(f"INSERT INTO {table} ({names}) VALUES ({marks})", values)
