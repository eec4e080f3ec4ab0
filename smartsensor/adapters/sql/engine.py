"""Engine creation, the statement counter, and schema migration (`smartsensor db init`)."""

from __future__ import annotations

import ast
import contextlib
import logging
import os
import socket
import threading
import time
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from sqlalchemy import Connection, Engine, create_engine, event, inspect, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from smartsensor import schema
from smartsensor.domain.status_rows import revision_problem

if TYPE_CHECKING:
    from alembic.config import Config as AlembicConfig

MIGRATIONS_DIR = Path(schema.__file__).resolve().parent / "migrations"
VERSION_TABLE = "alembic_version"  # Alembic's default, which schema/migrations/env.py keeps
CONNECT_TIMEOUT = 5  # seconds libpq may take to connect (TCP, TLS, startup, authentication)

log = logging.getLogger(__name__)


class StatementCounter:
    """Counts SQL statements sent on an engine (the numbers benchmarks and rounds report)."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()  # a worker writes its ranges from several threads

    def __call__(self, *args: object, **kwargs: object) -> None:
        with self._lock:
            self.count += 1


class DatabaseUrlError(ValueError):
    """``sql_alchemy_conn`` cannot be used: unparseable, a driver that is not installed, a missing folder."""


# The bare PostgreSQL schemes mean the driver smartsensor installs (psycopg2), whatever SQLAlchemy's own
# default is (2.1 switched it to psycopg 3, which is not installed); an explicit +driver is kept.
# Likewise ``mysql://`` means PyMySQL (the metastore_db catalog backend's MySQL driver; SQLAlchemy's default is
# mysqlclient, which needs a C library).
_POSTGRES_SCHEMES = {
    "postgresql": "postgresql+psycopg2",
    "postgres": "postgresql+psycopg2",
    "mysql": "mysql+pymysql",
}


def normalize_url(url: str) -> URL:
    """The URL to connect with: ``postgresql://`` and ``postgres://`` mean psycopg2, ``mysql://`` PyMySQL. Clear
    errors otherwise."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise DatabaseUrlError(
            f"[core] sql_alchemy_conn {url[:80]!r} is not a database URL "
            f"(e.g. sqlite:////abs/path.db or postgresql://user:pw@host:5432/db): {exc}"
        ) from None
    driver = _POSTGRES_SCHEMES.get(parsed.drivername)
    return parsed.set(drivername=driver) if driver else parsed


