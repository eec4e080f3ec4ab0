"""The workload of the process-level HA and fault tests: N SuccessFileSensor tasks waiting on local flag files
(``file://``: no Spark JVM in the workers), with short heartbeats and leases so that takeovers happen within
seconds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from smartsensor.adapters.sql import tasks as task_sql
from smartsensor.adapters.sql.registration_store import SqlRegistrationStore
from smartsensor.config import Config
from smartsensor.sensors import SuccessFileSensor
from smartsensor.standalone.registration import register
from tests.support.common import DAY, lease_owners, new_db, override_env, wait_until
from tests.support.proc_helpers import cli_env

LEASE = {"smart_sensor__heartbeat_interval": "0.5", "smart_sensor__lease_timeout": "2", "smart_sensor__shards": "4"}
LEASE_ENV = override_env(LEASE)


@dataclass
class FlagWorkload:
    """Registered flag-file tasks in a fresh metadata DB, and the env for `smartsensor` processes."""

    cfg: Config
    engine: Any
    env: dict[str, str]
    flags: list[Path]

    def land(self, flags: Iterable[Path]) -> None:
        for f in flags:
            f.parent.mkdir(parents=True)
            f.write_text("")

    def states(self) -> set[str]:
        with self.engine.connect() as conn:
            return {r.state for r in task_sql.list_tasks(conn)}

    def wait_all_success(self, timeout: float) -> None:
        wait_until(lambda: self.states() == {"success"}, timeout=timeout, step=0.2)

    def lease_owners(self) -> dict[int, str | None]:
        return lease_owners(self.engine)

    def wait_taken_over(self, owner: str, timeout: float) -> None:
        """Until every range has an owner and none is ``owner``."""
        wait_until(
            lambda: owner not in self.lease_owners().values() and None not in self.lease_owners().values(),
            timeout=timeout,
        )


def flag_workload(tmp_path: Path, db_url: str, n: int, timeout: float = 900) -> FlagWorkload:
    """``n`` tasks d0..d{n-1} (poke_interval 0.5 s) on flag files under ``tmp_path``, none landed yet."""
    home = tmp_path / "home"
    cfg, engine = new_db(home, db_url, **LEASE)
    flags = [tmp_path / "flags" / f"f{i}" / "_SUCCESS" for i in range(n)]
    register(
        SqlRegistrationStore(engine),
        [
            # file:// paths are checked without a JVM (catalog/batch.py): these tests are about leases and
            # processes, and a Spark JVM per worker (per restart) was most of their CPU.
            (f"d{i}", SuccessFileSensor(task_id="s", path=flags[i].as_uri(), poke_interval=0.5, timeout=timeout))
            for i in range(n)
        ],
        DAY,
        cfg,
    )
    return FlagWorkload(cfg, engine, cli_env(home, db_url, **LEASE_ENV), flags)
