"""Reconciliation and a transaction that commits long after the ``updated_at`` it stamped (issue 42's third risk):
a set-state by hand held open in a session, or a `db reshard` over a million rows, stamps its rows when it starts
and commits later. A reconciliation reads rows changed since the previous one less ``reconcile_lookback``, so such
a row used to be missed until the next index rebuild (``index_rebuild_interval``, 600 s). On PostgreSQL a
reconciliation now reads from when the oldest transaction then open began, so the row is read by the first
reconciliation after it commits."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from sqlalchemy import update

from smartsensor.adapters.sql import tasks as task_sql
from smartsensor.adapters.sql.engine import init_db, make_engine
from smartsensor.adapters.sql.round_store import SqlRoundStore
from smartsensor.domain.states import State
from smartsensor.schema.models import task_instance as TI
from smartsensor.service.round.range_rounds import RangeRounds, run_round
from smartsensor.standalone.registration import build_row
from tests.support.catalog_doubles import DictCatalog
from tests.support.common import DAY, make_cfg, named, wait_until
from tests.support.pg import needs_test_pg

LOOKBACK = 0.5  # seconds: [smart_sensor] reconcile_lookback, short so that the transaction outlasts it soon


def utcnow() -> datetime:
    return datetime.now(timezone.utc)  # the clock updated_at is stamped in (aware UTC), as the workers' own


@needs_test_pg
def test_a_transaction_committing_long_after_its_stamp_is_read_by_the_next_reconciliation(
    pg_url: str, tmp_path: Path
) -> None:
    cfg = make_cfg(
        tmp_path, pg_url, smart_sensor__reconcile_lookback=str(LOOKBACK), smart_sensor__reconcile_interval="0.05"
    )
    engine = make_engine(cfg.sql_alchemy_conn)
    init_db(engine)
    try:
        waiting, _ = build_row(named("waiting", "db.t/ds=1"), "waits", DAY, cfg)
        built, _ = build_row(named("by_hand", "db.t/ds=2"), "by_hand", DAY, cfg)
        by_hand = built._replace(state=State.FAILED)  # not waiting: the index starts without it
        with engine.begin() as conn:
            task_sql.insert_tasks_bulk(conn, [waiting, by_hand])
        worker = RangeRounds(
            SqlRoundStore(engine), cfg, 0, cfg.shard_code_upper_limit, clock=utcnow, record_rounds=False
        )
        run_round([worker], lambda: DictCatalog())
        assert worker.index.tasks == 1

        # Someone sets by_hand waiting again, in a transaction that stays open for several lookbacks.
        stamp = utcnow()
        held = engine.connect()
        transaction = held.begin()
        held.execute(
            update(TI)
            .where(TI.c.dag_id == "by_hand")
            .values(state=State.SMART_RUNNING, start_date=stamp, updated_at=stamp, hostname=None)
        )
        reconciled_while_open = []

        def outlasted() -> bool:
            reconciled_while_open.append(worker.reconcile().reconciled)
            return utcnow() - stamp > timedelta(seconds=4 * LOOKBACK) and len(reconciled_while_open) >= 3

        wait_until(outlasted, timeout=60)
        assert set(reconciled_while_open) == {0}  # not committed: nothing to read yet
        transaction.commit()
        held.close()
        assert worker.reconcile().reconciled == 1  # read, though stamped long before the last reconciliations
        assert worker.index.tasks == 2
    finally:
        engine.dispose()
