"""Reading an Airflow metadata database, read-only, for ``smartsensor airflow report``: the Hive sensor tries of a
period, their rendered template fields, their reschedule pokes and what the serialized DAGs say of the sensors.

The 2.10 and 3.x schemas (as ``airflow db migrate`` creates them, checked on 2.10.5 and 3.3.2) differ where this
reads them: 3.x ``task_instance`` has an ``id`` (a new one per try) and ``task_reschedule`` points at it
(``ti_id``), deleting a try's rows when the task retries, and its rows are stamped when the API records them (start
~ end ~ the end of the poke); 2.10 ``task_reschedule`` is keyed by (dag_id, task_id, run_id, map_index,
try_number) and each row holds its poke's own start and end. On both, a reschedule-mode task instance's
``start_date``/``end_date`` are those of its last poke, and a deferred task keeps its start through the deferral
(``queued_dttm`` is then its resume's). ``serialized_dag`` has one row per DAG on 2.10, one per DAG version on 3.x;
its JSON may be zlib-compressed in ``data_compressed``.

Tables are declared here with only the columns read; values are bound parameters, never pasted into SQL. The
connection is read-only: SQLite opens the file with ``mode=ro``, PostgreSQL sessions are ``READ ONLY``.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import quote

from sqlalchemy import (
    Column,
    DateTime,
    Engine,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    and_,
    create_engine,
    event,
    inspect,
    or_,
    select,
)
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from smartsensor.domain.airflow_history import (
    SENSOR_OPERATORS,
    AirflowHistory,
    Poke,
    SensorTry,
    TaskSettings,
    TiKey,
    as_utc,
    merge_tries,
    parse_json,
    sensor_try,
    serialized_settings,
)

REQUIRED = ("dag_id", "task_id", "run_id", "map_index", "try_number", "start_date", "end_date", "state", "operator")
_CHUNK = 500  # values per IN list


class AirflowDbError(Exception):
    """The URL does not lead to a readable Airflow metadata database (one line for the user)."""


def open_airflow_db(url: str) -> Engine:
    """A read-only engine on an Airflow metadata database URL (``postgresql://`` means psycopg2)."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise AirflowDbError(
            "not a database URL (e.g. postgresql://user:pw@host:5432/airflow or sqlite:////abs/path/airflow.db)"
        ) from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg2")
    try:
        if parsed.get_backend_name() == "sqlite":
            return _sqlite_read_only(parsed)
        engine = create_engine(parsed, pool_pre_ping=True, connect_args=_connect_args(parsed))
    except (NoSuchModuleError, ModuleNotFoundError, ImportError) as exc:
        raise AirflowDbError(f"no driver for {parsed.drivername!r} here ({exc})") from None
    if parsed.get_backend_name() == "postgresql":

        @event.listens_for(engine, "connect")
        def _read_only(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
            cur.close()
            dbapi_conn.commit()

    return engine


def safe_url(url: str) -> str:
    """The URL with its password hidden, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return "(unparseable URL)"


def _connect_args(url: URL) -> dict[str, Any]:
    return {"connect_timeout": 10} if url.get_backend_name() == "postgresql" else {}


def _sqlite_read_only(url: URL) -> Engine:
    """SQLite opened read-only: a missing file is an error, never a new empty database."""
    database = url.database or ""
    if not database or database == ":memory:" or database.startswith("file:"):
        raise AirflowDbError("give the SQLite database as a file: sqlite:////abs/path/airflow.db")
    path = Path(database).expanduser().resolve()
    if not path.is_file():
        raise AirflowDbError(f"no SQLite database file {path}")
    uri = f"file:{quote(str(path))}?mode=ro"
    return create_engine("sqlite://", creator=lambda: _sqlite_connect(uri))


def _sqlite_connect(uri: str) -> Any:
    import sqlite3

    return sqlite3.connect(uri, uri=True, timeout=30, check_same_thread=False)


# -- the tables, as much of them as is read -----------------------------------------------------------------------


def _ts(name: str) -> Column[Any]:
    return Column(name, DateTime(timezone=True))


def _key() -> list[Column[Any]]:
    return [Column("dag_id", String), Column("task_id", String), Column("run_id", String), Column("map_index", Integer)]


def _tables(columns: dict[str, set[str]]) -> dict[str, Table]:
    """Table objects for the tables present, with the columns this reads (3.x or 2.x shape). JSON columns are read
    as text or as what the driver made of them (psycopg2 parses json), and parsed here."""
    md = MetaData()
    out: dict[str, Table] = {
        name: Table(
            name,
            md,
            *_key(),
            Column("try_number", Integer),
            Column("state", String),
            Column("operator", String),
            Column("next_method", String),
            *[_ts(c) for c in ("start_date", "end_date", "queued_dttm")],
            *([Column("id", String)] if "id" in columns[name] else []),
        )
        for name in ("task_instance", "task_instance_history")
        if name in columns
    }
    if "task_reschedule" in columns:
        by_ti_id = "ti_id" in columns["task_reschedule"]  # 3.x
        shape = [Column("ti_id", String)] if by_ti_id else [*_key(), Column("try_number", Integer)]
        out["task_reschedule"] = Table(
            "task_reschedule",
            md,
            Column("id", Integer),
            *shape,
            *[_ts(c) for c in ("start_date", "end_date", "reschedule_date")],
        )
    if "rendered_task_instance_fields" in columns:
        out["rtif"] = Table("rendered_task_instance_fields", md, *_key(), Column("rendered_fields", String))
    if "serialized_dag" in columns:
        ordering = [_ts("last_updated")] if "last_updated" in columns["serialized_dag"] else []
        out["serialized_dag"] = Table(
            "serialized_dag",
            md,
            Column("dag_id", String),
            Column("data", String),
            Column("data_compressed", LargeBinary),
            *ordering,
        )
    return out


# -- reading -----------------------------------------------------------------------------------------------------


def read_history(engine: Engine, since: datetime) -> AirflowHistory:
    """Every try of a Hive sensor task (``SENSOR_OPERATORS``) that started or ended at or after ``since`` (aware
    UTC), with its reschedule pokes, the task instances' rendered fields and the sensors' serialized settings."""
    inspector = inspect(engine)
    names = set(inspector.get_table_names())
    if "task_instance" not in names:
        raise AirflowDbError("it has no task_instance table: not an Airflow metadata database")
    wanted = {"task_instance", "task_instance_history", "task_reschedule", "rendered_task_instance_fields"}
    columns = {t: {c["name"] for c in inspector.get_columns(t)} for t in names & (wanted | {"serialized_dag"})}
    missing = [c for c in REQUIRED if c not in columns["task_instance"]]
    if missing:
        raise AirflowDbError(f"its task_instance table has no {', '.join(missing)}: not an Airflow metadata database")
    tables = _tables(columns)
    airflow = 3 if "id" in columns["task_instance"] else 2
    bound = since if engine.dialect.name == "postgresql" else since.astimezone(timezone.utc).replace(tzinfo=None)
    with engine.connect() as conn:
        current, rendered = _current_tries(conn, tables, bound)
        earlier = _earlier_tries(conn, tables, bound)
        tries = merge_tries(current, earlier)
        if tries and "task_reschedule" in tables:
            _attach_pokes(conn, tables, tries, airflow, bound)
        settings = _settings(conn, tables, {t.key.dag_id for t in tries})
    return AirflowHistory(airflow, tries, rendered, settings)


def _in_period(table: Table, bound: datetime) -> Any:
    return and_(
        table.c.operator.in_(SENSOR_OPERATORS),
        or_(table.c.start_date >= bound, table.c.end_date >= bound),
    )


def _current_tries(conn: Any, tables: dict[str, Table], bound: datetime) -> tuple[list[SensorTry], dict[TiKey, Any]]:
    """The current try of each task instance of the period, and the task instance's rendered fields."""
    ti = tables["task_instance"]
    columns = [c for c in ti.c if c.name != "id"]
    query = select(*columns)
    rtif = tables.get("rtif")
    if rtif is not None:
        query = select(*columns, rtif.c.rendered_fields).outerjoin(
            rtif, and_(*[ti.c[k] == rtif.c[k] for k in ("dag_id", "task_id", "run_id", "map_index")])
        )
    out: list[SensorTry] = []
    rendered: dict[TiKey, Any] = {}
    for row in conn.execute(query.where(_in_period(ti, bound))):
        one = sensor_try(row._mapping)
        out.append(one)
        if rtif is not None and row.rendered_fields is not None:
            rendered[one.key] = parse_json(row.rendered_fields)
    return out, rendered


def _earlier_tries(conn: Any, tables: dict[str, Table], bound: datetime) -> list[SensorTry]:
    tih = tables.get("task_instance_history")
    if tih is None:
        return []
    columns = [c for c in tih.c if c.name != "id"]
    return [sensor_try(row._mapping) for row in conn.execute(select(*columns).where(_in_period(tih, bound)))]


def _attach_pokes(conn: Any, tables: dict[str, Table], tries: list[SensorTry], airflow: int, bound: datetime) -> None:
    """Each try's ``task_reschedule`` rows. On 3.x only the current try has any (Airflow deletes them at a retry)."""
    tr, ti = tables["task_reschedule"], tables["task_instance"]
    earliest = min((t.start for t in tries if t.start is not None), default=None)
    lower = bound if earliest is None else min(bound, _as_bound(earliest, bound))
    by_key = {(t.key, t.try_number): t for t in tries}
    if airflow >= 3:
        join = tr.join(ti, tr.c.ti_id == ti.c.id)
        try_number = ti.c.try_number
        keys = [ti.c[k] for k in ("dag_id", "task_id", "run_id", "map_index")]
    else:
        join = tr.join(ti, and_(*[tr.c[k] == ti.c[k] for k in ("dag_id", "task_id", "run_id", "map_index")]))
        try_number = tr.c.try_number
        keys = [tr.c[k] for k in ("dag_id", "task_id", "run_id", "map_index")]
    query = (
        select(*keys, try_number.label("try_number"), tr.c.start_date, tr.c.end_date, tr.c.reschedule_date)
        .select_from(join)
        .where(ti.c.operator.in_(SENSOR_OPERATORS), tr.c.end_date >= lower)
        .order_by(tr.c.id)
    )
    for row in conn.execute(query):
        one = by_key.get((TiKey(row.dag_id, row.task_id, row.run_id, int(row.map_index)), int(row.try_number)))
        start, end, again = as_utc(row.start_date), as_utc(row.end_date), as_utc(row.reschedule_date)
        if one is not None and start is not None and end is not None and again is not None:
            one.pokes.append(Poke(start, end, again))


def _settings(conn: Any, tables: dict[str, Table], dag_ids: set[str]) -> dict[tuple[str, str], TaskSettings]:
    """(dag_id, task_id) → the sensor settings the newest serialized version of each DAG holds."""
    sd = tables.get("serialized_dag")
    out: dict[tuple[str, str], TaskSettings] = {}
    if sd is None:
        return out
    order = [sd.c.last_updated] if "last_updated" in sd.c else []
    for chunk in _chunks(sorted(dag_ids)):
        query = select(sd.c.dag_id, sd.c.data, sd.c.data_compressed).where(sd.c.dag_id.in_(chunk)).order_by(*order)
        for row in conn.execute(query):  # oldest first: a newer version of a DAG overwrites an older one
            for task_id, settings in serialized_settings(row.data, row.data_compressed):
                out[(row.dag_id, task_id)] = settings
    return out


def _as_bound(when: datetime, like: datetime) -> datetime:
    return when if like.tzinfo is not None else when.replace(tzinfo=None)


def _chunks(values: list[str]) -> Iterable[list[str]]:
    for i in range(0, len(values), _CHUNK):
        yield values[i : i + _CHUNK]
