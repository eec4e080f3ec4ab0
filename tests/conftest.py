"""Shared fixtures: a metadata DB per test on SQLite and on the throwaway PostgreSQL server, one
SparkSession for the whole run, a unique Hive database per test, and a clock the test moves.

Every test is marked with its layer, the folder it is in (`-m unit`, `-m "not process"`, ...); a unit
test that asks for a database or Spark is refused at collection."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from typing import Any, Generator, Iterator

import pytest

from scripts.airflow.stack import Processes
from smartsensor.config import Config, load_config
from tests.support.airflow_databases import AirflowDatabases
from tests.support.catalog_doubles import Clock
from tests.support.common import T0, initialised_engine, make_cfg
from tests.support.metastore_service import derby_service, mysql_service_fixture, pg_service_fixture  # noqa: F401 - fixtures
from tests.support.pg import PrivateServer, drop_pg_database, needs_test_pg, new_pg_database
from tests.support.run_seconds import CPU_PROPERTY, PhaseCpu, RunSeconds, cpu_property
from tests.support.tier import ALL, version_key

TESTS = Path(__file__).resolve().parent
LAYERS = ("unit", "integration", "process", "airflow")
# The Airflow provider is its own distribution (providers/airflow); its Airflow-free modules (the filter parser,
# the client, the shared poller) are tested here from the checkout, the rest inside real Airflow (tests/airflow).
sys.path.insert(0, str(TESTS.parent / "providers" / "airflow"))
NOT_IN_UNIT = {
    "db_url",
    "engine",
    "spark_home",
    "spark",
    "hive_db",
}  # a database or Spark (conftest's cfg needs db_url)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the xdist_group marks set here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wrong: list[str] = []
    for item in items:
        try:
            layer = Path(item.path).resolve().relative_to(TESTS).parts[0]
        except ValueError:  # not below tests/
            continue
        if layer not in LAYERS:
            wrong.append(
                f"{item.nodeid}: every test goes in tests/unit, tests/integration, tests/process or tests/airflow"
            )
            continue
        item.add_marker(layer)
        fixtures = set(item.fixturenames)  # type: ignore[attr-defined]  # pytest.Function, the only items here
        if layer == "unit" and NOT_IN_UNIT & fixtures:
            uses = ", ".join(sorted(NOT_IN_UNIT & fixtures))
            wrong.append(
                f"{item.nodeid}: a unit test uses no database or Spark (it asks for {uses}); "
                f"move it to tests/integration"
            )
        if {"pg_url", "private_pg"} & fixtures:  # skipped under a plain pytest, with no throwaway server
            item.add_marker(needs_test_pg)
        group = xdist_group(item, layer)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
    if wrong:
        raise pytest.UsageError("tests in the wrong layer:\n  " + "\n  ".join(wrong))
    mark_older_airflow_extended(items)
    if not ALL:
        extended = [item for item in items if item.get_closest_marker("extended")]
        if extended:
            config.hook.pytest_deselected(items=extended)
            items[:] = [item for item in items if not item.get_closest_marker("extended")]
            EXTENDED_LEFT_OUT.extend(item.nodeid for item in extended)


EXTENDED_LEFT_OUT: list[str] = []


def airflow_venv(item: pytest.Item) -> Path | None:
    """The Airflow venv an Airflow test runs in (its parameter ``airflow-X.Y.Z``), if any."""
    params = getattr(item, "callspec", None)
    for value in params.params.values() if params is not None else ():
        if isinstance(value, Path) and value.name.startswith("airflow-"):
            return value
    return None


def mark_older_airflow_extended(items: list[pytest.Item]) -> None:
    """CI runs the Airflow tests on the newest supported version; on the older ones only those marked
    ``every_version`` or ``older_versions``, the rest go to the extended tier (tests/support/tier.py). A test marked
    ``older_versions`` runs on the newest in the extended tier only: the newest's production-like deployments hold
    what it checks in CI."""
    venvs = {venv.name for item in items if (venv := airflow_venv(item)) is not None}
    if len(venvs) < 2:
        return
    newest = max(venvs, key=version_key)
    for item in items:
        venv = airflow_venv(item)
        if venv is None:
            continue
        older_only = item.get_closest_marker("older_versions") is not None
        if venv.name == newest and older_only:
            item.add_marker(pytest.mark.extended)
        elif venv.name != newest and not older_only and not item.get_closest_marker("every_version"):
            item.add_marker(pytest.mark.extended)


GROUPS_LOST = (
    "pytest-xdist's --dist loadgroup loses its groups under pytest {version} (pytest-dev/pytest-xdist#1386): "
    "the tests would run ungrouped, a SparkSession and an Airflow deployment per worker; install the pytest that "
    "setup.cfg's test extra names (./scripts/test.sh does)"
)


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("dist", "no") == "loadgroup" and tuple(map(int, pytest.__version__.split(".")[:2])) >= (9, 2):
        raise pytest.UsageError(GROUPS_LOST.format(version=pytest.__version__))


SECONDS = RunSeconds()
PHASE_CPU = PhaseCpu()


def _measures_cpu(config: pytest.Config) -> bool:
    return config.getoption("durations", None) is not None


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    if _measures_cpu(item.config):
        PHASE_CPU.begin()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """With ``--durations``: the CPU seconds of the phase just run go with its report (to the controller, under
    xdist), in the report's own copy of ``user_properties`` (the item's list is shared by its three reports)."""
    report = yield
    cpu = PHASE_CPU.lap() if _measures_cpu(item.config) else None
    if cpu is not None:
        report.user_properties = [*report.user_properties, (CPU_PROPERTY, round(cpu, 3))]
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    SECONDS.add(report.nodeid, report.when, report.duration, cpu_property(report.user_properties))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """With ``--durations``: the run's test seconds, and the CPU seconds, by xdist group and by folder, and the
    modules and tests costing the most CPU (tests.support.run_seconds.py)."""
    if EXTENDED_LEFT_OUT:
        terminalreporter.write_line(
            f"{len(EXTENDED_LEFT_OUT)} tests of the extended tier left out: ./scripts/test.sh --all runs them"
        )
    if config.getoption("durations", None) is not None and SECONDS.by_group:
        terminalreporter.section("test seconds")
        for line in SECONDS.lines(top=40, top_tests=40):
            terminalreporter.write_line(line)
        if dump := os.environ.get("SMARTSENSOR_TEST_SECONDS_JSON"):
            SECONDS.dump(Path(dump))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Under ``--dist loadgroup`` (in a worker), refuse to run with the groups lost however it happens: pytest-xdist
    marks a grouped test by a suffix to its node id, which pytest 9.2 no longer lets it add."""
    if getattr(session.config.option, "loadgroup", False) and any(
        item.get_closest_marker("xdist_group") and "@" not in item.nodeid for item in session.items
    ):
        raise pytest.UsageError(GROUPS_LOST.format(version=pytest.__version__))


