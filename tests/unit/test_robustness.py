"""One bad value never gets in: exec fields bounded where they enter, database URLs and SQLite folders
checked before anything connects, a `worker --once` that wrote nothing says why, a user's poke() that
hangs is bounded. No database, no Spark; the rest of the robustness suite is in
tests/integration/test_robustness.py and tests/process/test_robustness.py."""

from __future__ import annotations

import math
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from smartsensor.adapters.sql.engine import DatabaseUrlError, make_engine, normalize_url
from smartsensor.sensors import SensorDefinitionError, SuccessFileSensor, TransientCheckError

# -- exec fields are bounded where they enter ---------------------------------------------------


@pytest.mark.parametrize(
    "field,value",
    [
        ("poke_interval", 10**12),
        ("poke_interval", 10**30),
        ("poke_interval", 1e-9),
        ("poke_interval", 0),
        ("poke_interval", math.nan),
        ("poke_interval", math.inf),
        ("timeout", 1e12),
        ("timeout", -1),
        ("retry_delay", 1e12),
        ("retry_delay", timedelta(days=400)),
        ("execution_timeout", 10**400),
        ("max_wait", -5),
        ("retries", 10**12),
        ("retries", 2.5),
        ("poke_interval", "60"),
        ("soft_fail", "yes"),
    ],
)
def test_exec_fields_out_of_bounds_are_refused_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(SensorDefinitionError, match=field) as info:
        SuccessFileSensor(task_id="t", path="/data/_SUCCESS", **{field: value})
    assert len(str(info.value)) < 300


def test_exec_fields_at_their_bounds_are_accepted() -> None:
    s = SuccessFileSensor(
        task_id="t",
        path="/data/_SUCCESS",
        poke_interval=0.1,
        timeout=timedelta(days=365),
        retry_delay=0,
        retries=1000,
        max_wait=365 * 86400,
    )
    assert (s.poke_interval, s.timeout, s.retries) == (0.1, 365 * 86400, 1000)


# -- the metadata DB URL ------------------------------------------------------------------------


def test_bare_postgres_schemes_mean_the_installed_driver() -> None:
    assert normalize_url("postgresql://u:p@h:5432/d").drivername == "postgresql+psycopg2"
    assert normalize_url("postgres://u@h/d").drivername == "postgresql+psycopg2"
    assert normalize_url("postgresql+psycopg2://u@h/d").drivername == "postgresql+psycopg2"
    assert normalize_url("mysql://u:p@h:3306/d").drivername == "mysql+pymysql"  # the metastore_db backend on MySQL
    with pytest.raises(DatabaseUrlError, match="not a database URL"):
        normalize_url("not a url at all")
    with pytest.raises(DatabaseUrlError, match="driver .* is not installed"):
        make_engine("postgresql+psycopg://u@127.0.0.1:1/d")


# -- SQLite folders ---------------------------------------------------------------------------


def test_sqlite_folder_is_created_only_under_the_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    outside = tmp_path / "elsewhere" / "deep"
    with pytest.raises(DatabaseUrlError, match="does not exist"):
        make_engine(f"sqlite:///{outside}/x.db", home=home)
    assert not outside.parent.exists()
    make_engine(f"sqlite:///{home}/sub/x.db", home=home).dispose()
    assert (home / "sub").is_dir()


# -- the CLI: a worker --once that wrote nothing says why ---------------------------------------


def test_worker_once_fenced_out_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    from smartsensor.cli.workers import EXIT_NOTHING_WRITTEN, _report_once
    from smartsensor.service.round.report import RoundResult

    with pytest.raises(SystemExit) as info:
        _report_once([RoundResult(0, 10, fenced_out=True)])
    assert info.value.code == EXIT_NOTHING_WRITTEN and "lost its lease" in capsys.readouterr().err


# -- a user's poke() that hangs or exits ------------------------------------------------------


def test_a_hanging_poke_is_bounded_and_not_piled_up() -> None:
    import threading
    import time

    from smartsensor.service.round.bounded_poke import BoundedPoker

    release = threading.Event()
    calls = []

    def hang() -> bool:
        calls.append(1)
        release.wait(60)
        return True

    poker = BoundedPoker(0.3)
    began = time.monotonic()
    first = poker.poke("stuck", hang)
    assert isinstance(first, TransientCheckError) and "did not return within 0.3 s" in str(first)
    assert time.monotonic() - began < 5
    second = poker.poke("stuck", hang)  # its earlier call still runs: not poked again
    assert isinstance(second, TransientCheckError) and "still running" in str(second) and len(calls) == 1
    assert poker.poke("other", lambda: True) is True  # a fresh helper serves everyone else
    assert isinstance(poker.poke("exits", lambda: sys.exit(3)), TransientCheckError)
    release.set()
    deadline = time.monotonic() + 30
    while poker.overrunning and time.monotonic() < deadline:
        time.sleep(0.05)
    assert poker.poke("stuck", lambda: False) is False  # returned at last: poked again
