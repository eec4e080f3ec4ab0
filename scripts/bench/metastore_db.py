"""Where the bench's Hive metastore service keeps its tables: embedded Derby, or a database of its own on the bench's
PostgreSQL server (as production metastores run, and readable beside the thrift API).

``--metastore auto`` (the default) picks PostgreSQL when the metadata DB is PostgreSQL (``./scripts/bench.sh
--postgres``): the server is already up, so it costs one CREATE DATABASE and the schema's creation at the
service's first start (~2.5 s). Without a PostgreSQL server it stays on Derby.
"""

from __future__ import annotations

from pathlib import Path

from smartsensor.adapters import metastore_db_setup
from smartsensor.adapters.metastore_service_process import free_port
from smartsensor.adapters.sql.engine import normalize_url

CHOICES = ("auto", "derby", "postgresql")


def is_postgresql(db_url: str) -> bool:
    """Whether the metadata DB URL names a PostgreSQL database."""
    return normalize_url(db_url).get_backend_name() == "postgresql"


def choose(choice: str, db_url: str) -> tuple[str, str]:
    """("derby" | "postgresql", why) for ``--metastore choice`` with the metadata DB at ``db_url``; ValueError when
    postgresql is asked for and cannot be had."""
    pg, driver = is_postgresql(db_url), metastore_db_setup.JDBC_JAR.is_file()
    if choice == "postgresql" and not pg:
        raise ValueError(
            "--metastore postgresql needs the metadata DB on PostgreSQL (--db-url, or bench.sh --postgres)"
        )
    if choice == "postgresql" and not driver:
        raise ValueError(f"--metastore postgresql needs the PostgreSQL JDBC driver at {metastore_db_setup.JDBC_JAR}")
    if choice == "derby":
        return "derby", "--metastore derby"
    if choice == "postgresql":
        return "postgresql", "--metastore postgresql"
    if not pg:
        return "derby", "auto: the metadata DB is not PostgreSQL"
    if not driver:
        return "derby", f"auto: no PostgreSQL JDBC driver at {metastore_db_setup.JDBC_JAR}"
    return "postgresql", "auto: the metadata DB's server"


def write_config(home: Path, db_url: str, metastore_db_url: str | None, more: str = "") -> Path:
    """``home``/airflow.cfg of a bench run: its metadata DB, a warehouse under ``home``, and a metastore service on a
    free port keeping its tables in ``metastore_db_url`` (None: Derby); ``more``: further sections. Its path; the
    run sets ``SMARTSENSOR_HOME`` to ``home``."""
    port = free_port()
    path = home / "airflow.cfg"
    path.write_text(
        f"[core]\nsql_alchemy_conn = {db_url}\n[spark]\nwarehouse_dir = {home}/warehouse\n"
        f"metastore_uris = thrift://127.0.0.1:{port}\n[metastore]\nport = {port}\n"
        + (f"database_url = {metastore_db_url}\n" if metastore_db_url else "")
        + more
    )
    return path
