"""The in-memory store keeps the SQL store's rules: the same scripted rounds end in the same states.

The script covers every kind of write a round makes (landed by hash, landed by exact check after a
hash collision, a permanent error, timeouts to each end state, a row that cannot be planned), a
user's manual change between load and write, and a lost lease.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any, Callable

from sqlalchemy import insert, select, update

from smartsensor.adapters.memory import InMemoryStore
from smartsensor.adapters.sql import tasks as task_sql
from smartsensor.adapters.sql.round_store import SqlRoundStore
from smartsensor.domain.keys import Fence, TaskKey
from smartsensor.domain.rows import TaskRow
from smartsensor.schema.models import shard_lease as SL, task_instance as TI
from smartsensor.sensors import NamedHivePartitionSensor
from smartsensor.sensors.errors import PermanentCheckError
from smartsensor.service.round.range_rounds import RangeRounds, run_round
from smartsensor.standalone.registration import build_row
from tests.support.catalog_doubles import Clock, DictCatalog
from tests.support.common import DAY, T0


def rows(cfg: Any) -> list[TaskRow]:
    def named(dag: str, partition: str, **kw: Any) -> TaskRow:
        row, _ = build_row(NamedHivePartitionSensor(task_id="w", partition_names=[partition], **kw), dag, DAY, cfg)
        return row

    out = [
        named("landed1", "db.t/ds=1"),
        named("landed2", "db.t/ds=1"),
        named("gone", "db.gone/ds=1"),
        named("fail", "db.t/ds=never", timeout=30),
        named("soft", "db.t/ds=never", timeout=30, soft_fail=True),
        named("retry", "db.t/ds=never", timeout=30, retries=2),
        named("waits", "db.t/ds=never", timeout=3600),
        named("collide", "db.t/ds=2"),
        named("bad", "db.t/ds=3"),
        named("manual", "db.t/ds=1"),
    ]
    landed1 = out[0]
    return [
        row._replace(hashcode=landed1.hashcode, shardcode=landed1.shardcode)  # a collision
        if row.dag_id == "collide"
        else row._replace(exec_dict=json.dumps({"retry_delay": 1e12}))  # a row that cannot be planned
        if row.dag_id == "bad"
        else row
        for row in out
    ]


def script(
    store: Any, cfg: Any, set_state: Callable[[str, str], None], set_lease: Callable[[str, int, datetime], None]
) -> list[tuple[dict[str, int], bool]]:
    """Rounds on ``store``; returns (marked, fenced_out) of each."""
    clock = Clock(T0)
    catalog = DictCatalog()
    catalog.fail("db.gone/ds=1", PermanentCheckError("db.gone is not partitioned"))
    worker = RangeRounds(store, cfg, 0, cfg.shard_code_upper_limit, clock=clock, record_rounds=False)
    limit = cfg.shard_code_upper_limit
    set_lease("me", 1, T0 + timedelta(hours=1))
    worker.fence = Fence(0, "me", 1)
    seen = []
    seen.append(run_round([worker], lambda: catalog))
    catalog.land("db.t/ds=1")
    clock.advance(60)  # the default poke_interval: every check is due again
    plan = worker.plan_round()
    set_state("manual", "failed")  # by hand, between the load and the write
    from smartsensor.service.round.poke import poke_plans

    poke_plans([plan], lambda: catalog, 60)
    seen.append(worker.finish_round(plan))
    set_lease("other", 2, T0 + timedelta(hours=1))  # taken over
    clock.advance(3600)
    seen.append(run_round([worker], lambda: catalog))
    assert limit > 0
    return [(r.marked, r.fenced_out) for r in seen]


def final_states(pairs: list[tuple[str, str, str | None]]) -> list[tuple[str, str, str | None]]:
    return sorted(pairs)


def test_memory_and_sql_stores_end_in_the_same_states(cfg, engine) -> None:
    rows_ = rows(cfg)
    memory = InMemoryStore(rows_)
    limit = cfg.shard_code_upper_limit
    mem_trace = script(
        memory,
        cfg,
        lambda dag, state: memory.set_state(TaskKey(dag, "w", DAY), state),
        lambda owner, epoch, expires: memory.set_lease(0, limit, owner, epoch, expires),
    )

    with engine.begin() as conn:
        task_sql.insert_tasks_bulk(conn, rows(cfg))
        conn.execute(insert(SL).values(shard_min=0, shard_max=limit, owner=None, epoch=0, expires_at=None))

    def sql_set_state(dag: str, state: str) -> None:
        with engine.begin() as conn:
            task_sql.set_state(conn, TaskKey(dag, "w", DAY), state)

    def sql_set_lease(owner: str, epoch: int, expires: datetime) -> None:
        with engine.begin() as conn:
            conn.execute(update(SL).where(SL.c.shard_min == 0).values(owner=owner, epoch=epoch, expires_at=expires))

    sql_trace = script(SqlRoundStore(engine), cfg, sql_set_state, sql_set_lease)
    assert sql_trace == mem_trace, (sql_trace, mem_trace)
    assert mem_trace[0] == ({"failed": 2}, False)  # db.gone (permanent), the row that cannot be planned
    assert mem_trace[1] == ({"success": 2, "failed": 1, "skipped": 1, "up_for_retry": 1}, False)  # manual kept
    assert mem_trace[2] == ({}, True)
    with engine.connect() as conn:
        sql_rows = [(r.dag_id, r.state, r.error) for r in conn.execute(select(TI.c.dag_id, TI.c.state, TI.c.error))]
    mem_rows = [(r.dag_id, r.state, r.error) for r in memory.tasks.values()]
    assert final_states(sql_rows) == final_states(mem_rows)
