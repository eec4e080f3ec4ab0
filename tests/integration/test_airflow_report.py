"""`smartsensor airflow report` on an Airflow database with the real 2.10.5 and 3.3.2 schemas (SQLite) and a known
history: the exact figures, the command's output, and its one-line errors.

The history (T = three hours ago; every try ended, so the figures do not depend on when the test runs):

- P1, ``db.events/ds=2026-11-21`` (exact), waited on by three NamedHivePartitionSensor tasks: ``a.events`` in poke
  mode (T → T+30 min), ``b.events`` (spelled ``DB.Events``, one name as a string) failing once (T+10 → T+20 min),
  then T+25 → T+30 min, and ``d.events`` deferred T → T+30 min (resumed 2 s before its end), which also waits
  for P3, ``db.events/ds=2026-11-21/hr=00``;
- P2, the filter ``ds='2026-11-21'`` on ``db.clicks``, by two HivePartitionSensor tasks: ``a.clicks`` in poke
  mode T → T+60 min (poke_interval 600 s in its serialized DAG, compressed), ``c.clicks`` (schema ``db``,
  ``ds = '2026-11-21'``) in reschedule mode, 3 pokes of 2 s every 300 s then a last one of 2 s;
- ``e.old``: a NamedHivePartitionSensor T+60 → T+66 min whose rendered fields Airflow no longer keeps;
- left out: a PythonOperator task, and a sensor task that ran ten days ago.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from smartsensor.adapters.sql.airflow_history import open_airflow_db
from smartsensor.adapters.sql.status_store import SqlAirflowHistory
from smartsensor.service.savings import savings_report
from tests.support.airflow_db import VERSIONS, AirflowDb, Try
from tests.support.proc_helpers import cli_env, run_cli

NOW = datetime.now(timezone.utc).replace(microsecond=0, tzinfo=None)
T = NOW - timedelta(hours=3)
RUN = "scheduled__2026-11-21T00:00:00+00:00"
P1 = "db.events/ds=2026-11-21"


def _min(minutes: float) -> datetime:
    return T + timedelta(minutes=minutes)


def _history(db: AirflowDb) -> None:
    named, hive = "NamedHivePartitionSensor", "HivePartitionSensor"
    db.task("a", "events", RUN, named, [Try(1, _min(0), _min(30))], {"partition_names": [P1]})
    db.task(
        "b",
        "events",
        RUN,
        named,
        [Try(1, _min(10), _min(20), state="failed"), Try(2, _min(25), _min(30))],
        {"partition_names": "DB.Events/ds=2026-11-21"},
    )
    resumed = Try(1, _min(0), _min(30), queued=_min(30) - timedelta(seconds=2))
    db.task("d", "events", RUN, named, [resumed], {"partition_names": [P1, f"{P1}/hr=00"]})
    clicks = {"schema": "default", "table": "db.clicks", "partition": "ds='2026-11-21'"}
    db.task("a", "clicks", RUN, hive, [Try(1, _min(0), _min(60))], clicks)
    pokes = [_min(0), _min(5) + timedelta(seconds=2), _min(10) + timedelta(seconds=4)]
    last = _min(15) + timedelta(seconds=6)
    db.task(
        "c",
        "clicks",
        RUN,
        hive,
        [Try(1, last, last + timedelta(seconds=2), pokes=pokes)],
        {"schema": "db", "table": "clicks", "partition": "ds = '2026-11-21'"},
    )
    db.task("e", "old", RUN, named, [Try(1, _min(60), _min(66))], None)
    db.task("a", "transform", RUN, "PythonOperator", [Try(1, _min(0), _min(1))], None)
    ten_days = timedelta(days=10)
    db.task("a", "events", "old_run", named, [Try(1, _min(0) - ten_days, _min(30) - ten_days)], {"partition_names": P1})
    if db.major >= 3:  # an older version of a.clicks's DAG, replaced by the newer one
        db.serialized_dag("a", [_task("clicks", poke_interval=60.0)], compressed=False, updated=_min(-60))
    db.serialized_dag(
        "a", [_task("events"), _task("clicks", poke_interval={"__type": "timedelta", "__var": 600.0})], True, _min(-30)
    )
    db.serialized_dag("c", [_task("clicks", reschedule=True)], compressed=False, updated=_min(-30))
    db.close()


def _task(task_id: str, **var: object) -> dict[str, object]:
    return {"__type": "operator", "__var": {"task_id": task_id, "_task_type": "X", **var}}


@pytest.fixture(params=VERSIONS)
def airflow_db(request: pytest.FixtureRequest, tmp_path: Path) -> AirflowDb:
    db = AirflowDb(tmp_path / "airflow.db", request.param)
    _history(db)
    return db


EXPECTED = {
    "sensor_tasks": 6,
    "tries": 7,
    "by_operator": {"NamedHivePartitionSensor": 4, "HivePartitionSensor": 2},
    "distinct_checks": 4,  # {P1}, {P1, P3}, {P2}, e.old's own
    "distinct_partitions": 4,
    "tables": 2,
    "tasks_without_fields": 1,
    "partition_waits": 7,
    "dedup_ratio": 1.5,
    "tasks_per_partition": 1.75,
    # poke: 1800 + 600 + 300 + 3600 + 360 s; reschedule: 4 pokes of 2 s; deferred: the 2 s after the resume
    "slot_hours": {"poke": 1.85, "reschedule": 0.0022, "deferred": 0.0006},
    "slot_hours_total": 1.8528,
    "deferred_hours": 0.4994,  # 1798 s
    "reschedule_pokes": 3,
    "poke_interval_from": {"class default": 4, "reschedule rows": 1, "serialized DAG": 1},
    # pokes: a.events 1800 // 180 + 1 = 11, b.events 4 + 2, d.events 11, a.clicks 3600 // 600 + 1 = 7,
    # c.clicks 3 + 1, e.old 3; calls: the same, but d.events 11 - 1 + 2 partitions
    "airflow_pokes": 42,
    "airflow_metastore_calls": 43,
    # every 60 s: P1 and P3 over T → T+30 min (31 rounds each), P2 over T → T+60 min (61), e.old 7
    "smartsensor_checks": 130,
    "smartsensor_metastore_calls": 99,  # db.events 31, db.clicks 61, e.old's own 7
    "smartsensor_rounds": 67,  # T → T+66 min
    "calls_ratio": 0.4,
}


def test_the_report_counts_a_known_history_exactly(airflow_db: AirflowDb) -> None:
    engine = open_airflow_db(airflow_db.url)
    try:
        report = savings_report(
            SqlAirflowHistory(engine), days=7, interval=60, now=NOW.replace(tzinfo=timezone.utc)
        ).as_json()
    finally:
        engine.dispose()
    assert report["airflow_schema"] == airflow_db.major
    assert {k: report[k] for k in EXPECTED} == EXPECTED


def test_the_command_prints_json_and_tables(airflow_db: AirflowDb, tmp_path: Path) -> None:
    env = cli_env(tmp_path / "home", f"sqlite:///{tmp_path / 'smartsensor.db'}")
    args = ["airflow", "report", "--airflow-db", airflow_db.url]
    data = json.loads(run_cli([*args, "--json", "--interval", "60"], env, check=True).stdout)
    assert {k: data[k] for k in EXPECTED} == EXPECTED
    assert json.loads(run_cli([*args, "--json"], env, check=True).stdout)["interval"] == 5.0  # poke_interval
    text = run_cli(args, env, check=True).stdout
    for heading in ("Hive sensor tasks in Airflow", "Airflow's own sensors against smartsensor", "Assumptions"):
        assert heading in text
    assert not (tmp_path / "smartsensor.db").exists()  # nothing of smartsensor's own is needed


@pytest.mark.parametrize(
    "url, says",
    [
        pytest.param("sqlite:///{tmp}/other.db", "not an Airflow metadata database", id="another database"),
        pytest.param("sqlite:///{tmp}/missing.db", "no SQLite database file", id="a missing file"),
        pytest.param("postgresql://u:secret@127.0.0.1:1/airflow", "unreachable", id="unreachable"),
        pytest.param("not a url", "not a database URL", id="not a URL"),
    ],
)
def test_a_database_that_is_not_airflows_is_one_line(tmp_path: Path, url: str, says: str) -> None:
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE something (x INTEGER)")
    env = cli_env(tmp_path / "home", f"sqlite:///{tmp_path / 'smartsensor.db'}")
    proc = run_cli(["airflow", "report", "--airflow-db", url.format(tmp=tmp_path)], env)
    assert proc.returncode == 1, proc.stdout
    assert says in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert "secret" not in proc.stderr
    assert not (tmp_path / "missing.db").exists()  # read-only: never creates a database
