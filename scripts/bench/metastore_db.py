"""Where the bench's Hive metastore service keeps its tables: embedded Derby, or a database of its own on the bench's
PostgreSQL server (as production metastores run, and readable beside the thrift API).

``--metastore auto`` (the default) picks PostgreSQL when the metadata DB is PostgreSQL (``./scripts/bench.sh
--postgres``): the server is already up, so it costs one CREATE DATABASE and the schema's creation at the
service's first start (~2.5 s). Without a PostgreSQL server it stays on Derby.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any, Callable

from sqlalchemy import create_engine, text

from smartsensor.adapters import metastore_db_setup
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


def create_database(db_url: str, prefix: str = "bench_metastore") -> tuple[str, str]:
    """A new, empty database (named ``prefix`` and a random suffix) on the server of ``db_url`` (whose user may
    CREATE DATABASE): its name and URL (the same user and password)."""
    url = normalize_url(db_url)
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        engine.dispose()
    return name, url.set(database=name).render_as_string(hide_password=False)


def drop_database(db_url: str, name: str) -> None:
    """Drop the database ``name`` (nobody using it: a metastore service stopped) from the server of ``db_url``."""
    engine = create_engine(normalize_url(db_url), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        engine.dispose()


ROOT = Path(__file__).resolve().parents[2]


def on_a_database(argv: list[str], args: Any, module: str, run: Callable[[str, Any], int], keep: bool = False) -> int:
    """A bench script's ``main``: ``run(url, args)`` on ``--db-url``, else on a fresh SQLite file, or with
    ``--postgres`` on a database created for the run in the suite's throwaway PostgreSQL (``module`` run again under
    scripts/pg.sh when there is none), dropped afterwards unless ``keep``."""
    if args.db_url:
        return run(args.db_url, args)
    prefix = module.rsplit(".", 1)[-1]
    if not args.postgres:
        return run(f"sqlite:///{tempfile.mkdtemp(prefix=f'smartsensor-{prefix}-')}/{prefix}.db", args)
    admin_url = os.environ.get("SMARTSENSOR_TEST_PG_ADMIN_URL")
    if not admin_url:
        return under_throwaway_pg(argv, module)
    name, url = create_database(admin_url, prefix=prefix)
    try:
        return run(url, args)
    finally:
        if keep:
            print(f"kept: --db-url {url}")
        else:
            drop_database(admin_url, name)


def under_throwaway_pg(argv: list[str], module: str) -> int:
    """Run ``module`` with ``argv`` again inside a bash that started the suite's throwaway PostgreSQL (scripts/pg.sh,
    its admin URL in ``SMARTSENSOR_TEST_PG_ADMIN_URL``), stopped when it exits; its exit code."""
    script = (
        'source scripts/env.sh && source scripts/pg.sh && trap stop_pg EXIT INT TERM && start_pg && "$0" -m '
        f'{module} "$@"'
    )
    return subprocess.run(["bash", "-c", script, sys.executable, *argv], cwd=ROOT).returncode
