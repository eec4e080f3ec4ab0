"""The round's index agrees with the database on SQL stores (issue 30): the defects that live in SQL, and rows
the current version would not write (older versions, hand-written rows), treated alike by every store."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

from sqlalchemy import event, insert, select

from smartsensor.adapters.memory import InMemoryStore
from smartsensor.adapters.sql import tasks as task_sql
from smartsensor.adapters.sql.engine import init_db, make_engine
from smartsensor.adapters.sql.round_store import SqlRoundStore
from smartsensor.domain.keys import Cohort, TaskKey
from smartsensor.domain.rows import TaskRow
from smartsensor.domain.states import State
from smartsensor.domain.transitions import RoundWrites
from smartsensor.schema.models import task_instance as TI
from smartsensor.service.round.range_rounds import RangeRounds, run_round
from smartsensor.standalone.registration import build_row
from tests.support.catalog_doubles import Clock, DictCatalog
from tests.support.common import DAY, T0, make_cfg, named


def row_for(cfg: Any, dag: str, partition: str, **kw: Any) -> TaskRow:
    row, _ = build_row(named("w", partition, **kw), dag, DAY, cfg)
    return row._replace(updated_at=T0)


def sql_rows(engine: Any) -> dict[str, tuple[Any, ...]]:
    with engine.connect() as conn:
        return {r.dag_id: (r.state, r.error) for r in conn.execute(select(TI.c.dag_id, TI.c.state, TI.c.error))}


def worker(store: Any, cfg: Any, clock: Clock) -> RangeRounds:
    return RangeRounds(store, cfg, 0, cfg.shard_code_upper_limit, clock=clock, record_rounds=False)


def odd_rows(cfg: Any) -> list[TaskRow]:
    """Rows of older versions or written by hand, each on its own check."""
    legacy = row_for(cfg, "legacy_0_1", "db.t/ds=legacy")
    legacy = legacy._replace(classpath="sensors.hive.NamedHivePartitionSensor")  # 0.1 stored it under `sensors`
    rows = {
        "null_exec": row_for(cfg, "null_exec", "db.t/ds=never")._replace(exec_dict=None),  # type: ignore[arg-type]  # NULL, as older versions wrote
        "null_start": row_for(cfg, "null_start", "db.t/ds=landed")._replace(state=State.SMART_RUNNING, start_date=None),
        "null_attr": row_for(cfg, "null_attr", "db.t/ds=attr")._replace(attr_dict=None),  # type: ignore[arg-type]  # NULL, written by hand
        "unknown_exec_keys": row_for(cfg, "unknown_exec_keys", "db.t/ds=unknown")._replace(
            exec_dict=json.dumps({"poke_interval": 1, "timeout": 30, "queue": "x", "pool_slots": 3})
        ),
        "null_updated_at": row_for(cfg, "null_updated_at", "db.t/ds=landed")._replace(updated_at=None),
        "legacy_0_1": legacy,
    }
    return list(rows.values())


def odd_script(store: Any, cfg: Any) -> list[dict[str, int]]:
    """Rounds over the odd rows: a rebuild, a landing, then every time limit passed."""
    clock, catalog = Clock(T0), DictCatalog()
    w = worker(store, cfg, clock)
    marked = [run_round([w], lambda: catalog).marked]
    catalog.land("db.t/ds=landed")
    catalog.land("db.t/ds=legacy")
    clock.advance(60)
    marked.append(run_round([w], lambda: catalog).marked)
    clock.advance(7 * 24 * 3600)  # the default timeout: the row without exec settings ends too
    marked.append(run_round([w], lambda: catalog).marked)
    return marked


def test_odd_rows_end_alike_in_every_store_and_none_waits_forever(cfg, engine) -> None:
    memory = InMemoryStore(odd_rows(cfg))
    mem_marked = odd_script(memory, cfg)
    with engine.begin() as conn:
        task_sql.insert_tasks_bulk(conn, odd_rows(cfg))
    assert odd_script(SqlRoundStore(engine), cfg) == mem_marked
    final = sql_rows(engine)
    assert final == {r.dag_id: (r.state, r.error) for r in memory.tasks.values()}
    assert {dag: state for dag, (state, _) in final.items()} == {
        "null_exec": State.FAILED,  # timed out after the default 7 days (NULL compared as '' on SQL too)
        "null_start": State.SUCCESS,  # the rebuild gave it a start
        "null_attr": State.FAILED,  # cannot be rebuilt: a clear error, not a silent wait
        "unknown_exec_keys": State.FAILED,  # unknown keys ignored: its own 30 s timeout applied
        "null_updated_at": State.SUCCESS,
        "legacy_0_1": State.SUCCESS,
    }
    assert "attr_dict" in (final["null_attr"][1] or "")
    assert mem_marked[2] == {State.FAILED: 1}  # only the NULL exec_dict row was left for the 7-day timeout


def test_set_state_smart_running_by_hand_reaches_the_index_on_sql(cfg, engine, clock) -> None:
    """Defect 2 on SQL: the task never started; set-state stamps its start; the next reconciliation finds it."""
    catalog = DictCatalog()
    with engine.begin() as conn:
        task_sql.insert_tasks_bulk(conn, [row_for(cfg, "other", "db.t/ds=other"), row_for(cfg, "hand", "db.t/ds=1")])
        task_sql.set_state(conn, TaskKey("hand", "w", DAY), State.FAILED)
    w = worker(SqlRoundStore(engine), cfg, clock)
    run_round([w], lambda: catalog)
    with engine.begin() as conn:
        task_sql.set_state(conn, TaskKey("hand", "w", DAY), State.SMART_RUNNING, now=clock())
        assert task_sql.get_task(conn, "hand", "w", DAY).start_date == clock()
    catalog.land("db.t/ds=1")
    clock.advance(cfg.get("smart_sensor", "reconcile_interval"))
    result = run_round([w], lambda: catalog)
    assert (result.reconciled, result.marked) == (1, {State.SUCCESS: 1})


def test_mark_vigil_stays_in_its_shard_range(cfg, engine) -> None:
    """Defect 9: a collided vigil is marked only in the range that writes it (a row moved by `db reshard` is the
    new owner's)."""
    row = row_for(cfg, "moved", "db.t/ds=1")._replace(state=State.SMART_RUNNING, start_date=T0)
    with engine.begin() as conn:
        conn.execute(insert(TI).values(**row.columns()))
        vigil = row.vigil
        lo = row.shardcode + 1
        assert task_sql.mark_vigil(conn, vigil, lo, lo + 10, State.SUCCESS, T0) == 0
        assert task_sql.mark_vigil(conn, vigil, row.shardcode, lo, State.SUCCESS, T0) == 1


def test_two_writers_locking_in_opposite_orders_both_land(tmp_path, pg_url) -> None:
    """Defect 7: two writes of one range (another process's over a range being reshaped; within a process they
    take turns) lock the same rows in opposite orders. PostgreSQL ends one as a deadlock victim; its write runs
    again instead of failing the round and forcing a full rebuild."""
    cfg = make_cfg(tmp_path, pg_url)
    engine = make_engine(pg_url)
    try:
        init_db(engine)
        a = row_for(cfg, "a", "db.t/ds=a")._replace(state=State.SMART_RUNNING, start_date=T0)
        b = row_for(cfg, "b", "db.t/ds=b")._replace(state=State.SMART_RUNNING, start_date=T0)
        with engine.begin() as conn:
            task_sql.insert_tasks_bulk(conn, [a, b])

        def key(r: TaskRow) -> Any:
            return r.vigil

        def cohort(r: TaskRow) -> Cohort:
            return Cohort(r.exec_dict, r.start_date, r.try_number)  # type: ignore[arg-type]  # started at T0

        # One lands a and times b out; the other lands b and times a out: each locks one row, then wants the other.
        first = RoundWrites(landed_hashes=[a.hashcode], ended={(State.FAILED, "timed out"): [(key(b), cohort(b))]})
        second = RoundWrites(landed_hashes=[b.hashcode], ended={(State.FAILED, "timed out"): [(key(a), cohort(a))]})
        both_locked = threading.Barrier(2, timeout=30)
        seen: dict[int, int] = {}

        @event.listens_for(engine, "after_cursor_execute")
        def hold_after_the_first_update(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            me = threading.get_ident()
            if statement.lstrip().upper().startswith("UPDATE TASK_INSTANCE"):
                seen[me] = seen.get(me, 0) + 1
                if seen[me] == 1:
                    both_locked.wait()  # both now hold one row each and go for the other's

        store = SqlRoundStore(engine)
        limit = cfg.shard_code_upper_limit
        results: dict[str, Any] = {}

        def write(name: str, writes: RoundWrites) -> None:
            try:
                results[name] = store.write_round(0, limit, writes, T0 + timedelta(seconds=1), None)
            except Exception as exc:  # noqa: BLE001 - the assertion below shows it
                results[name] = exc

        threads = [threading.Thread(target=write, args=(n, w)) for n, w in (("first", first), ("second", second))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(isinstance(r, Exception) for r in results.values()), results
        # the one that committed first wins both rows (a landing and a timeout); the rerun then changes nothing
        assert sorted(state for state, _ in sql_rows(engine).values()) == [State.FAILED, State.SUCCESS]
    finally:
        engine.dispose()
