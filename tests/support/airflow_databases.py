"""Airflow's database for the tests in tests/airflow, migrated once per Airflow version and test process, then
copied for each test or deployment that needs a new one. ``airflow db migrate`` costs tens of seconds of CPU per
call (3.3.2 more than 2.10.5); a copy costs next to nothing and holds the same schema and rows: a PostgreSQL
database is created from a template database (``CREATE DATABASE … TEMPLATE``), a SQLite one is a copy of the
migrated file, put where Airflow looks for it (``$AIRFLOW_HOME/airflow.db``)."""

from __future__ import annotations

import shutil
from pathlib import Path

from scripts.airflow.stack import airflow_env, run_airflow, version_of
from tests.support.pg import drop_pg_database, new_pg_database

SQLITE_FILE = "airflow.db"  # Airflow's own default, under $AIRFLOW_HOME


class AirflowDatabases:
    """The migrated databases of each Airflow venv (made on first use, under ``workdir``) and their copies."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._pg: dict[Path, str] = {}  # venv → name of its migrated template database
        self._sqlite: dict[Path, Path] = {}  # venv → its migrated SQLite file

    def new_pg(self, venv: Path) -> tuple[str, str]:
        """A new PostgreSQL database holding ``venv``'s Airflow schema, migrated: its name and URL."""
        if venv not in self._pg:
            name, url = new_pg_database()
            home = self.workdir / f"pg-{version_of(venv)}"
            run_airflow(venv, ["db", "migrate"], airflow_env(venv, home, AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=url), 600)
            self._pg[venv] = name
        return new_pg_database(template=self._pg[venv])

    def new_sqlite(self, venv: Path, home: Path) -> Path:
        """``home``/airflow.db: a new SQLite database holding ``venv``'s Airflow schema, migrated."""
        if venv not in self._sqlite:
            template_home = self.workdir / f"sqlite-{version_of(venv)}"
            run_airflow(venv, ["db", "migrate"], airflow_env(venv, template_home), 600)
            self._sqlite[venv] = template_home / SQLITE_FILE
        home.mkdir(parents=True, exist_ok=True)
        return Path(shutil.copyfile(self._sqlite[venv], home / SQLITE_FILE))

    def close(self) -> None:
        """Drop the template databases (the SQLite files go with the test run's temporary folders)."""
        for name in self._pg.values():
            drop_pg_database(name)
        self._pg.clear()
