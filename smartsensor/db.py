"""Engine creation, the statement counter, and schema migration (`smartsensor db init`)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

import schema

MIGRATIONS_DIR = Path(schema.__file__).resolve().parent / "migrations"


class StatementCounter:
    """Counts SQL statements sent on an engine (the numbers benchmarks and rounds report)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, *args: object, **kwargs: object) -> None:
        self.count += 1


def make_engine(url: str, idle_in_transaction_timeout: float | None = None) -> Engine:
    """Create an engine; SQLite gets WAL, a busy timeout and its folder created.

    ``idle_in_transaction_timeout`` (seconds, Postgres only) makes the server end a session that sits
    inside an open transaction that long. Workers set it to ``lease_timeout``: a worker paused
    (SIGSTOP, swapped out, stuck) mid-transaction would otherwise hold its row locks forever, and
    with them the lease rows the survivors need to take over. SQLite has no server to do this; see
    the README's HA section.
    """
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()
    else:
        is_pg = parsed.get_backend_name() == "postgresql"
        engine = create_engine(url, pool_pre_ping=True, pool_size=2, max_overflow=2,
                               connect_args={"connect_timeout": 5} if is_pg else {})
        if is_pg and idle_in_transaction_timeout:
            ms = max(1, round(idle_in_transaction_timeout * 1000))

            # A SET on each new connection rather than a startup `options` parameter: it keeps any
            # options in the user's URL and works behind poolers that reject startup options.
            @event.listens_for(engine, "connect")
            def _idle_timeout(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
                cur = dbapi_conn.cursor()
                cur.execute("SET idle_in_transaction_session_timeout = %s", (ms,))
                cur.close()
                dbapi_conn.commit()
    counter = StatementCounter()
    event.listen(engine, "before_cursor_execute", counter)
    engine.statement_counter = counter  # type: ignore[attr-defined]
    return engine


def statement_count(engine: Engine) -> int:
    """Statements sent on this engine so far."""
    return engine.statement_counter.count  # type: ignore[attr-defined]


def alembic_config(engine: Engine) -> AlembicConfig:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False).replace("%", "%%"))
    return cfg


def init_db(engine: Engine) -> tuple[str | None, str]:
    """Create or upgrade the schema to head. Idempotent. Returns (revision before, head)."""
    cfg = alembic_config(engine)
    with engine.begin() as conn:
        before = MigrationContext.configure(conn).get_current_revision()
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    head = ScriptDirectory.from_config(cfg).get_current_head()
    return before, head or ""


def current_revision(engine: Engine) -> str | None:
    """The schema revision the database is at (None if never initialised)."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()