# The services a test process starts once and keeps (session fixtures): their tests run in one worker, the "spark"
# group, so that each starts once a run. A module that asks for them only through getfixturevalue says so with
# ``USES_SERVICES_GROUP = True``.
SERVICES_GROUP_FIXTURES = {"spark", "pg_service", "mysql_service"}


def xdist_group(item: pytest.Item, layer: str) -> str | None:
    """The tests that must run in one worker process under ``--dist loadgroup`` (./scripts/test.sh runs several):
    every test of the one SparkSession and of the metastore services on PostgreSQL and MariaDB; every test of one
    Airflow version (an Airflow deployment takes most of the machine's two cores while it starts: one per version at
    a time, and the deployment a module shares is set up once); and the tests that share another module-scoped
    fixture. Every other test goes wherever a worker is free."""
    fixtures = set(item.fixturenames)  # type: ignore[attr-defined]  # pytest.Function
    if SERVICES_GROUP_FIXTURES & fixtures or getattr(item.module, "USES_SERVICES_GROUP", False):  # type: ignore[attr-defined]
        return "spark"
    venv = airflow_venv(item) if layer == "airflow" else None
    if venv is not None:
        return venv.name
    info = item._fixtureinfo  # type: ignore[attr-defined]  # pytest.Function
    if any(defs and defs[-1].scope in ("module", "package") for defs in info.name2fixturedefs.values()):
        return item.module.__name__  # type: ignore[attr-defined]
    return None