class CallWatchdog:
    """Bounds each call to a PostgreSQL server (a statement, a commit, a rollback) at ``timeout`` seconds: past it,
    the connection's socket is shut down from this watchdog's thread, so the call fails at once ("server closed the
    connection unexpectedly", a disconnect the pool discards) instead of waiting forever.

    libpq has no timeout of its own on a call's answer, and neither the server's timeouts nor TCP keepalives see a
    connection that stalls without closing while its peer (a proxy, a pooler, a frozen server's kernel) still
    acknowledges every packet: a worker's round and lease heartbeat then waited forever (issue 57, tests/process/
    test_hosts.py). One daemon thread per watchdog, started at the first call, looking every ``timeout``/4 (at most
    0.25 s)."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._calls: dict[int, tuple[int, float]] = {}  # token -> (socket fd, deadline)
        self._lock = threading.Lock()
        self._next = 0
        self._thread: threading.Thread | None = None
        self.closed = 0  # connections shut down so far

    @contextlib.contextmanager
    def guard(self, dbapi_conn: Any) -> Iterator[None]:
        """The block is one call on ``dbapi_conn``: its socket is shut down if the block lasts past the bound."""
        fd = dbapi_conn.fileno()
        with self._lock:
            token = self._next
            self._next += 1
            self._calls[token] = (fd, time.monotonic() + self.timeout)
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="sql-call-watchdog", daemon=True)
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                self._calls.pop(token, None)  # gone already if the watchdog shut the connection

    def _watch(self) -> None:
        while True:
            time.sleep(min(0.25, self.timeout / 4))
            now = time.monotonic()
            with self._lock:  # a call that ends takes this lock first: its fd is never closed under us
                for token, (fd, deadline) in list(self._calls.items()):
                    if now >= deadline:
                        del self._calls[token]
                        self._shut(fd)

    def _shut(self, fd: int) -> None:
        try:
            with socket.socket(fileno=os.dup(fd)) as sock:  # the duplicate alone is closed; shutdown hits both
                sock.shutdown(socket.SHUT_RDWR)
        except OSError as exc:
            log.warning("could not close a stalled connection to the metadata database: %s", exc)
            return
        self.closed += 1
        log.warning(
            "a call to the metadata database had no answer within %g s ([core] sql_call_timeout): its connection "
            "is closed and the call fails",
            self.timeout,
        )


def guarded_connection_class(watchdog: CallWatchdog) -> type:
    """A psycopg2 connection class whose calls (cursors' execute and executemany, commit, rollback) are bounded by
    ``watchdog``."""
    import psycopg2.extensions

    class GuardedCursor(psycopg2.extensions.cursor):
        def execute(self, query: Any, vars: Any = None) -> Any:
            with watchdog.guard(self.connection):
                return super().execute(query, vars)

        def executemany(self, query: Any, vars_list: Any) -> Any:
            with watchdog.guard(self.connection):
                return super().executemany(query, vars_list)

    class GuardedConnection(psycopg2.extensions.connection):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.cursor_factory = GuardedCursor

        def commit(self) -> None:
            with watchdog.guard(self):
                super().commit()

        def rollback(self) -> None:
            with watchdog.guard(self):
                super().rollback()

    return GuardedConnection


def make_engine(
    url: str,
    idle_in_transaction_timeout: float | None = None,
    home: Path | None = None,
    call_timeout: float | None = None,
) -> Engine:
    """Create an engine; SQLite gets WAL and a busy timeout.

    On SQLite, pysqlite starts a transaction only before the first write of an ``engine.begin()`` block
    (reads before it see the newest commit, and a write never has to upgrade a stale read snapshot,
    which SQLite refuses at once instead of waiting). Multi-row writes that must be all-or-nothing
    (registration) therefore avoid SAVEPOINTs, which pysqlite commits on RELEASE outside a transaction.

    A SQLite file's folder is created only under ``home`` (the smartsensor home); anywhere else a
    missing folder is an error, so a typo never creates directories around the file system.

    ``idle_in_transaction_timeout`` (seconds, Postgres only) makes the server end a session that sits
    inside an open transaction that long. Workers set it to ``lease_timeout``: a worker paused
    (SIGSTOP, swapped out, stuck) mid-transaction would otherwise hold its row locks forever, and
    with them the lease rows the survivors need to take over. SQLite has no server to do this; see
    the README's HA section.

    ``call_timeout`` (seconds, PostgreSQL with psycopg2 only): each call waits at most that long for its answer
    (``CallWatchdog``; ``[core] sql_call_timeout``); connecting waits at most CONNECT_TIMEOUT.
    """
    parsed = normalize_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:" and not parsed.database.startswith("file:"):
            _sqlite_folder(Path(parsed.database).expanduser(), home)
        engine = _create(parsed, connect_args={"timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()
    else:
        is_pg = parsed.get_backend_name() == "postgresql"
        connect_args: dict[str, Any] = {"connect_timeout": CONNECT_TIMEOUT} if is_pg else {}
        watchdog = None
        if is_pg and call_timeout and parsed.get_driver_name() == "psycopg2":
            watchdog = CallWatchdog(call_timeout)
            connect_args["connection_factory"] = guarded_connection_class(watchdog)
        engine = _create(
            parsed,
            pool_pre_ping=True,
            pool_size=2,
            max_overflow=4,  # a worker: signal listener, heartbeat, wake-up round, write threads
            connect_args=connect_args,
        )
        engine.call_watchdog = watchdog  # type: ignore[attr-defined]  # tests read what it closed
        if is_pg and idle_in_transaction_timeout:
            ms = max(1, round(idle_in_transaction_timeout * 1000))

            # A SET on each new connection rather than a startup `options` parameter: it keeps any
            # options in the user's URL and works behind poolers that reject startup options.
            @event.listens_for(engine, "connect")
            def _idle_timeout(dbapi_conn: Any, _record: Any) -> None:
                cur = dbapi_conn.cursor()
                cur.execute("SET idle_in_transaction_session_timeout = %s", (ms,))
                cur.close()
                dbapi_conn.commit()

    counter = StatementCounter()
    event.listen(engine, "before_cursor_execute", counter)
    engine.statement_counter = counter  # type: ignore[attr-defined]  # rides on the engine, for statement_count()
    return engine


def _create(url: URL, **kwargs: object) -> Engine:
    try:
        return create_engine(url, **kwargs)
    except (NoSuchModuleError, ModuleNotFoundError, ImportError) as exc:
        raise DatabaseUrlError(
            f"[core] sql_alchemy_conn: the driver for {url.drivername!r} is not installed ({exc}); smartsensor "
            f"ships SQLite and PostgreSQL through psycopg2: use sqlite:////abs/path.db or "
            f"postgresql://user:pw@host:5432/db"
        ) from None


def _sqlite_folder(path: Path, home: Path | None) -> None:
    """Make sure a SQLite file's folder exists: created under the smartsensor home only."""
    folder = path.parent
    if folder.is_dir():
        return
    if home is not None and folder.resolve().is_relative_to(home.expanduser().resolve()):
        folder.mkdir(parents=True, exist_ok=True)
        return
    raise DatabaseUrlError(
        f"[core] sql_alchemy_conn: folder {folder} of the SQLite database does not exist "
        f"(smartsensor creates folders only under its home {home or '$SMARTSENSOR_HOME'}); "
        f"create it first"
    )


def statement_count(engine: Engine) -> int:
    """Statements sent on this engine so far."""
    return engine.statement_counter.count  # type: ignore[attr-defined]  # set by make_engine


# Alembic is imported where a migration runs (``db init``) and nowhere else: with Mako and Pygments behind it, it
# costs a command about a third of a second of CPU before it starts, and every other command only reads the version.
def alembic_config(engine: Engine) -> AlembicConfig:
    from alembic.config import Config as AlembicConfig

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False).replace("%", "%%"))
    return cfg


