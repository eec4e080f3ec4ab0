"""Retention (``smartsensor db prune``, ``serve``'s retention job) on SQLite and PostgreSQL: old ended task instances
and their Airflow keys go, never a waiting task nor one sent back to wait between the window's read and the delete,
in batches of a bounded size, safely beside another pruner and a worker round; the outbox loses the settled rows of
tables no longer watched and of partitions gone from the catalog, never an undelivered one, and a landing pruned is
not published again."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Iterator

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, event, insert, select

from smartsensor.adapters.periodic import PeriodicJobs
from smartsensor.adapters.sql import retention as retention_sql, tasks as task_sql
from smartsensor.adapters.sql.engine import init_db, make_engine
from smartsensor.adapters.sql.external import SqlExternalTryStore
from smartsensor.adapters.sql.landings import SqlOutboxStore
from smartsensor.adapters.sql.round_store import SqlRoundStore
from smartsensor.adapters.sql.status_store import SqlExpiredRows, SqlStatusReads
from smartsensor.cli import main
from smartsensor.domain import clock as wall_clock
from smartsensor.domain.keys import ExternalKey, TaskKey
from smartsensor.domain.landings import BASELINE, DELIVERED, PENDING
from smartsensor.domain.states import State
from smartsensor.external.states import Asked, external_states
from smartsensor.schema.models import (
    asset_watch as AW,
    external_task as EX,
    shard_lease as SL,
    task_instance as TI,
    worker as WK,
    worker_round as WR,
)
from smartsensor.service.landings import LandingPublisher
from smartsensor.service.retention import RetentionJob, prune
from smartsensor.service.round.range_rounds import RangeRounds, run_round
from smartsensor.service.status import collect_landings
from tests.integration.test_external import reg
from tests.integration.test_landings import AirflowDouble, landings_cfg, listing, outbox
from tests.support.catalog_doubles import Clock, DictCatalog
from tests.support.common import SHARD_LIMIT, T0, make_cfg

MONTH = timedelta(days=30)


def old_ended(engine: Engine, n: int, ended_at: datetime, dag_id: str = "old", state: str = State.SUCCESS) -> None:
    """``n`` task instances that ended at ``ended_at``, each with the Airflow key of its try."""
    rows = [
        {
            "dag_id": dag_id,
            "task_id": f"t{i:05d}",
            "execution_date": ended_at - timedelta(hours=1),
            "state": state,
            "try_number": 1,
            "max_tries": 0,
            "start_date": ended_at - timedelta(hours=1),
            "end_date": ended_at,
            "updated_at": ended_at,
            "hashcode": i,
            "shardcode": i % 10,
        }
        for i in range(n)
    ]
    keys = [
        {
            "dag_id": dag_id,
            "task_id": r["task_id"],
            "run_id": "scheduled__old",
            "map_index": -1,
            "try_number": 1,
            "ti_task_id": r["task_id"],
            "ti_execution_date": r["execution_date"],
            "registered_at": r["execution_date"],
        }
        for r in rows
    ]
    with engine.begin() as conn:
        conn.execute(insert(TI), rows)
        conn.execute(insert(EX), keys)


def task_states(engine: Engine) -> dict[str, str]:
    with engine.connect() as conn:
        return {f"{d}.{t}": s for d, t, s in conn.execute(select(TI.c.dag_id, TI.c.task_id, TI.c.state))}


def keys(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return {f"{d}.{t}" for d, t in conn.execute(select(EX.c.dag_id, EX.c.task_id))}


def test_old_ended_tries_and_their_keys_go_never_a_waiting_task(cfg: Any, engine: Engine) -> None:
    """Registered tries: two that ended, one superseded by a newer try, one waiting, one up for retry; a month and
    a day later the ended ones and their keys go, a states poll for them answers unknown, and the waiting, the
    retrying and the newest try stay. A day short of the age, nothing goes."""
    now = wall_clock.now()
    done, failed, waiting, retry = (ExternalKey("etl", t, "r1") for t in ("done", "failed", "waiting", "retry"))
    ended = {k: reg(engine, cfg, k).task_instance for k in (done, failed, retry)}
    reg(engine, cfg, waiting)
    superseded = ExternalKey("etl", "superseded", "r1")
    first = reg(engine, cfg, superseded, try_number=1).task_instance
    newest = reg(engine, cfg, superseded, try_number=2).task_instance  # the first try is skipped
    with engine.begin() as conn:
        task_sql.set_state(conn, ended[done], State.SUCCESS, now=now)
        task_sql.set_state(conn, ended[failed], State.FAILED, now=now)
        task_sql.set_state(conn, ended[retry], State.UP_FOR_RETRY, now=now)
    before = task_states(engine)
    early = prune(SqlExpiredRows(engine), MONTH, 2, now=now + MONTH - timedelta(days=1))
    assert early.rows == 0 and task_states(engine) == before
    report = prune(SqlExpiredRows(engine), MONTH, 2, now=now + MONTH + timedelta(days=1))
    assert (report.tables["task_instance"].rows, report.tables["external_task"].rows) == (3, 2)
    assert report.complete and not report.dry_run
    left = task_states(engine)
    assert sorted(left.values()) == [State.SMART_PENDING, State.SMART_PENDING, State.UP_FOR_RETRY]
    with engine.connect() as conn:
        assert task_sql.get_task(conn, *first) is None and task_sql.get_task(conn, *newest) is not None
    assert keys(engine) == {"etl.waiting", "etl.retry", "etl.superseded"}
    answers = external_states(SqlExternalTryStore(engine), [Asked(done, 1), Asked(superseded, 2)])
    assert [a["state"] for a in answers] == ["unknown", State.SMART_PENDING]


def test_a_task_sent_back_to_wait_after_the_window_was_read_is_kept(engine: Engine) -> None:
    """The delete repeats the state: a user's set-state between the window's read and the delete wins."""
    now = wall_clock.now()
    old_ended(engine, 3, now - 2 * MONTH)
    cutoff = now - MONTH
    with engine.begin() as conn:
        end = retention_sql.window_end(conn, retention_sql.TI_KEY, None, 10)
    assert end is None  # fewer than 10 rows: one window to the end
    key = TaskKey("old", "t00001", now - 2 * MONTH - timedelta(hours=1))
    assert task_sql.set_state_by_hand(engine, key, State.SMART_PENDING)
    with engine.begin() as conn:
        assert retention_sql.ended_tasks(conn, None, end, cutoff, dry_run=False) == 2
    assert task_states(engine) == {"old.t00001": State.SMART_PENDING}


@pytest.fixture
def deletes(engine: Engine) -> Iterator[list[tuple[str, int]]]:
    """Every DELETE the engine sends, with the rows it deleted."""
    seen: list[tuple[str, int]] = []

    def after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("DELETE"):
            seen.append((statement.split()[2].strip('"'), cursor.rowcount))

    event.listen(engine, "after_cursor_execute", after)
    yield seen
    event.remove(engine, "after_cursor_execute", after)


def test_each_statement_deletes_a_batch_at_most(engine: Engine, deletes: list[tuple[str, int]]) -> None:
    """25 old tries and 5 recent ones, batches of 10: every DELETE takes 10 rows at most, 4 windows per table (the
    fourth, after the 30th key, empty), and a dry run before counts the same and deletes nothing."""
    now = wall_clock.now()
    old_ended(engine, 25, now - 2 * MONTH)
    old_ended(engine, 5, now - timedelta(days=1), dag_id="recent")
    dry = prune(SqlExpiredRows(engine), MONTH, 10, dry_run=True, now=now)
    assert (dry.tables["task_instance"].rows, dry.tables["external_task"].rows) == (25, 25) and deletes == []
    report = prune(SqlExpiredRows(engine), MONTH, 10, now=now)
    assert (report.tables["task_instance"].rows, report.tables["external_task"].rows) == (25, 25)
    assert [rows for table, rows in deletes if table == "task_instance"] == [10, 10, 5, 0]
    assert [rows for table, rows in deletes if table == "external_task"] == [10, 10, 5, 0]
    assert report.tables["task_instance"].statements == 8  # a window's end and its delete, 4 times
    assert set(task_states(engine)) == {f"recent.t{i:05d}" for i in range(5)}


def test_two_pruners_beside_a_worker_round_delete_each_row_once(cfg: Any, engine: Engine) -> None:
    """Two pruners at once while a worker round ends the waiting tasks: no error, each old row deleted once between
    them, every task the round ended kept."""
    now = wall_clock.now()
    old_ended(engine, 600, now - 2 * MONTH)
    waiting = [ExternalKey("etl", f"w{i}", "r1") for i in range(20)]
    for key in waiting:
        reg(engine, cfg, key)
    catalog = DictCatalog()
    catalog.land("db.events/ds=2026-11-22")
    worker = RangeRounds(SqlRoundStore(engine), cfg, 0, cfg.shard_code_upper_limit)
    reports: list[Any] = []
    errors: list[BaseException] = []
    start = threading.Barrier(3)

    def pruner() -> None:
        start.wait()
        try:
            reports.append(prune(SqlExpiredRows(engine), MONTH, 100, now=now))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=pruner) for _ in range(2)]
    for thread in threads:
        thread.start()
    start.wait()
    result = run_round([worker], lambda: catalog)
    for thread in threads:
        thread.join(timeout=120)
    assert errors == [] and result.error is None and result.marked == {State.SUCCESS: 20}
    assert sum(r.tables["task_instance"].rows for r in reports) == 600
    assert sum(r.tables["external_task"].rows for r in reports) == 600
    assert task_states(engine) == {f"etl.w{i}": State.SUCCESS for i in range(20)}


def test_idle_worker_rounds_go(engine: Engine) -> None:
    now = wall_clock.now()
    with engine.begin() as conn:
        for name, at in (("gone:0-5", now - 2 * MONTH), ("live:0-5", now)):
            conn.execute(insert(WR).values(range_rounds_id=name, shard_min=0, shard_max=5, last_round_at=at))
    assert prune(SqlExpiredRows(engine), MONTH, 100, now=now).tables["worker_round"].rows == 1
    with engine.connect() as conn:
        assert list(conn.execute(select(WR.c.range_rounds_id)).scalars()) == ["live:0-5"]


def test_a_worker_killed_long_ago_goes_unless_it_owns_a_lease(engine: Engine) -> None:
    """A worker killed (no clean stop deleted its row) stops being listed once its last heartbeat is past the age;
    a live one, one that still owns a lease (its epoch fences it, whatever its age) and one never heard from lately
    stay."""
    now = wall_clock.now()
    long_ago = now - 2 * MONTH
    with engine.begin() as conn:
        for worker_id, heartbeat in (("killed", long_ago), ("live", now), ("owner", long_ago), ("never", None)):
            started = long_ago if worker_id != "never" else now
            conn.execute(insert(WK).values(worker_id=worker_id, started_at=started, heartbeat_at=heartbeat))
        conn.execute(insert(SL).values(shard_min=0, shard_max=5, owner="owner", epoch=3))
    assert prune(SqlExpiredRows(engine), MONTH, 100, now=now, dry_run=True).tables["worker"].rows == 1
    assert prune(SqlExpiredRows(engine), MONTH, 100, now=now).tables["worker"].rows == 1
    with engine.connect() as conn:
        assert sorted(conn.execute(select(WK.c.worker_id)).scalars()) == ["live", "never", "owner"]


def test_db_prune_prints_what_it_deleted_per_table(cfg: Any, engine: Engine) -> None:
    old_ended(engine, 3, wall_clock.now() - timedelta(days=10))
    env = {"SMARTSENSOR_HOME": str(cfg.home), "SMARTSENSOR__CORE__SQL_ALCHEMY_CONN": cfg.sql_alchemy_conn}

    def db_prune(*args: str) -> str:
        result = CliRunner().invoke(main, ["db", "prune", *args], env=env)
        assert result.exit_code == 0, result.output
        return result.output

    assert "task_instance   would delete          3 rows" in db_prune("--older-than", "7", "--dry-run")
    assert len(task_states(engine)) == 3
    assert "task_instance   deleted          0 rows" in db_prune()  # [retention] max_age_days: 30
    assert "external_task   deleted          3 rows" in db_prune("--older-than", "7")
    assert task_states(engine) == {}


# -- the landings outbox -----------------------------------------------------------------------------------


class Landings:
    """One worker's publisher over tables db.a and db.b, the test's clock, Airflow and catalog; ``restart`` makes a
    fresh publisher (nothing cached: it reads the outbox anew)."""

    def __init__(self, tmp_path: Path, db_url: str, **overrides: str) -> None:
        self.cfg = landings_cfg(tmp_path, db_url, **overrides)
        self.engine = make_engine(db_url)
        init_db(self.engine)
        self.clock = Clock(T0)
        self.airflow = AirflowDouble()
        self.catalog: dict[str, list[str]] = {"db.a": ["ds=0"], "db.b": ["ds=0"]}
        self.ranges = [(0, self.cfg.shard_code_upper_limit)]
        self.restart()

    def restart(self) -> None:
        self.publisher = LandingPublisher(
            SqlOutboxStore(self.engine), self.cfg, self.airflow, listing(self.catalog), "w1", clock=self.clock
        )

    def cycle(self) -> Any:
        return self.publisher.cycle(self.ranges)

    def days(self, n: int) -> None:
        """``n`` days pass, a cycle each day (Airflow's assets read every time)."""
        for _ in range(n):
            self.clock.advance(24 * 3600)
            self.cycle()

    def rows(self) -> dict[tuple[str, str], str]:
        return {(r["uri"].rsplit("/", 1)[1], r["partition_name"]): r["state"] for r in outbox(self.engine)}


@pytest.fixture
def landings(tmp_path: Path, db_url: str) -> Iterator[Landings]:
    world = Landings(tmp_path, db_url)
    try:
        yield world
    finally:
        world.engine.dispose()


def test_a_table_no_longer_watched_loses_its_landings_and_they_are_not_published_again(landings: Landings) -> None:
    """db.b's landing is delivered, then no DAG is scheduled on it for a month: its settled rows and its watch go.
    Scheduled on again, with the old partition still there, it is a new watch: the partition is its baseline, not
    an event. db.a, listed all along, keeps its rows."""
    world = landings
    assert world.cycle().baseline == 2
    world.catalog["db.a"].append("ds=1")
    world.catalog["db.b"].append("ds=1")
    assert world.cycle().delivered == 2
    del world.airflow.consumed["db.b"]
    world.days(31)
    report = prune(SqlExpiredRows(world.engine), MONTH, 100, now=world.clock())
    assert (report.tables["landing_outbox"].rows, report.tables["asset_watch"].rows) == (2, 1)
    assert world.rows() == {("a", "ds=0"): BASELINE, ("a", "ds=1"): DELIVERED}
    world.airflow.consumed["db.b"] = 2
    for publisher in ("running", "restarted"):
        if publisher == "restarted":
            world.restart()
        world.clock.advance(60)
        world.cycle()
        world.cycle()
    assert world.airflow.events == Counter({(1, "1"): 1, (2, "1"): 1})  # each landing once, the first time
    assert world.rows()[("b", "ds=1")] == BASELINE
    world.catalog["db.b"].append("ds=2")
    assert world.cycle().delivered == 1 and world.airflow.events[(2, "2")] == 1


def test_publish_existing_publishes_a_tables_history_once_however_often_it_is_forgotten(
    tmp_path: Path, db_url: str
) -> None:
    """Issue 67, defect 6: with ``publish_existing``, a table's first watch publishes the partitions already there;
    forgotten by retention (nobody scheduled on it for a month) and watched again, its history is its baseline, not
    a second event each. The forgotten watch keeps its row, counted as not watched until Airflow lists it again."""
    world = Landings(tmp_path, db_url, landings__publish_existing="true")
    try:
        assert world.cycle().delivered == 2  # ds=0 of each table, published once
        del world.airflow.consumed["db.b"]
        world.days(31)
        report = prune(SqlExpiredRows(world.engine), MONTH, 100, now=world.clock())
        assert (report.tables["landing_outbox"].rows, report.tables["asset_watch"].rows) == (1, 1)
        assert collect_landings(SqlStatusReads(world.engine), world.clock(), SHARD_LIMIT).watched_tables == 1
        again = prune(SqlExpiredRows(world.engine), MONTH, 100, now=world.clock())
        assert (again.tables["landing_outbox"].rows, again.tables["asset_watch"].rows) == (0, 0)  # once
        world.airflow.consumed["db.b"] = 2
        world.catalog["db.b"].append("ds=1")  # landed while nobody watched: history too
        for _ in range(3):
            world.clock.advance(60)
            world.cycle()
        assert world.airflow.events == Counter({(1, "0"): 1, (2, "0"): 1})
        assert world.rows()[("b", "ds=0")] == BASELINE and world.rows()[("b", "ds=1")] == BASELINE
        assert collect_landings(SqlStatusReads(world.engine), world.clock(), SHARD_LIMIT).watched_tables == 2
        world.catalog["db.b"].append("ds=2")
        assert world.cycle().delivered == 1
    finally:
        world.engine.dispose()


def test_an_undelivered_landing_keeps_its_row_and_its_watch(landings: Landings) -> None:
    world = landings
    world.cycle()
    world.airflow.mode = "down"
    world.catalog["db.b"].append("ds=1")
    world.cycle()
    del world.airflow.consumed["db.b"]
    world.days(31)
    report = prune(SqlExpiredRows(world.engine), MONTH, 100, now=world.clock())
    assert (report.tables["landing_outbox"].rows, report.tables["asset_watch"].rows) == (1, 0)  # its baseline
    assert world.rows()[("b", "ds=1")] == PENDING
    with world.engine.connect() as conn:
        assert "hive://meta:10000/db/b" in set(conn.execute(select(AW.c.uri)).scalars())


@pytest.mark.parametrize("forget", [True, False], ids=["by default", "forget_dropped_landings off"])
def test_a_landing_is_forgotten_only_once_its_partition_was_missing_max_age_days_in_a_row(
    tmp_path: Path, db_url: str, forget: bool
) -> None:
    """A month after ds=1 and ds=2 were delivered, a listing lacks ds=1 for a day (a replica that lagged): back, it
    starts no second run, and its old landing is not forgotten for its age. Then ds=1 is dropped for good: after
    ``max_age_days`` missing in a row (by default) the publisher deletes its row, and neither it nor a restarted
    publisher publishes ds=1 again while the table lacks it; ds=2, still there, keeps its row; made anew, ds=1 is a
    new landing. With ``forget_dropped_landings`` off the row stays and ds=1 made anew starts nothing."""
    world = Landings(tmp_path, db_url, retention__forget_dropped_landings=str(forget).lower())
    try:
        world.cycle()
        world.catalog["db.a"] += ["ds=1", "ds=2"]
        assert world.cycle().delivered == 2
        world.days(31)
        world.catalog["db.a"].remove("ds=1")  # the replica lags for a day
        world.days(1)
        world.catalog["db.a"].append("ds=1")
        world.days(1)
        assert world.airflow.events == Counter({(1, "1"): 1, (1, "2"): 1})
        world.catalog["db.a"].remove("ds=1")  # dropped for good
        world.days(29)  # the first listing that lacks it is a day later: missing 28 days
        assert ("a", "ds=1") in world.rows()
        world.days(3)
        assert (("a", "ds=1") in world.rows()) is not forget and world.rows()[("a", "ds=2")] == DELIVERED
        world.restart()
        world.cycle()
        assert world.airflow.events == Counter({(1, "1"): 1, (1, "2"): 1})
        world.catalog["db.a"].append("ds=1")  # made anew: a landing only once its row was forgotten
        assert world.cycle().delivered == (1 if forget else 0)
        assert world.airflow.events[(1, "1")] == (2 if forget else 1)
    finally:
        world.engine.dispose()


def test_an_undelivered_landing_of_a_partition_gone_for_good_is_still_published(tmp_path: Path, db_url: str) -> None:
    """ds=1 lands while Airflow is down and is dropped at once; Airflow stays down past ``max_age_days``: its row is
    pending, so it is not forgotten, and it is posted once Airflow is back."""
    world = Landings(tmp_path, db_url)
    try:
        world.cycle()
        world.airflow.mode = "down"
        world.catalog["db.a"].append("ds=1")
        world.cycle()
        world.catalog["db.a"].remove("ds=1")
        world.days(35)
        assert world.rows()[("a", "ds=1")] == PENDING
        world.airflow.mode = "ok"
        world.clock.advance(3600)
        assert world.cycle().delivered == 1 and world.airflow.events == Counter({(1, "1"): 1})
    finally:
        world.engine.dispose()


def test_serve_prunes_on_its_schedule(cfg: Any, engine: Engine, tmp_path: Path) -> None:
    """``RetentionJob`` prunes with the ``[retention]`` settings, on serve's jobs (hourly) unless disabled; a database
    failure is logged, never raised."""
    old_ended(engine, 4, wall_clock.now() - 2 * MONTH)
    job = RetentionJob(SqlExpiredRows(engine), cfg)
    scheduled, off = PeriodicJobs("serve"), PeriodicJobs("serve")
    job.schedule(scheduled)
    RetentionJob(
        SqlExpiredRows(engine), make_cfg(tmp_path / "off", cfg.sql_alchemy_conn, retention__enabled="false")
    ).schedule(off)
    assert (scheduled.jobs(), off.jobs()) == ({"retention": 3600.0}, {})
    report = job.tick()
    assert report is not None and report.tables["task_instance"].rows == 4 and task_states(engine) == {}
    unmigrated = make_engine(f"sqlite:///{tmp_path / 'empty.db'}")
    try:
        assert RetentionJob(SqlExpiredRows(unmigrated), cfg).tick() is None  # no such table: logged
    finally:
        unmigrated.dispose()
