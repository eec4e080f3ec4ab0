"""`status` sees what is stuck (issue 30): smart tasks that still wait after their check landed, or past their
time limit, more than the convergence bound (reconcile_interval + poke_interval) ago: counted, with the most
overdue one, in `status` (text and JSON), the page and /metrics, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from smartsensor.adapters.sql.engine import statement_count
from smartsensor.adapters.sql.registration_store import SqlRegistrationStore
from smartsensor.adapters.sql.status_store import SqlStatusReads
from smartsensor.domain.states import State
from smartsensor.roots.serve import create_app
from smartsensor.schema.models import task_instance as TI
from smartsensor.service.status import collect_status, status_lines
from smartsensor.standalone.registration import register
from tests.support.common import DAY, T0, named

DAY_TEXT = "2026-11-22T00:00:00"  # DAY as status prints it: naive UTC, as it always has
BOUND = 60.0  # reconcile_interval 40 + poke_interval 20
WEEK = 7 * 24 * 3600


@pytest.fixture
def cfg_overrides() -> dict[str, str]:
    return {"smart_sensor__reconcile_interval": "40", "smart_sensor__poke_interval": "20"}


def ago(seconds: float) -> datetime:
    return T0 - timedelta(seconds=seconds)


def add(engine: Any, cfg: Any, dag_id: str, partition: str, **kw: Any) -> None:
    """Register dag_id.w waiting for ``partition`` (the same partition: the same check)."""
    register(SqlRegistrationStore(engine), [(dag_id, named("w", partition, **kw))], DAY, cfg)


def place(engine: Any, dag_id: str, state: str, **values: Any) -> None:
    """Put dag_id.w in ``state`` with these column values (start_date, end_date, updated_at, exec_dict…)."""
    with engine.begin() as conn:
        conn.execute(update(TI).where(TI.c.dag_id == dag_id).values(state=state, **values))


def stuck_of(engine: Any, cfg: Any) -> dict[str, Any]:
    return collect_status(SqlStatusReads(engine), cfg, T0).as_json()["stuck"]


def test_a_task_waiting_after_its_check_landed_past_the_bound_is_stuck(cfg, engine) -> None:
    assert cfg.convergence_bound == BOUND
    # landed 120 s ago; b has waited since 300 s ago: due at the landing, 60 s past it + the bound
    add(engine, cfg, "a", "db.t/ds=1")
    add(engine, cfg, "b", "db.t/ds=1")
    place(engine, "a", State.SUCCESS, start_date=ago(900), end_date=ago(120))
    place(engine, "b", State.SMART_RUNNING, start_date=ago(300), updated_at=ago(300))
    # landed 30 s ago, within the bound: d is not (yet) stuck
    add(engine, cfg, "c", "db.t/ds=2")
    add(engine, cfg, "d", "db.t/ds=2")
    place(engine, "c", State.SUCCESS, start_date=ago(900), end_date=ago(30))
    place(engine, "d", State.SMART_RUNNING, start_date=ago(300), updated_at=ago(300))
    # landed 150 s ago: f started 30 s ago (within the bound, after the landing), g waits unstarted since 30 s
    # ago; h waits unstarted since 200 s ago (its updated_at): stuck, due at the landing, 90 s late
    for dag_id in "efgh":
        add(engine, cfg, dag_id, "db.t/ds=3")
    place(engine, "e", State.SUCCESS, start_date=ago(900), end_date=ago(150))
    place(engine, "f", State.SMART_RUNNING, start_date=ago(30), updated_at=ago(30))
    place(engine, "g", State.SMART_PENDING, start_date=None, updated_at=ago(30))
    place(engine, "h", State.SMART_PENDING, start_date=None, updated_at=ago(200))
    # another check's landing says nothing about i; nor does a sibling that failed or was skipped
    for dag_id in "ijk":
        add(engine, cfg, dag_id, "db.t/ds=4")
    place(engine, "i", State.SMART_RUNNING, start_date=ago(3000), updated_at=ago(3000))
    place(engine, "j", State.FAILED, start_date=ago(3000), end_date=ago(2000))
    place(engine, "k", State.SKIPPED, start_date=ago(3000), end_date=ago(2000))

    stuck = stuck_of(engine, cfg)
    assert stuck == {
        "bound_seconds": BOUND,
        "after_landing": {
            "count": 2,
            "oldest": {"dag_id": "h", "task_id": "w", "execution_date": DAY_TEXT, "late_seconds": 90.0},
        },
        "past_time_limit": {"count": 0, "oldest": None},
    }
    # the later of the landing and the wait's start is the due time: b alone, started after its landing
    place(engine, "h", State.SUCCESS, end_date=ago(150))
    place(engine, "b", State.SMART_RUNNING, start_date=ago(100))
    assert stuck_of(engine, cfg)["after_landing"] == {
        "count": 1,
        "oldest": {"dag_id": "b", "task_id": "w", "execution_date": DAY_TEXT, "late_seconds": 40.0},
    }


def test_the_tasks_of_one_hashcode_are_stuck_by_their_own_check(cfg, engine) -> None:
    # Eight waiting or landed tasks share one hashcode: five of check a (db.t/ds=1), three of check b (db.t/ds=2,
    # given a's hashcode: a collision). a landed twice (its first landing counts), b only within the bound.
    for dag_id in ("a1", "a2", "a3", "a4", "a5", "b1", "b2", "b3"):
        add(engine, cfg, dag_id, "db.t/ds=1" if dag_id < "b" else "db.t/ds=2")
    with engine.begin() as conn:
        hashcode = conn.execute(select(TI.c.hashcode).where(TI.c.dag_id == "a1")).scalar_one()
        conn.execute(update(TI).where(TI.c.dag_id.in_(["b1", "b2", "b3"])).values(hashcode=hashcode))
    place(engine, "a1", State.SUCCESS, start_date=ago(900), end_date=ago(500))
    place(engine, "a2", State.SUCCESS, start_date=ago(900), end_date=ago(200))
    place(engine, "a3", State.SMART_RUNNING, start_date=ago(1000))  # due at the first landing: 440 s late
    place(engine, "a4", State.SMART_PENDING, start_date=None, updated_at=ago(400))  # due at its start: 340 s late
    place(engine, "a5", State.SMART_RUNNING, start_date=ago(30))  # within the bound
    place(engine, "b1", State.SUCCESS, start_date=ago(900), end_date=ago(10))  # within the bound: not yet a landing
    place(engine, "b2", State.SMART_RUNNING, start_date=ago(1000))
    place(engine, "b3", State.SMART_PENDING, start_date=None, updated_at=ago(1000))

    assert stuck_of(engine, cfg)["after_landing"] == {
        "count": 2,
        "oldest": {"dag_id": "a3", "task_id": "w", "execution_date": DAY_TEXT, "late_seconds": 440.0},
    }
    place(engine, "b1", State.SUCCESS, end_date=ago(100))  # b's landing is past the bound now: b2 and b3 are stuck
    place(engine, "a3", State.SUCCESS, end_date=ago(100))
    assert stuck_of(engine, cfg)["after_landing"] == {
        "count": 3,  # a4, b2, b3
        "oldest": {"dag_id": "a4", "task_id": "w", "execution_date": DAY_TEXT, "late_seconds": 340.0},
    }


def test_a_task_waiting_past_its_time_limit_and_the_bound_is_stuck(cfg, engine) -> None:
    add(engine, cfg, "p1", "db.u/ds=1", timeout=600)
    add(engine, cfg, "p2", "db.u/ds=2", timeout=600)
    add(engine, cfg, "p3", "db.u/ds=3", timeout=7200, execution_timeout=3600)  # the limit: the smaller
    add(engine, cfg, "p4", "db.u/ds=4", timeout=3600)
    place(engine, "p1", State.SMART_RUNNING, start_date=ago(600 + BOUND + 40))  # 40 s late
    place(engine, "p2", State.SMART_RUNNING, start_date=ago(600 + BOUND - 10))  # within the bound
    place(engine, "p3", State.SMART_RUNNING, start_date=ago(3600 + BOUND + 100))  # 100 s late: the oldest
    place(engine, "p4", State.SMART_PENDING, start_date=None, updated_at=ago(99999))  # never started: no limit yet
    # NULL exec_dict: the default time limit, 7 days
    add(engine, cfg, "n1", "db.u/ds=5")
    add(engine, cfg, "n2", "db.u/ds=6")
    place(engine, "n1", State.SMART_RUNNING, exec_dict=None, start_date=ago(WEEK + BOUND + 1))
    place(engine, "n2", State.SMART_RUNNING, exec_dict=None, start_date=ago(WEEK + BOUND - 100))
    # an exec_dict that cannot be read is left to the worker, which fails its task
    add(engine, cfg, "x", "db.u/ds=7")
    place(engine, "x", State.SMART_RUNNING, exec_dict="{not json", start_date=ago(10 * WEEK))
    # an ended task past any limit is not stuck
    add(engine, cfg, "e", "db.u/ds=8", timeout=600)
    place(engine, "e", State.FAILED, start_date=ago(10 * WEEK), end_date=ago(9 * WEEK))

    stuck = stuck_of(engine, cfg)
    assert stuck["past_time_limit"] == {
        "count": 3,
        "oldest": {"dag_id": "p3", "task_id": "w", "execution_date": DAY_TEXT, "late_seconds": 100.0},
    }
    assert stuck["after_landing"] == {"count": 0, "oldest": None}
    place(engine, "p3", State.SUCCESS, end_date=ago(1))
    place(engine, "p1", State.SUCCESS, end_date=ago(1))
    assert stuck_of(engine, cfg)["past_time_limit"] == {
        "count": 1,
        "oldest": {"dag_id": "n1", "task_id": "w", "execution_date": DAY_TEXT, "late_seconds": 1.0},
    }


def _one_of_each(engine: Any, cfg: Any) -> None:
    add(engine, cfg, "a", "db.t/ds=1")
    add(engine, cfg, "b", "db.t/ds=1")
    place(engine, "a", State.SUCCESS, end_date=ago(120))
    place(engine, "b", State.SMART_RUNNING, start_date=ago(300))
    add(engine, cfg, "p", "db.u/ds=1", timeout=600)
    place(engine, "p", State.SMART_RUNNING, start_date=ago(600 + BOUND + 40))


def test_stuck_tasks_are_loud_lines_and_problems(cfg, engine) -> None:
    quiet = collect_status(SqlStatusReads(engine), cfg, T0)
    assert quiet.problems == () and not any("still wait" in line for line in status_lines(quiet, 10000))
    _one_of_each(engine, cfg)
    data = collect_status(SqlStatusReads(engine), cfg, T0)
    date = DAY_TEXT
    expected = [
        f"1 task(s) still wait although their check landed more than 60 s ago (oldest: b.w @ {date}, 60 s late)",
        f"1 task(s) still wait more than 60 s past their time limit (oldest: p.w @ {date}, 40 s late)",
    ]
    assert list(data.problems) == expected
    lines = status_lines(data, cfg.shard_code_upper_limit)
    assert [f"WARNING: {p}" for p in expected] == [line for line in lines if "still wait" in line]


def test_collect_status_sends_9_statements_11_with_a_task_past_its_time_limit(cfg, engine) -> None:
    add(engine, cfg, "a", "db.t/ds=1")
    before = statement_count(engine)
    collect_status(SqlStatusReads(engine), cfg, T0)
    assert statement_count(engine) - before == 9
    _one_of_each(engine, cfg)
    add(engine, cfg, "q", "db.u/ds=2", timeout=1200)  # a second exec_dict past its limit: still one count
    place(engine, "q", State.SMART_RUNNING, start_date=ago(1200 + BOUND + 1))
    before = statement_count(engine)
    assert collect_status(SqlStatusReads(engine), cfg, T0).stuck.past_time_limit.count == 2
    assert statement_count(engine) - before == 11


def test_metrics_and_the_page_show_the_stuck_counts(cfg, engine) -> None:
    client = TestClient(create_app(cfg, engine, None), raise_server_exceptions=False)
    text_ = client.get("/metrics").text
    assert 'smartsensor_stuck_tasks{kind="after_landing"} 0.0' in text_
    assert 'smartsensor_stuck_oldest_seconds{kind="past_time_limit"} 0.0' in text_
    # stuck tasks registered relative to the wall clock: /metrics and the page read it, not T0
    now = datetime.now(timezone.utc)
    add(engine, cfg, "a", "db.t/ds=1")
    add(engine, cfg, "b", "db.t/ds=1")
    place(engine, "a", State.SUCCESS, end_date=now - timedelta(seconds=3600))
    place(engine, "b", State.SMART_RUNNING, start_date=now - timedelta(seconds=7200))
    text_ = client.get("/metrics").text
    assert 'smartsensor_stuck_tasks{kind="after_landing"} 1.0' in text_
    assert 'smartsensor_stuck_tasks{kind="past_time_limit"} 0.0' in text_
    late = next(line for line in text_.splitlines() if line.startswith('smartsensor_stuck_oldest_seconds{kind="after'))
    assert 3600 - BOUND <= float(late.split()[-1]) < 3600 - BOUND + 60
    assert "smartsensor_problems 1.0" in text_
    html = client.get("/").text
    assert 'data-stuck="after_landing" data-count="1"' in html
    assert 'data-stuck="past_time_limit" data-count="0"' in html
    assert "still wait although their check landed more than 60 s ago" in html
    assert client.get("/api/v1/status").json()["stuck"]["after_landing"]["count"] == 1
