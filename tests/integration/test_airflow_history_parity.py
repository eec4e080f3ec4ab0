"""`airflow report`'s reader in memory (``adapters.memory_airflow_history.MemoryAirflowHistory``) against the SQL one
(``adapters.sql.status_store.SqlAirflowHistory``) on Airflow's real 2.10.5 and 3.3.2 schemas (SQLite,
tests/support/airflow_schema): hypothesis generates task instances (Hive sensors and other operators, one to three
tries each, inside, across and before the period, in reschedule mode with pokes or not, with their rendered fields
or without) and serialized DAGs (versions, compressed or not, settings in each form), writes them with
``tests.support.airflow_db.AirflowDb`` and gives its rows to the twin, then compares the histories each reads for a
generated period."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from smartsensor.adapters.memory_airflow_history import MemoryAirflowHistory
from smartsensor.adapters.sql.airflow_history import open_airflow_db
from smartsensor.adapters.sql.status_store import SqlAirflowHistory
from tests.support.airflow_db import VERSIONS, AirflowDb, Try

BASE = datetime(2026, 11, 21, 6, 0)  # naive UTC, as Airflow writes it
OPERATORS = ["NamedHivePartitionSensor", "HivePartitionSensor", "MetastorePartitionSensor", "PythonOperator"]
MINUTES = st.sampled_from([-600, -30, -5, 0, 5, 40])  # around the periods' starts below
TRY = st.tuples(
    MINUTES,  # start
    st.sampled_from([0, 2, 30]),  # minutes it took
    st.sampled_from(["success", "failed", "up_for_retry", None]),
    st.sampled_from([None, "execute_complete"]),  # deferred
    st.integers(0, 3),  # earlier pokes (reschedule mode)
)
TASK = st.tuples(
    st.sampled_from(["a", "b"]),
    st.sampled_from(["s0", "s1"]),
    st.sampled_from(["r0", "r1"]),
    st.sampled_from(OPERATORS),
    st.lists(TRY, min_size=1, max_size=3),
    st.sampled_from([None, {"partition_names": ["db.t/ds=1"]}]),  # rendered fields (None: gone)
)
SETTING = st.sampled_from(
    [{}, {"poke_interval": 60.0}, {"poke_interval": {"__type": "timedelta", "__var": 600.0}}, {"reschedule": True}]
)
DAG = st.tuples(
    st.sampled_from(["a", "b"]),
    st.tuples(SETTING, SETTING),  # the settings of s0 and s1
    st.booleans(),  # compressed
    st.sampled_from([-90, -60, -30]),  # minutes: when this version was serialized
)
DATA = st.tuples(
    st.lists(TASK, min_size=2, max_size=6, unique_by=lambda t: t[:3]),
    st.lists(DAG, min_size=1, max_size=3, unique_by=lambda d: d[3]),
    st.sampled_from([-60, 0, 10]),  # the period's start, minutes from BASE
)
_files = itertools.count()


def _at(minutes: float) -> datetime:
    return BASE + timedelta(minutes=minutes)


def _tries(specs: list[tuple[Any, ...]]) -> list[Try]:
    """A task instance's tries: numbered from 1, each in its own time, its pokes every 5 minutes before its start."""
    out = []
    for number, (start, took, state, next_method, pokes) in enumerate(specs, 1):
        began = _at(start + 1000 * (number - 1))  # a later try starts after the earlier ones
        earlier = [began - timedelta(minutes=5 * (pokes - i)) for i in range(pokes)]
        out.append(Try(number, began, began + timedelta(minutes=took), state or "running", None, next_method, earlier))
    return out


def write(path: Path, version: str, data: tuple[Any, ...]) -> AirflowDb:
    """The generated history in a new Airflow database of ``version`` (the 2.x schema keeps one serialized version
    per DAG: the newest)."""
    tasks, dags, _ = data
    db = AirflowDb(path, version)
    for dag, task_id, run, operator, tries, rendered in tasks:
        db.task(dag, task_id, run, operator, _tries(tries), rendered)
    if db.major < 3:
        dags = list({d[0]: d for d in sorted(dags, key=lambda d: d[3])}.values())
    for dag, tasks_settings, compressed, minutes in dags:
        serialized = [
            {"__type": "operator", "__var": {"task_id": t, **s}}
            for t, s in zip(["s0", "s1"], tasks_settings, strict=True)
        ]
        db.serialized_dag(dag, serialized, compressed, _at(minutes))
    db.close()
    return db


def history_parity(tmp_path: Path, version: str, data: tuple[Any, ...]) -> None:
    db = write(tmp_path / f"airflow-{next(_files)}.db", version, data)
    since = _at(data[2]).replace(tzinfo=timezone.utc)
    engine = open_airflow_db(db.url)
    try:
        ours = SqlAirflowHistory(engine).read_history(since)
    finally:
        engine.dispose()
    assert ours == MemoryAirflowHistory(db.major, db.rows).read_history(since)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_memory_history_reads_as_airflows_database(tmp_path: Path, version: str) -> None:
    @settings(max_examples=30, deadline=None, derandomize=True)
    @given(DATA)
    def check(data: tuple[Any, ...]) -> None:
        history_parity(tmp_path, version, data)

    check()
