"""Migrations create exactly the models' schema, and `db init` is idempotent, on SQLite and Postgres."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from smartsensor.adapters.sql import engine as engine_module
from smartsensor.adapters.sql.engine import alembic_config, current_revision, init_db, known_revisions, make_engine
from smartsensor.schema.models import metadata
from tests.support.pg import postgres_only


def migrate(engine: Any, step: Any, revision: str) -> None:
    """Alembic's ``step`` (``command.upgrade`` or ``downgrade``) to ``revision``, in one transaction."""
    cfg = alembic_config(engine)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        step(cfg, revision)


def test_migrations_equal_models(db_url: str) -> None:
    engine = make_engine(db_url)
    before, head = init_db(engine)
    assert before is None and head
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), metadata)
    assert diff == []
    indexes = {ix["name"] for ix in inspect(engine).get_indexes("task_instance")}
    assert {"ti_hashcode", "ti_pending_shardcode", "ti_waiting_shardcode", "ti_classic_state"} <= indexes
    assert not {"ti_shardcode", "ti_state_shardcode"} & indexes  # marking a task ended inserts into 2 indexes, not 4
    pk = inspect(engine).get_pk_constraint("task_instance")["constrained_columns"]
    assert pk == ["dag_id", "task_id", "execution_date"]
    engine.dispose()


def test_db_init_is_idempotent(db_url: str) -> None:
    engine = make_engine(db_url)
    _, head = init_db(engine)
    again_before, again_head = init_db(engine)
    assert again_before == head == again_head == current_revision(engine)
    engine.dispose()


def test_the_revisions_read_without_alembic_are_alembics_own(db_url: str) -> None:
    """``known_revisions`` (the scripts' assignments, read without importing them) is Alembic's walk from head, and
    ``current_revision`` (the version table's row) is what Alembic reads, before ``db init``, at every revision up
    and down the line, and at head."""
    from alembic import command
    from alembic.script import ScriptDirectory

    engine = make_engine(db_url)
    walked = tuple(rev.revision for rev in ScriptDirectory.from_config(alembic_config(engine)).walk_revisions())
    assert known_revisions() == walked and len(walked) >= 11

    def alembics() -> str | None:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()

    assert current_revision(engine) is None is alembics()
    for revision in reversed(walked):
        migrate(engine, command.upgrade, revision)
        assert current_revision(engine) == revision == alembics()
    migrate(engine, command.downgrade, walked[-1])
    assert current_revision(engine) == walked[-1] == alembics()
    migrate(engine, command.downgrade, "base")
    assert current_revision(engine) is None is alembics()
    assert init_db(engine) == (None, walked[0])
    engine.dispose()


def test_a_migration_line_that_forks_or_breaks_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two heads, or a script whose down_revision is missing, is an error naming the migrations, not a guess."""
    versions = tmp_path / "versions"
    versions.mkdir()
    monkeypatch.setattr(engine_module, "MIGRATIONS_DIR", tmp_path)

    def scripts(**pairs: str | None) -> None:
        for old in versions.glob("*.py"):
            old.unlink()
        for revision, down in pairs.items():
            (versions / f"{revision}.py").write_text(f"revision = {revision!r}\ndown_revision = {down!r}\n")
        known_revisions.cache_clear()

    try:
        scripts(a=None, b="a", c="b")
        assert known_revisions() == ("c", "b", "a")
        scripts(a=None, b="a", c="a")
        with pytest.raises(RuntimeError, match="2 heads"):
            known_revisions()
        scripts(b="x", c="b")
        with pytest.raises(RuntimeError, match="one line"):
            known_revisions()
    finally:
        known_revisions.cache_clear()


@postgres_only
def test_worker_engine_sets_idle_in_transaction_timeout_and_keeps_url_options(db_url) -> None:
    """Workers' Postgres sessions end a transaction left idle (a paused worker); other engines do not."""
    from sqlalchemy import text

    with_opts = db_url + "?options=-c%20application_name%3Dsmartsensor-test"
    worker = make_engine(with_opts, idle_in_transaction_timeout=2.5)
    plain = make_engine(db_url)
    try:
        with worker.connect() as conn:
            assert conn.execute(text("SHOW idle_in_transaction_session_timeout")).scalar_one() == "2500ms"
            assert conn.execute(text("SHOW application_name")).scalar_one() == "smartsensor-test"
        with plain.connect() as conn:
            assert conn.execute(text("SHOW idle_in_transaction_session_timeout")).scalar_one() == "0"
    finally:
        worker.dispose()
        plain.dispose()


