"""The servers of the several-host bed (``tests.support.hosts``), each on a host of its own: a PostgreSQL started as
./scripts/pg.sh starts one (``initdb`` and ``pg_ctl`` as user ``postgres``: initdb refuses root) but listening on
its host's address, and the Hive metastore service bound on its host: its catalog in embedded Derby, or
(``database_url``) in a PostgreSQL database, as production metastores keep it (the first start creates the schema
with SchemaTool, ``smartsensor.adapters.metastore_db_setup``; the JDBC driver is ``/usr/share/java/postgresql.jar``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from smartsensor.adapters import metastore_service
from smartsensor.config import Config
from tests.support.common import ROOT, make_cfg
from tests.support.hosts import Host
from tests.support.pg import new_pg_database

PG_PORT = 5432  # a namespace of its own: the usual port is free there
METASTORE_PORT = 9083


def _pg_bin() -> str:
    """The binaries of ./scripts/test.sh's PostgreSQL, else the first initdb found."""
    given = os.environ.get("SMARTSENSOR_TEST_PG_BIN")
    if given:
        return given
    initdb = shutil.which("initdb")
    if initdb is None:
        raise RuntimeError("no PostgreSQL binaries: run the tests through ./scripts/test.sh")
    return str(Path(initdb).parent)


class HostPostgres:
    """A PostgreSQL server on ``host``, listening on the host's address (port 5432), trust authentication;
    ``close`` stops it and deletes its folder."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.bin = _pg_bin()
        # Not below pytest's tmp_path: the server runs as user postgres, who cannot enter root's folders.
        self.folder = Path(tempfile.mkdtemp(prefix="smartsensor-pg-host."))
        self.folder.chmod(0o755)
        shutil.chown(self.folder, "postgres")
        self.data = str(self.folder / "data")
        self.opts = (
            f"-c listen_addresses={host.address} -p {PG_PORT} -k {self.folder} -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        try:
            host.run(
                f"{self.bin}/initdb",
                "-D",
                self.data,
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
                user="postgres",
            )
            with open(Path(self.data) / "pg_hba.conf", "a") as hba:  # the bed's hosts, by their /24
                hba.write(f"host all all {host.address}/24 trust\n")
            self.start()
        except BaseException:
            self.close()
            raise

    def start(self) -> None:
        log = str(self.folder / "server.log")
        self.host.run(
            f"{self.bin}/pg_ctl",
            "-D",
            self.data,
            "-l",
            log,
            "-w",
            "-t",
            "60",
            "start",
            "-o",
            self.opts,
            user="postgres",
        )

    def url(self, database: str = "postgres", address: str | None = None, port: int = PG_PORT) -> str:
        """The SQLAlchemy URL of ``database``, at ``address``:``port`` (default: the server itself; a fault
        proxy's address to go through it)."""
        return f"postgresql+psycopg2://postgres@{address or self.host.address}:{port}/{database}"

    def new_database(self) -> str:
        """A new, empty database: its URL."""
        return new_pg_database(self.url())[1]

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``mode``: pg_ctl's ``fast`` ends every session, rolling back what is under way;
        ``immediate`` is a crash); ``start`` starts it again on the same data."""
        self.host.run(f"{self.bin}/pg_ctl", "-D", self.data, "-m", mode, "-w", "stop", user="postgres")

    def close(self) -> None:
        subprocess.run(
            self.host.command(
                "runuser",
                "-u",
                "postgres",
                "--",
                f"{self.bin}/pg_ctl",
                "-D",
                self.data,
                "-m",
                "immediate",
                "-w",
                "stop",
            ),
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(self.folder, ignore_errors=True)


def metastore_cfg(host: Host, home: Path, database_url: str = "") -> Config:
    """The Config of a metastore service on ``host`` (its catalog in embedded Derby under ``home``, or in the
    database at ``database_url``), as its clients see it."""
    return make_cfg(
        home,
        "sqlite://",
        metastore__database_url=database_url,
        metastore__host=host.address,
        metastore__port=str(METASTORE_PORT),
        metastore__start_timeout="240",
        metastore__java_opts="-Xmx384m",
        spark__metastore_uris=f"thrift://{host.address}:{METASTORE_PORT}",
        spark__warehouse_dir=str(home / "warehouse"),
    )


START = """
from smartsensor.adapters import metastore_service
from smartsensor.config import load_config
metastore_service.start(load_config())
"""


def start_metastore(host: Host, home: Path, database_url: str = "") -> Config:
    """Start the metastore service inside ``host`` (it outlives the starting process; ``stop_metastore`` or the
    bed's teardown ends it), its catalog in Derby or, given ``database_url`` (a new, empty PostgreSQL database: the
    first start creates the schema), in that database; return its Config once its port answers."""
    cfg = metastore_cfg(host, home, database_url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SMARTSENSOR__")}
    env.pop("SMARTSENSOR_CONFIG", None)
    env.update(
        SMARTSENSOR_HOME=str(home),
        SMARTSENSOR__METASTORE__DATABASE_URL=database_url,
        SMARTSENSOR__METASTORE__HOST=host.address,
        SMARTSENSOR__METASTORE__PORT=str(METASTORE_PORT),
        SMARTSENSOR__METASTORE__START_TIMEOUT="240",
        SMARTSENSOR__METASTORE__JAVA_OPTS="-Xmx384m",
        SMARTSENSOR__SPARK__METASTORE_URIS=f"thrift://{host.address}:{METASTORE_PORT}",
        SMARTSENSOR__SPARK__WAREHOUSE_DIR=str(home / "warehouse"),
        PYTHONPATH=str(ROOT),
    )
    done = subprocess.run(
        host.command(sys.executable, "-c", START), env=env, capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    if done.returncode != 0:
        raise RuntimeError(f"metastore service on {host.name} did not start: {done.stderr[-3000:]}")
    return cfg


def stop_metastore(cfg: Config) -> None:
    metastore_service.stop(cfg)
