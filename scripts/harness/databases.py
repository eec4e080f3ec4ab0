"""Throwaway databases on a PostgreSQL or MySQL (MariaDB) server: one made for a test, a benchmark or a demo run,
named with a prefix and a random suffix, and dropped afterwards. The one copy the benchmarks and tests/support
(pg.py, mysql.py) share; a bench script's ``main`` runs on one (``on_a_database``)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any, Callable

from sqlalchemy import create_engine, make_url, text

from smartsensor.adapters.sql.engine import normalize_url

ROOT = Path(__file__).resolve().parents[2]


def new_database(server_url: str, prefix: str, template: str | None = None) -> tuple[str, str]:
    """A new database on the server of ``server_url`` (whose user may CREATE DATABASE), named ``prefix`` and 12
    random hex digits: its name and URL (``server_url`` with that database: the same driver, user and password).
    Empty, or on PostgreSQL a copy of the database named ``template`` (which nobody may be connected to meanwhile:
    PostgreSQL refuses the copy)."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    copy = "" if template is None else f' TEMPLATE "{template}"'  # our own names only
    _run_on_server(server_url, lambda quote: f"CREATE DATABASE {quote(name)}{copy}")
    return name, make_url(server_url).set(database=name).render_as_string(hide_password=False)


def drop_database(server_url: str, name: str) -> None:
    """Drop the database ``name`` from the server of ``server_url``; on PostgreSQL its sessions are ended first."""
    force = " WITH (FORCE)" if normalize_url(server_url).get_backend_name() == "postgresql" else ""
    _run_on_server(server_url, lambda quote: f"DROP DATABASE IF EXISTS {quote(name)}{force}")


def _run_on_server(server_url: str, statement: Callable[[Callable[[str], str]], str]) -> None:
    """One statement outside a transaction (CREATE and DROP DATABASE refuse one), its names quoted as the server
    quotes them (PostgreSQL's "…", MySQL's `…`)."""
    engine = create_engine(normalize_url(server_url), isolation_level="AUTOCOMMIT")
    try:
        quote = engine.dialect.identifier_preparer.quote_identifier
        with engine.connect() as conn:
            conn.execute(text(statement(quote)))
    finally:
        engine.dispose()


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
    name, url = new_database(admin_url, prefix)
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
