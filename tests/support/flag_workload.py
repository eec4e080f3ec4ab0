"""The workload of the process-level HA and fault tests: N SuccessFileSensor tasks waiting on flag files,
with short heartbeats and leases so that takeovers happen within seconds."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterable

from smartsensor.sensors import SuccessFileSensor
from smartsensor.adapters.sql import leases as lease_sql, tasks as task_sql
from smartsensor.config import Config
from smartsensor.adapters.sql.engine import init_db, make_engine
from smartsensor.service.registration import register
from tests.conftest import make_cfg
from tests.support.proc_helpers import cli_env

DAY = datetime(2026, 11, 22)
LEASE = {"smart_sensor__heartbeat_interval": "0.5", "smart_sensor__lease_timeout": "2", "smart_sensor__shards": "4"}
LEASE_ENV = {f"SMARTSENSOR__{k.split('__')[0].upper()}__{k.split('__')[1].upper()}": v for k, v in LEASE.items()}


def wait_until(predicate: Callable[[], bool], timeout: float, step: float = 0.05) -> float:
    """Poll ``predicate`` until true; return the seconds it took, or fail after ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return time.monotonic() - start
        time.sleep(step)
    raise AssertionError("condition not reached in time")


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
            return {r["state"] for r in task_sql.list_tasks(conn)}

    def wait_all_success(self, timeout: float) -> None:
        wait_until(lambda: self.states() == {"success"}, timeout=timeout, step=0.2)

    def lease_owners(self) -> dict[int, str | None]:
        with self.engine.connect() as conn:
            return {r["shard_min"]: r["owner"] for r in lease_sql.load_leases(conn)}


def flag_workload(tmp_path: Path, db_url: str, n: int, timeout: float = 900) -> FlagWorkload:
    """``n`` tasks d0..d{n-1} (poke_interval 0.5 s) on flag files under ``tmp_path``, none landed yet."""
    home = tmp_path / "home"
    cfg = make_cfg(home, db_url, **LEASE)
    engine = make_engine(cfg.sql_alchemy_conn)
    init_db(engine)
    flags = [tmp_path / "flags" / f"f{i}" / "_SUCCESS" for i in range(n)]
    register(engine, [(f"d{i}", SuccessFileSensor(task_id="s", path=str(flags[i]), poke_interval=0.5,
                                                  timeout=timeout)) for i in range(n)], DAY, cfg)
    return FlagWorkload(cfg, engine, cli_env(home, db_url, **LEASE_ENV), flags)