def init_db(engine: Engine) -> tuple[str | None, str]:
    """Create or upgrade the schema to head. Idempotent. Returns (revision before, head)."""
    from alembic import command

    cfg = alembic_config(engine)
    with engine.begin() as conn:
        before = _revision_of(conn)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    return before, known_revisions()[0]


def current_revision(engine: Engine) -> str | None:
    """The schema revision the database is at (None if never initialised): the row of Alembic's version table."""
    with engine.connect() as conn:
        return _revision_of(conn)


def _revision_of(conn: Connection) -> str | None:
    """``current_revision`` on ``conn`` (inside a transaction already open: ``init_db``'s)."""
    if not inspect(conn).has_table(VERSION_TABLE):
        return None
    versions = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
    if len(versions) > 1:
        raise RuntimeError(f"the database's {VERSION_TABLE} table names several revisions: {sorted(versions)}")
    return versions[0] if versions else None


@lru_cache(maxsize=1)
def known_revisions() -> tuple[str, ...]:
    """Every schema revision this smartsensor's migrations define, newest (head) first. Read once per
    process: the migration scripts do not change under a running process, and health checks ask often.

    Read from each script's ``revision`` and ``down_revision`` assignments, without importing the scripts or
    Alembic (``tests/integration/test_schema.py`` holds the order to Alembic's own walk)."""
    down: dict[str, str | None] = {}
    for script in sorted((MIGRATIONS_DIR / "versions").glob("*.py")):
        names = _revision_names(ast.parse(script.read_text(encoding="utf-8"), str(script)))
        if "revision" in names:
            down[str(names["revision"])] = names.get("down_revision")
    heads = set(down) - set(down.values())
    if len(heads) != 1:
        raise RuntimeError(f"the migrations in {MIGRATIONS_DIR} have {len(heads)} heads, not one: {sorted(heads)}")
    chain: list[str] = []
    revision: str | None = heads.pop()
    while revision is not None:
        if revision in chain or revision not in down:
            raise RuntimeError(f"the migrations in {MIGRATIONS_DIR} do not form one line at {revision!r}")
        chain.append(revision)
        revision = down[revision]
    if len(chain) != len(down):
        raise RuntimeError(f"the migrations in {MIGRATIONS_DIR} do not form one line: {sorted(set(down) - set(chain))}")
    return tuple(chain)


def _revision_names(module: ast.Module) -> dict[str, str | None]:
    """A migration script's module-level ``revision`` and ``down_revision`` (a string, or None)."""
    found: dict[str, str | None] = {}
    for node in module.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in ("revision", "down_revision") and isinstance(node.value, ast.Constant):
                if node.value.value is None or isinstance(node.value.value, str):
                    found[name] = node.value.value
    return found


def schema_problem(revision: str | None) -> str | None:
    """Why a database at schema ``revision`` cannot be used by this smartsensor, with which side to upgrade
    (a host upgraded before or after the database); None when it can (``status_rows.revision_problem`` against this
    smartsensor's migrations)."""
    return revision_problem(revision, known_revisions())