@pytest.fixture(scope="session")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Config]:
    """A Hive metastore service on embedded Derby, started by the first test of this process that needs it and
    shared by every module after it (each uses databases of its own names); stopped when the process ends."""
    with derby_service(tmp_path_factory.mktemp("metastore-home")) as cfg:
        yield cfg


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    """Every process an Airflow test starts (an ``AirflowStack``'s components, smartsensor's beside them),
    stopped with their children whatever happens."""
    procs = Processes(tmp_path / "logs")
    try:
        yield procs
    finally:
        procs.stop()


@pytest.fixture(scope="session")
def airflow_databases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowDatabases]:
    """Airflow's databases, migrated once per version in this test process and copied for each user."""
    databases = AirflowDatabases(tmp_path_factory.mktemp("airflow-databases"))
    try:
        yield databases
    finally:
        databases.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=needs_test_pg)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty metadata database URL: SQLite file, or a new database on the test server."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'meta.db'}"
        return
    name, url = new_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(name)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh database on the throwaway PostgreSQL server, dropped afterwards (tests that need PostgreSQL alone;
    marked ``needs_test_pg`` at collection)."""
    name, url = new_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(name)


@pytest.fixture
def private_pg() -> Iterator[PrivateServer]:
    """A PostgreSQL server of the test's own, for a test that stops and starts it: the shared one stays up for the
    tests beside it. Stopped and deleted afterwards (marked ``needs_test_pg`` at collection)."""
    server = PrivateServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def cfg_overrides() -> dict[str, str]:
    """``section__key`` overrides for ``cfg`` (and so ``engine``); a test module overrides this fixture."""
    return {}


@pytest.fixture
def cfg(tmp_path: Path, db_url: str, cfg_overrides: dict[str, str]) -> Config:
    return make_cfg(tmp_path / "home", db_url, **cfg_overrides)


@pytest.fixture
def engine(cfg: Config) -> Iterator[Any]:
    """An engine on ``cfg``'s metadata database at the schema's head (``initialised_engine``)."""
    eng = initialised_engine(cfg.sql_alchemy_conn)
    yield eng
    eng.dispose()


@pytest.fixture
def clock() -> Clock:
    """A clock that moves only when the test says so, starting at T0."""
    return Clock(T0)


@pytest.fixture(scope="session", autouse=True)
def no_orphaned_metastores() -> Iterator[None]:
    """Whatever a test did (or a timeout cut short), no metastore JVM started by this run outlives it."""
    yield
    from smartsensor.adapters import metastore_service_process

    left = metastore_service_process.terminate_started_here()
    if left:
        print(f"\nstopped {len(left)} metastore JVM(s) left running by tests: {left}")


@pytest.fixture(scope="session")
def spark_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("spark-home")


@pytest.fixture(scope="session")
def spark(spark_home: Path) -> Any:
    """The one SparkSession of the test run (embedded Derby metastore in a temp folder)."""
    from smartsensor.adapters.spark import get_spark

    cfg = load_config(environ={"SMARTSENSOR_HOME": str(spark_home)})
    return get_spark(cfg)


@pytest.fixture
def hive_db(spark: Any) -> Iterator[str]:
    """A unique Hive database for one test, dropped with CASCADE afterwards."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    spark.sql(f"CREATE DATABASE {name}")
    yield name
    spark.sql(f"DROP DATABASE IF EXISTS {name} CASCADE")
