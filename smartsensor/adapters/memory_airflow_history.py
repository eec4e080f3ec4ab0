"""``ports.AirflowSensorHistory`` in memory: `airflow report`'s reader over rows of Airflow's own tables, given as
Airflow writes them (by column name; times naive or aware UTC; JSON as text or parsed), by the rules of
``adapters.sql.airflow_history.read_history`` for Airflow 2.10 and 3.x: the Hive sensor tries of the period, the
current one (``task_instance``, with its rendered fields) beside the earlier ones (``task_instance_history``), each
try's reschedule pokes (2.x: by key and try number; 3.x: by the current try's ``id``), and the newest serialized
settings of each DAG. For tests of the report without an Airflow database; held to
``adapters.sql.status_store.SqlAirflowHistory`` by tests/integration/test_airflow_history_parity.py."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

from smartsensor.domain import airflow_history as af

Row = Mapping[str, Any]
_NEVER = datetime.min.replace(tzinfo=timezone.utc)  # a serialized DAG with no last_updated: the oldest


def _key(row: Row) -> af.TiKey:
    return af.TiKey(row["dag_id"], row["task_id"], row["run_id"], int(row["map_index"]))


def _at_or_after(value: Any, bound: datetime) -> bool:
    """SQL's ``value >= bound``: false for NULL."""
    when = af.as_utc(value)
    return when is not None and when >= bound


class MemoryAirflowHistory:
    """Airflow ``airflow`` (2 or 3)'s tables as lists of rows by table name (``task_instance``,
    ``task_instance_history``, ``task_reschedule`` in the order recorded, ``rendered_task_instance_fields``,
    ``serialized_dag``); a table left out is one the database does not have."""

    def __init__(self, airflow: int, tables: Mapping[str, Sequence[Row]]) -> None:
        self.airflow, self.tables = airflow, tables

    def read_history(self, since: datetime) -> af.AirflowHistory:
        """Every try of a Hive sensor task that started or ended at or after ``since`` (aware UTC), with its pokes,
        the task instances' rendered fields and the sensors' serialized settings."""
        current = [af.sensor_try(r) for r in self.tables.get("task_instance", ()) if _in_period(r, since)]
        earlier = [af.sensor_try(r) for r in self.tables.get("task_instance_history", ()) if _in_period(r, since)]
        tries = af.merge_tries(current, earlier)
        if tries and "task_reschedule" in self.tables:
            self._attach_pokes(tries, since)
        return af.AirflowHistory(
            self.airflow, tries, self._rendered(current), self._settings({t.key.dag_id for t in tries})
        )

    def _rendered(self, current: list[af.SensorTry]) -> dict[af.TiKey, Any]:
        """The rendered fields of the current tries' task instances (none: their row is gone, or NULL)."""
        keys = {t.key for t in current}
        return {
            _key(r): af.parse_json(r["rendered_fields"])
            for r in self.tables.get("rendered_task_instance_fields", ())
            if _key(r) in keys and r["rendered_fields"] is not None
        }

    def _attach_pokes(self, tries: list[af.SensorTry], since: datetime) -> None:
        """Each try's reschedule rows that ended at or after the period's start (or its earliest try's start), joined
        to the current try of a sensor task: on 3.x by its ``id`` (the current try's own), on 2.x by key."""
        earliest = min((t.start for t in tries if t.start is not None), default=None)
        lower = since if earliest is None else min(since, earliest)
        current = [r for r in self.tables.get("task_instance", ()) if r.get("operator") in af.SENSOR_OPERATORS]
        by_id = {r.get("id"): r for r in current}
        by_key = {_key(r): r for r in current}
        tries_by = {(t.key, t.try_number): t for t in tries}
        for tr in self.tables["task_reschedule"]:
            if self.airflow >= 3:
                ti = by_id.get(tr.get("ti_id")) if tr.get("ti_id") is not None else None
                try_number = None if ti is None else ti["try_number"]
            else:
                ti = by_key.get(_key(tr))
                try_number = tr["try_number"]
            if ti is None or try_number is None or not _at_or_after(tr["end_date"], lower):
                continue
            one = tries_by.get((_key(ti), int(try_number)))
            start, end, again = af.as_utc(tr["start_date"]), af.as_utc(tr["end_date"]), af.as_utc(tr["reschedule_date"])
            if one is not None and start is not None and end is not None and again is not None:
                one.pokes.append(af.Poke(start, end, again))

    def _settings(self, dag_ids: set[str]) -> dict[tuple[str, str], af.TaskSettings]:
        """(dag_id, task_id) → the settings of the newest serialized version of each DAG (by ``last_updated``)."""
        rows = [r for r in self.tables.get("serialized_dag", ()) if r["dag_id"] in dag_ids]
        out: dict[tuple[str, str], af.TaskSettings] = {}
        for row in sorted(rows, key=lambda r: af.as_utc(r.get("last_updated")) or _NEVER):
            for task_id, settings in af.serialized_settings(row.get("data"), row.get("data_compressed")):
                out[(row["dag_id"], task_id)] = settings
        return out


def _in_period(row: Row, since: datetime) -> bool:
    """A sensor task's try that started or ended at or after ``since``."""
    return row.get("operator") in af.SENSOR_OPERATORS and (
        _at_or_after(row.get("start_date"), since) or _at_or_after(row.get("end_date"), since)
    )