def test_the_round_reads_through_the_partial_indexes(db_url: str) -> None:
    """The change feed (pending → running), an index rebuild and a reconciliation find their rows through the
    partial indexes, so a quiet round is an index probe whatever the number of waiting or ended tasks."""
    from sqlalchemy import event

    from smartsensor.adapters.sql import tasks as task_sql

    engine = make_engine(db_url)
    init_db(engine)
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        seen.append((statement, params))

    event.listen(engine, "before_cursor_execute", record)
    with engine.begin() as conn:
        task_sql.start_pending_cohorts(conn, 0, 10, datetime(2026, 11, 22, tzinfo=timezone.utc), "h")
        task_sql.load_waiting_cohorts(conn, 0, 10)
        task_sql.changed_cohorts(conn, 0, 10, datetime(2026, 11, 22, tzinfo=timezone.utc), "h")
    event.remove(engine, "before_cursor_execute", record)
    plans = []
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")  # an empty table: make the planner show its index
        for stmt, params in seen[-3:]:
            plans.append(
                " ".join(
                    str(r)
                    for r in conn.exec_driver_sql(
                        "EXPLAIN " + ("QUERY PLAN " if engine.dialect.name == "sqlite" else "") + stmt, params
                    ).fetchall()
                )
            )
    assert "ti_pending_shardcode" in plans[0] or "ti_waiting_shardcode" in plans[0], plans[0]  # PG may pick either
    # a rebuild reads the started tasks of a range: by shardcode, or (PostgreSQL, on an empty table) through the
    # partial index of started tasks
    assert "ti_waiting_shardcode" in plans[1] or "ti_running_updated" in plans[1], plans[1]
    assert "ti_running_updated" in plans[2], plans[2]  # a reconciliation: an index range scan of what changed
    engine.dispose()


def test_migration_0007_renames_the_range_rounds_key_and_keeps_the_rows(db_url: str) -> None:
    """0007 renames worker_round.worker_id to range_rounds_id (a range rounds' id, not a worker's), rows kept, and
    its downgrade gives the old name back, rows kept."""
    from alembic import command
    from alembic.script import ScriptDirectory
    from sqlalchemy import text

    engine = make_engine(db_url)

    def columns() -> set[str]:
        return {c["name"] for c in inspect(engine).get_columns("worker_round")}

    migrate(engine, command.upgrade, "0006")
    assert "worker_id" in columns() and "range_rounds_id" not in columns()
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO worker_round (worker_id, shard_min, shard_max) VALUES ('h:1:0-10', 0, 10)"))
    migrate(engine, command.upgrade, "0007")
    assert "range_rounds_id" in columns() and "worker_id" not in columns()
    with engine.connect() as conn:
        assert conn.execute(text("SELECT range_rounds_id, shard_max FROM worker_round")).all() == [("h:1:0-10", 10)]
    assert inspect(engine).get_pk_constraint("worker_round")["constrained_columns"] == ["range_rounds_id"]
    migrate(engine, command.downgrade, "0006")
    assert "worker_id" in columns() and "range_rounds_id" not in columns()
    with engine.connect() as conn:
        assert conn.execute(text("SELECT worker_id FROM worker_round")).scalars().all() == ["h:1:0-10"]
    migrate(engine, command.upgrade, "head")
    assert current_revision(engine) == ScriptDirectory.from_config(alembic_config(engine)).get_current_head()
    engine.dispose()


def test_migration_0008_adds_the_outbox_and_takes_it_away(db_url: str) -> None:
    """0008 adds the landing publisher's tables (asset_watch, landing_outbox and its indexes); its downgrade drops
    them."""
    from alembic import command

    engine = make_engine(db_url)
    migrate(engine, command.upgrade, "0007")
    assert not {"asset_watch", "landing_outbox"} & set(inspect(engine).get_table_names())
    migrate(engine, command.upgrade, "0008")
    assert {"asset_watch", "landing_outbox"} <= set(inspect(engine).get_table_names())
    indexes = {ix["name"]: ix for ix in inspect(engine).get_indexes("landing_outbox")}
    assert indexes["outbox_landing"]["unique"] and "outbox_undelivered" in indexes
    migrate(engine, command.downgrade, "0007")
    assert not {"asset_watch", "landing_outbox"} & set(inspect(engine).get_table_names())
    migrate(engine, command.upgrade, "0008")
    assert current_revision(engine) == "0008"
    engine.dispose()


def test_migration_0009_puts_the_instance_in_the_external_key(db_url: str) -> None:
    """0009 adds external_task.instance ("" for the rows already there) to the primary key, so that two Airflow
    deployments' same key are two rows; its downgrade keeps, of keys that differ only by instance, the newest."""
    from alembic import command
    from sqlalchemy import text

    engine = make_engine(db_url)
    row = (
        "INSERT INTO external_task (dag_id, task_id, run_id, map_index, try_number, ti_task_id, ti_execution_date, "
        "registered_at{extra}) VALUES ('d', 't', 'r', -1, 1, 't', '2026-11-22 00:00:00', '{at}'{value})"
    )
    migrate(engine, command.upgrade, "0008")
    with engine.begin() as conn:
        conn.execute(text(row.format(extra="", at="2026-11-22 00:00:00", value="")))
    migrate(engine, command.upgrade, "0009")
    assert inspect(engine).get_pk_constraint("external_task")["constrained_columns"] == [
        "dag_id",
        "task_id",
        "run_id",
        "map_index",
        "instance",
    ]
    with engine.begin() as conn:
        assert conn.execute(text("SELECT instance FROM external_task")).scalars().all() == [""]
        conn.execute(text(row.format(extra=", instance", at="2026-11-23 00:00:00", value=", 'prod-b'")))
        assert conn.execute(text("SELECT count(*) FROM external_task")).scalar_one() == 2
    migrate(engine, command.downgrade, "0008")
    assert "instance" not in {c["name"] for c in inspect(engine).get_columns("external_task")}
    with engine.connect() as conn:
        assert conn.execute(text("SELECT registered_at FROM external_task")).scalars().all() in (
            ["2026-11-23 00:00:00"],  # SQLite hands the text back
            [datetime(2026, 11, 23)],
        )
    migrate(engine, command.upgrade, "head")
    engine.dispose()
