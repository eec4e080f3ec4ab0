"""Both catalog backends on one metastore service give the same answers: escaping, unicode, typed columns,
missing and unpartitioned tables, partial specs. Spark runs in one subprocess (the session's ``spark``
fixture has its own Derby); the thrift backend runs here, with no JVM. Also the thrift pool: URIs in
order, reconnecting, the socket timeout, and the answerer that picks the backend."""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any, Iterator

import pytest

from smartsensor.adapters.catalog.backends import answerer_factory
from smartsensor.adapters.catalog.batch import BatchChecker
from smartsensor.adapters.catalog.thrift_catalog import ThriftCatalog
from smartsensor.adapters.metastore_service_process import free_port
from smartsensor.config import Config
from smartsensor.sensors.checks import PartitionCheck, PathCheck
from smartsensor.sensors.errors import TransientCheckError
from tests.support.catalog_cases import CASES, DB
from tests.support.metastore_service import run_spark

pytestmark = pytest.mark.slow

SPARK_SIDE = r"""
import json
from smartsensor.config import load_config
from smartsensor.adapters.spark import get_spark
from smartsensor.adapters.catalog.batch import BatchChecker
from tests.support.catalog_cases import CASES, SETUP, outcome
spark = get_spark(load_config())
for sql in SETUP:
    spark.sql(sql)
answers = BatchChecker(spark).check_all(c for c, _ in CASES)
print(json.dumps([outcome(answers[c]) for c, _ in CASES]), flush=True)
"""


@pytest.fixture(scope="module")
def spark_answers(service: Config) -> list[Any]:
    """Land the tables through Spark on the service and answer every case with the spark backend."""
    return json.loads(run_spark(service, SPARK_SIDE).strip().splitlines()[-1])


def thrift(service: Config, timeout: float = 5.0, parallelism: int = 1) -> ThriftCatalog:
    return ThriftCatalog(service.metastore_uris, timeout, parallelism=parallelism)


@pytest.mark.parametrize("backend", ["spark", "thrift", "thrift, 3 at once"])
def test_both_backends_answer_the_same(backend: str, service: Config, spark_answers: list[Any]) -> None:
    from tests.support.catalog_cases import outcome

    if backend == "spark":
        got = spark_answers
    else:
        catalog = thrift(service, parallelism=3 if "at once" in backend else 1)
        checker = BatchChecker(lister=catalog, spark_provider=lambda: pytest.fail("no Spark here"))
        answers = checker.check_all(c for c, _ in CASES)
        got = [outcome(answers[c]) for c, _ in CASES]
        tables = len({c.table_key for c, _ in CASES})
        assert checker.catalog_calls <= tables and checker.schema_calls <= tables
    wrong = [(c, want, answer) for (c, want), answer in zip(CASES, got, strict=False) if answer != want]
    assert not wrong, wrong


def test_thrift_caches_columns_and_lists_once_per_table(service: Config, spark_answers: list[Any]) -> None:
    catalog = thrift(service)
    first = BatchChecker(lister=catalog)
    checks = [c for c, _ in CASES if c.table == "typed"]
    first.check_all(checks)
    assert (first.catalog_calls, first.schema_calls) == (1, 1)
    second = BatchChecker(lister=catalog)
    second.check_all(checks)
    assert (second.catalog_calls, second.schema_calls) == (1, 0)  # get_table cached by the catalog
    assert catalog.connects == 1
    # the metastore matches a narrowing value as a pattern: '.' also lists 'a b' (answer_checks is exact)
    listed = second.list_partitions(DB, "esc", {"ds": "a.b"})
    assert sorted(p["ds"] for p in listed) == ["a b", "a.b"]


def test_a_dead_uri_first_then_the_live_one(service: Config, spark_answers: list[Any]) -> None:
    dead = ("127.0.0.1", free_port())
    catalog = ThriftCatalog([dead, *service.metastore_uris], 5.0)
    assert BatchChecker(lister=catalog).list_partitions(DB, "typed", {}) == [{"ds": "2026-01-05", "hr": "0"}]
    assert catalog.connects == 1 and catalog._idle[0].uri == f"thrift://127.0.0.1:{service.get('metastore', 'port')}"
    all_dead = BatchChecker(lister=ThriftCatalog([dead], 5.0))
    [(check, answer)] = all_dead.check_all([CASES[0][0]]).items()
    assert isinstance(answer, TransientCheckError) and "no metastore reachable" in str(answer), answer


