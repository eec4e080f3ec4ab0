"""What tests of every layer share: the repository root, the execution day, the test clock's start, a
test Config and a fresh metadata DB, the usual sensor, the rows a test reads back, a round's end of waiting tasks,
and polling."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from scripts.harness.waiting import wait_until as wait_until  # the tests import it from here
from smartsensor.adapters.sql import channels as channel_sql, leases as lease_sql, tasks as task_sql
from smartsensor.adapters.sql.engine import init_db, make_engine
from smartsensor.config import Config, load_config
from smartsensor.domain.states import State
from smartsensor.sensors import NamedHivePartitionSensor

ROOT = Path(__file__).resolve().parents[2]  # the repository
DAY = datetime(2026, 11, 22, tzinfo=timezone.utc)  # the execution date tasks are registered for
T0 = datetime(2026, 11, 23, 6, 0, 0, tzinfo=timezone.utc)  # where the test clock starts: the morning after DAY
SHARD_LIMIT = 10_000  # [smart_sensor] shard_code_upper_limit's default, as a test Config has it


def override_env(overrides: dict[str, str]) -> dict[str, str]:
    """``section__key`` overrides (as ``make_cfg`` takes them) as SMARTSENSOR__SECTION__KEY variables."""
    env = {}
    for key, value in overrides.items():
        section, name = key.split("__")
        env[f"SMARTSENSOR__{section.upper()}__{name.upper()}"] = value
    return env


def make_cfg(home: Path, db_url: str, **overrides: str) -> Config:
    """A Config for tests: home folder, DB URL, and SMARTSENSOR__SECTION__KEY-style overrides."""
    env = {"SMARTSENSOR_HOME": str(home), "SMARTSENSOR__CORE__SQL_ALCHEMY_CONN": db_url}
    env.update(override_env(overrides))
    return load_config(environ=env)


def new_db(home: Path, db_url: str, **overrides: str) -> tuple[Config, Any]:
    """``make_cfg(home, db_url, **overrides)`` and an engine on its metadata DB, initialised (the caller disposes)."""
    cfg = make_cfg(home, db_url, **overrides)
    return cfg, initialised_engine(cfg.sql_alchemy_conn)


def initialised_engine(db_url: str) -> Any:
    """An engine on ``db_url``'s database at the schema's head. A new SQLite file is a copy of this process's one
    database ``init_db`` made (the same migrations, run once: a test that wants a database ready pays ~70 ms of CPU
    for them otherwise, and hundreds do, some once per generated example); any other database is migrated by
    ``init_db`` (the tests of migrations and of ``db init`` itself start from an empty one: ``db_url``)."""
    engine = make_engine(db_url)  # for a SQLite file, its folder made first
    path = engine.url.database if engine.dialect.name == "sqlite" else None
    if path and path != ":memory:" and not path.startswith("file:") and not Path(path).expanduser().exists():
        shutil.copyfile(_sqlite_at_head(), Path(path).expanduser())
    else:
        init_db(engine)
    return engine


@lru_cache(maxsize=1)
def _sqlite_at_head() -> Path:
    """This process's SQLite database made by ``init_db`` (closed: no journal beside it), to copy."""
    folder = Path(tempfile.mkdtemp(prefix="smartsensor-schema-"))
    atexit.register(shutil.rmtree, folder, True)
    path = folder / "head.db"
    engine = make_engine(f"sqlite:///{path}")
    try:
        init_db(engine)
    finally:
        engine.dispose()
    assert not [p for p in path.parent.iterdir() if p != path], "a journal beside the closed database"
    return path


def named(task_id: str = "t", partition: str = "demo.events/ds={{ ds }}", **kw: Any) -> NamedHivePartitionSensor:
    """A NamedHivePartitionSensor waiting for one partition."""
    return NamedHivePartitionSensor(task_id=task_id, partition_names=[partition], **kw)


def lease_owners(engine: Any) -> dict[int, str | None]:
    """Each shard range's lease owner (None: free), by the range's lower bound."""
    with engine.connect() as conn:
        return {r.shard_min: r.owner for r in lease_sql.load_leases(conn)}


def end_waiting(engine: Any, state: str, task_ids: set[str] | None = None) -> int:
    """What a round's commit does when checks land: the waiting tasks (those of ``task_ids``, or all) marked
    ``state``, guarded, and the end notified (what wakes held requests). How many it marked."""
    with engine.begin() as conn:
        marked = sum(
            task_sql.set_state(conn, task.key, state, from_states=list(State.SMART_WAITING))
            for task in task_sql.list_tasks(conn)
            if task_ids is None or task.task_id in task_ids
        )
        channel_sql.notify_ended(conn)
    return marked
