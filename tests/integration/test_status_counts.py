"""`status` never reads a row per waiting task (issue 34, item 5): the waiting tasks and distinct checks per shard
range are counted in the database, so what ``collect_status`` fetches is bounded by the ranges and states, not by
the tasks; its figures are those of a plain count over every waiting task's (shardcode, hashcode), on SQLite and
PostgreSQL."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, insert, select

from smartsensor.adapters.sql import status as status_sql
from smartsensor.adapters.sql.status_store import SqlStatusReads
from smartsensor.config import Config
from smartsensor.domain.states import State
from smartsensor.schema.models import task_instance as TI
from smartsensor.service.status import collect_status
from tests.support.common import T0

WAITING = 5000
OTHER_STATES = (State.SUCCESS, State.SCHEDULED, State.UP_FOR_RETRY, State.FAILED)


@pytest.fixture
def cfg_overrides() -> dict[str, str]:
    return {"smart_sensor__shards": "3"}


def populate(engine: Any, limit: int, null_shardcodes: bool = False) -> None:
    """5,000 waiting tasks over the 3 ranges, 700 hashcodes, some of them in several shardcodes and ranges (as
    after a shard_code_upper_limit change without `db reshard`), a few NULL hashcodes, a few stranded (shardcode
    outside [0, limit), or NULL if ``null_shardcodes``: the old Python loop failed on those); and 400 tasks in
    other states, which count nowhere."""
    rows = []
    for i in range(WAITING + 400):
        hashcode: int | None = i % 700
        shardcode: int | None = (hashcode * 37 + (i % 3) * 1111) % limit if hashcode is not None else None
        if i % 997 == 0:
            hashcode = None
            shardcode = i % limit
        elif i % 1009 == 0:
            shardcode = limit + i
        elif null_shardcodes and i % 2003 == 0:
            shardcode = None
        state = (State.SMART_PENDING, State.SMART_RUNNING)[i % 2] if i < WAITING else OTHER_STATES[i % 4]
        rows.append(
            {
                "dag_id": f"d{i % 50}",
                "task_id": f"t{i}",
                "execution_date": T0 - timedelta(days=i % 7),
                "state": state,
                "try_number": 1,
                "max_tries": 0,
                "hashcode": hashcode,
                "shardcode": shardcode,
            }
        )
    with engine.begin() as conn:
        conn.execute(insert(TI), rows)


def python_figures(engine: Any, cfg: Config) -> dict[str, Any]:
    """The figures as the old ``collect_status`` computed them, from every waiting task's row in Python."""
    with engine.connect() as conn:
        waiting = conn.execute(select(TI.c.shardcode, TI.c.hashcode).where(TI.c.state.in_(State.SMART_WAITING))).all()
    tasks: dict[int, int] = defaultdict(int)
    hashes: dict[int, set[int | None]] = defaultdict(set)
    ranges = cfg.resolved_shard_ranges
    for shardcode, hashcode in waiting:
        for i, r in enumerate(ranges):
            if shardcode is not None and r.contains(shardcode):
                tasks[i] += 1
                hashes[i].add(hashcode)
                break
    distinct = len({h for _, h in waiting})
    return {
        "waiting": len(waiting),
        "distinct_hashes": distinct,
        "dedup_ratio": round(len(waiting) / distinct, 2) if distinct else None,
        "shards": [
            {"min": r.lo, "max": r.hi, "waiting": tasks[i], "distinct_hashes": len(hashes[i])}
            for i, r in enumerate(ranges)
        ],
    }


def count_rows(engine: Any, sent: list[tuple[str, Any]]) -> list[int]:
    """The rows each (statement, parameters) returns, run again on a raw DBAPI connection (they only read)."""
    raw = engine.raw_connection()
    try:
        out = []
        for statement, parameters in sent:
            cursor = raw.cursor()
            cursor.execute(statement, parameters)
            out.append(len(cursor.fetchall()))
            cursor.close()
        return out
    finally:
        raw.close()


def test_status_fetches_a_row_per_range_not_per_waiting_task(cfg, engine) -> None:
    populate(engine, cfg.shard_code_upper_limit)
    sent: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        if cursor.description is not None:  # it returns rows
            sent.append((statement, parameters))

    event.listen(engine, "after_cursor_execute", record)
    try:
        data = collect_status(SqlStatusReads(engine), cfg, T0).as_json()
    finally:
        event.remove(engine, "after_cursor_execute", record)
    fetched = count_rows(engine, sent)
    assert len(fetched) == 9
    # A statement returns a row per range (+2) or per state at most: 8; in all a few dozen, not 5,000.
    assert max(fetched) <= len(State.ALL) and sum(fetched) <= 3 * len(State.ALL), fetched
    assert {k: data[k] for k in ("waiting", "distinct_hashes", "dedup_ratio", "shards")} == python_figures(engine, cfg)
    assert data["waiting"] == WAITING and 0 < data["stranded"] < 10
    assert data["distinct_hashes"] < sum(s["distinct_hashes"] for s in data["shards"])  # hashes in several ranges


def test_waiting_by_range_with_no_waiting_task_no_range_one_range_null_shardcodes(cfg, engine) -> None:
    with engine.connect() as conn:
        assert status_sql.waiting_by_range(conn, [(0, 10), (10, 20)]) == (0, 0, {})
    populate(engine, cfg.shard_code_upper_limit, null_shardcodes=True)
    with engine.connect() as conn:
        everything = status_sql.waiting_by_range(conn, [(0, cfg.shard_code_upper_limit)])
        none = status_sql.waiting_by_range(conn, [])
    figures = python_figures(engine, cfg)
    assert (everything.tasks, everything.hashes) == (none.tasks, none.hashes) == (WAITING, figures["distinct_hashes"])
    assert none.per_range == {} and everything.per_range[0][0] == sum(s["waiting"] for s in figures["shards"])
    assert collect_status(SqlStatusReads(engine), cfg, T0).as_json()["shards"] == figures["shards"]


def test_a_range_rounds_last_round_is_keyed_by_its_range_rounds_id_and_by_the_deprecated_worker_id(cfg, engine) -> None:
    """worker_round's key is a range rounds' id (one worker serving one range); the JSON carries it under
    ``range_rounds_id`` and, deprecated, ``worker_id`` (its name until 0.3.0)."""
    from smartsensor.adapters.sql.round_store import SqlRoundStore
    from smartsensor.service.round.range_rounds import RangeRounds
    from smartsensor.service.round.report import RoundResult

    served = RangeRounds(SqlRoundStore(engine), cfg, 0, 10, clock=lambda: T0, range_rounds_id="w1:0-10")
    served.record(RoundResult(shard_min=0, shard_max=10, seconds=0.5))
    (row,) = collect_status(SqlStatusReads(engine), cfg, T0).as_json()["workers"]
    assert row["range_rounds_id"] == row["worker_id"] == "w1:0-10"
    assert (row["shard_min"], row["shard_max"], row["last_round_seconds"]) == (0, 10, 0.5)
    served.forget()
    assert collect_status(SqlStatusReads(engine), cfg, T0).as_json()["workers"] == []