def test_a_closed_connection_reconnects(service: Config, spark_answers: list[Any]) -> None:
    catalog = thrift(service)
    checker = BatchChecker(lister=catalog)
    assert checker.list_partitions(DB, "typed", {}) == [{"ds": "2026-01-05", "hr": "0"}]
    catalog._idle[0].transport.close()  # as if the metastore had dropped the idle connection
    assert checker.list_partitions(DB, "typed", {}) == [{"ds": "2026-01-05", "hr": "0"}]
    assert catalog.connects == 2 and len(catalog._idle) == 1


@pytest.fixture
def silent_server() -> Iterator[tuple[str, int]]:
    """A port that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()
    stop.set()
    thread.join()
    for s in accepted:
        s.close()
    server.close()


def test_a_silent_metastore_times_out_as_configured(silent_server: tuple[str, int]) -> None:
    catalog = ThriftCatalog([silent_server], timeout=0.5)
    started = time.monotonic()
    [answer] = BatchChecker(lister=catalog).check_all([CASES[0][0]]).values()
    took = time.monotonic() - started
    assert isinstance(answer, TransientCheckError) and "read timeout" in str(answer), answer
    assert 0.4 < took < 3, took
    assert catalog._idle == []  # the connection was dropped


@pytest.mark.parametrize("parallelism", [1, 4])
def test_a_round_under_a_silent_metastore_lasts_a_few_calls_not_one_per_table(
    silent_server: tuple[str, int], parallelism: int
) -> None:
    """Issue 68: a round over 24 tables while the only metastore never answers. Each call is bounded (0.5 s), but
    the round was not: 24 calls one after another (on 1 connection) took 12 s and more. Once the round's first
    calls (2, or one per connection) have all timed out, the other tables are not asked: every check is a transient
    error, and the round ends within a few calls' bounds whatever the number of tables."""
    catalog = ThriftCatalog([silent_server], timeout=0.5, parallelism=parallelism)
    checks = [PartitionCheck(DB, f"t{i}", (("ds", "2026-12-01"),), True) for i in range(24)]
    started = time.monotonic()
    answers = BatchChecker(lister=catalog).check_all(checks)
    took = time.monotonic() - started
    assert all(isinstance(a, TransientCheckError) for a in answers.values()), answers
    refused = [a for a in answers.values() if str(a).startswith("not asked: the metastore failed")]
    assert len(refused) >= 24 - 2 * max(2, parallelism), answers
    assert took < 4.0, f"the round took {took:.1f} s"


def test_the_answerer_uses_thrift_and_no_spark_for_partitions_and_local_paths(
    service: Config, spark_answers: list[Any], tmp_path: Any
) -> None:
    assert service.resolved_catalog_backend == "thrift"
    make = answerer_factory(service, spark_provider=lambda: pytest.fail("Spark was started"))
    checker = make()
    assert isinstance(checker.lister, ThriftCatalog)  # type: ignore[attr-defined]  # a BatchChecker
    (tmp_path / "_SUCCESS").write_text("")
    here, gone = PathCheck((tmp_path / "_SUCCESS").as_uri()), PathCheck(f"file://{tmp_path}/nope")
    answers = checker.check_all([here, gone, CASES[0][0]])
    assert answers == {here: True, gone: False, CASES[0][0]: True}
    assert make().lister is checker.lister  # type: ignore[attr-defined]  # one catalog (and pool) per process


def test_a_silent_metastore_first_fails_over_to_the_live_one(
    silent_server: tuple[str, int], service: Config, spark_answers: list[Any]
) -> None:
    """The first URI accepts connections and never answers (a stalled or hung metastore): a call times out there,
    is tried once more on the next URI, which answers, and the silent one is tried last for the cool-off: the next
    calls go straight to the live one. (Before: every call connected to the silent one first and failed.)"""
    catalog = ThriftCatalog([silent_server, *service.metastore_uris], timeout=0.5)
    checker = BatchChecker(lister=catalog)
    started = time.monotonic()
    assert checker.list_partitions(DB, "typed", {}) == [{"ds": "2026-01-05", "hr": "0"}]
    first = time.monotonic() - started
    assert 0.4 < first < 5, first  # one timeout on the silent URI, then the live one
    started = time.monotonic()
    for _ in range(3):
        assert checker.list_partitions(DB, "typed", {}) == [{"ds": "2026-01-05", "hr": "0"}]
    assert time.monotonic() - started < 0.4 * 3, "a call went to the silent URI again"
    assert catalog.connects == 2  # the silent one (timed out) and the live one, kept in the pool
