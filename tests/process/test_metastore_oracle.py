"""The metastore as the oracle (issue 42, item 3): a differential property test.

Hypothesis generates a table layout (1-3 partition columns of type string, int or date, in a random order), a few
partitions, and checks on them: exact partition names (``NamedHivePartitionSensor``), partial specs and
``HivePartitionSensor`` filters (equalities joined by AND, parsed by the Airflow provider's ``hive_filter``, as a
task's filter is). Each example lands on a fresh table of a real Hive metastore service, through its thrift API.
The service answers every check (``get_partition_by_name`` for a name, ``get_partitions_by_filter`` for a spec or
filter, with hmsclient's own client), and smartsensor answers the same checks through one catalog backend:
``thrift``, ``spark`` (the session's SparkSession, where the same layout is landed through Spark SQL), or
``metastore_db`` on PostgreSQL and on MariaDB, with the partition feed off and on (one catalog, and so one feed, for
all the examples of a backend, as a worker keeps it). Every answer must be the service's: no disagreement, no false
success. A filter smartsensor does not support (a range, an OR) is refused, never answered.

Generated values and what is left out:

- string values are made of letters in mixed case, digits, spaces, ``/ = : % ' "``, ``.-_``, the words
  ``and``/``AND``, an escape look-alike (``%2F``) and unicode (``ü É 日本``); int values are 0..99999 and date
  values 1900..2100, written canonically (``7``, ``2026-01-05``), as Spark stores them;
- no empty value (Hive stores it as ``__HIVE_DEFAULT_PARTITION__``), no control character (smartsensor refuses
  them) and no backslash (an escape in Spark SQL's literals; not tried in Hive's filter grammar);
- a value with both quote characters cannot be written in Hive's filter grammar, so it appears in names only,
  never in a spec or filter check; no negative int (a literal of Hive's filter grammar not tried here);
- on MariaDB, no value ends with a space: the metastore's tables compare with PAD SPACE there, so its filter finds
  ``a`` for ``a `` and ``get_partition_by_name`` fails ("Expecting a partition with name ds=a , but metastore is
  returning ... ds=a"); it is no oracle for those values (smartsensor compares them exactly, as on PostgreSQL);
- in a spec or filter, only the string columns go to ``get_partitions_by_filter``: a filter on an int column was
  refused now and then, depending on what other tables held ("Filtering is supported only on partition keys of
  type string": the metastore's JDO fallback, taken when its direct SQL fails). The int and date terms are matched
  on the partitions it lists, as numbers and as dates.

``SMARTSENSOR_ORACLE_EXAMPLES`` sets the examples per backend (CI: ``CI_EXAMPLES``, ``CI_SPARK_EXAMPLES`` on Spark;
the slow run: 2000 or more). Examples are derandomized (the same ones in every CI run) and each has its own table.
Each backend prints its figures (examples, checks, disagreements, false successes) on one ``oracle:`` line; the
test's timeout grows with the examples asked for.
"""

from __future__ import annotations

import copy
import os
import uuid
from dataclasses import dataclass, field
from datetime import date
from types import SimpleNamespace
from typing import Any, Callable, Iterator

import pytest
from hmsclient.genthrift.hive_metastore.ttypes import (
    AddPartitionsRequest,
    Database,
    FieldSchema,
    NoSuchObjectException,
    Partition,
)
from hmsclient.hmsclient import HMSClient
from hypothesis import HealthCheck, given, settings, strategies as st

from scripts.harness.hive_tables import parquet_table
from smartsensor.adapters.catalog.batch import BatchChecker
from smartsensor.adapters.catalog.metastore_db import MetastoreDbCatalog
from smartsensor.adapters.catalog.partition_feed import PartitionFeed
from smartsensor.adapters.catalog.thrift_catalog import ThriftCatalog
from smartsensor.config import Config
from smartsensor.sensors import HivePartitionSensor, NamedHivePartitionSensor
from smartsensor.sensors.checks import Check
from smartsensor.sensors.errors import SensorDefinitionError
from smartsensor.sensors.partitions import quote_identifier, sql_string_literal
from smartsensor_airflow.checks import check_of
from smartsensor_airflow.hive_filter import UnsupportedPartitionFilter, parse_partition_filter
from tests.support.catalog_cases import outcome
from tests.support.mysql import needs_test_mysql
from tests.support.pg import needs_test_pg

pytestmark = pytest.mark.slow
USES_SERVICES_GROUP = True  # its backends ask for spark, pg_service or mysql_service by name (tests/conftest.py)

CI_EXAMPLES = 30
EXAMPLES = int(os.environ.get("SMARTSENSOR_ORACLE_EXAMPLES", "0")) or None  # None: CI's
# Spark lands each example through Spark SQL too (~3 s an example on a loaded 2-core machine): fewer in CI.
CI_SPARK_EXAMPLES = 15

COLUMNS = ("ds", "hr", "cty")
PIECES = tuple("a B zZ 0 7 / = : % ' \" . - _ ü É 日本 %2F k=v/".split(" ")) + (" ", " and ", " AND ")
# Characters Hive escapes in a partition name as %XX (its FileUtils.escapePathName, outside Windows).
HIVE_ESCAPED = frozenset("\"#%'*/:=?\\{[]^\x7f") | {chr(c) for c in range(1, 32)}


def hive_name(layout: list[tuple[str, str]], values: tuple[str, ...]) -> str:
    """A partition's name as Hive writes it: ``col=value`` in column order, values escaped."""
    return "/".join(
        f"{col}=" + "".join(f"%{ord(ch):02X}" if ch in HIVE_ESCAPED else ch for ch in value)
        for (col, _), value in zip(layout, values, strict=True)
    )


def filter_literal(kind: str, value: str) -> str | None:
    """``value`` as a literal of Hive's filter grammar (None: it cannot be written there)."""
    if kind == "int":
        return value
    if '"' not in value:
        return f'"{value}"'
    if "'" not in value:
        return f"'{value}'"
    return None


@dataclass(frozen=True)
class Probe:
    """One check of an example: a full partition name, a partial spec or a filter (an AND of equalities)."""

    kind: str  # "name", "spec" or "filter"
    spec: tuple[tuple[str, str], ...]  # (column, value), in column order; a name gives every column
    joiner: str = " AND "


@dataclass
class Example:
    """A table layout, the partitions landed on it and the checks made on them."""

    layout: list[tuple[str, str]]  # (column, type) in the table's order
    rows: list[tuple[str, ...]]
    probes: list[Probe]


VALUES: dict[str, st.SearchStrategy[str]] = {
    "string": st.lists(st.sampled_from(PIECES), min_size=1, max_size=5).map("".join),
    "int": st.integers(0, 99_999).map(str),
    "date": st.dates(date(1900, 1, 1), date(2100, 12, 31)).map(date.isoformat),
}


def variants(kind: str, value: str, landed: list[str], pad_space: bool = False) -> list[str]:
    """Values a check may ask for in a column: landed ones and near misses (case, one more character, +1)."""
    out = [*landed, value + "x"]
    if kind == "string":
        out += [value.swapcase(), value.upper(), value + " ", " " + value, value.replace("/", "%2F")]
    elif kind == "int":
        out.append(str(int(value) + 1))
    else:
        out.append(date.fromordinal(date.fromisoformat(value).toordinal() + 1).isoformat())
    if pad_space:
        out = [v.rstrip() for v in out]
    return [v for v in out if v and (kind != "int" or v.isdigit()) and (kind != "date" or _is_date(v))]


def _is_date(text: str) -> bool:
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return len(text) == 10


@st.composite
def examples(draw: st.DrawFn, pad_space: bool = False) -> Example:
    """A layout, 1-5 distinct partitions, and up to 6 checks on them; with ``pad_space`` (a metastore on MariaDB),
    no value ends with a space."""
    values = dict(VALUES, string=VALUES["string"].map(lambda v: v.rstrip() or "a")) if pad_space else VALUES
    width = draw(st.integers(1, 3))
    names = draw(st.permutations(COLUMNS))[:width]
    layout = [(name, draw(st.sampled_from(("string", "int", "date")))) for name in names]
    rows = draw(st.lists(st.tuples(*(values[kind] for _, kind in layout)), min_size=1, max_size=5, unique=True))
    probes: list[Probe] = []
    for _ in range(draw(st.integers(1, 6))):
        base = draw(st.sampled_from(rows))
        picked = [
            draw(st.sampled_from(variants(kind, base[i], [r[i] for r in rows], pad_space)))
            for i, (_, kind) in enumerate(layout)
        ]
        kind = draw(st.sampled_from(("name", "spec", "filter")))
        if kind == "name":
            probes.append(Probe("name", tuple((c, v) for (c, _), v in zip(layout, picked, strict=True))))
            continue
        keep = draw(st.lists(st.booleans(), min_size=width, max_size=width))
        spec = tuple(
            (col, v)
            for (col, ctype), v, k in zip(layout, picked, keep, strict=True)
            if k and filter_literal(ctype, v) is not None
        )
        if spec:
            probes.append(Probe(kind, spec, draw(st.sampled_from((" AND ", " and ", "  AND  ")))))
    return Example(layout, rows, probes)


def same(kind: str, stored: str, asked: str) -> bool:
    """Whether an int or date partition value equals the one asked for, compared as Hive compares them."""
    if kind == "int":
        return int(stored) == int(asked)
    return date.fromisoformat(stored) == date.fromisoformat(asked)


def filter_text(probe: Probe, types: dict[str, str]) -> str:
    """The Hive filter of a spec or filter probe: ``col = literal`` joined by its AND."""
    return probe.joiner.join(f"{col} = {filter_literal(types[col], v)}" for col, v in probe.spec)


class Oracle:
    """The real metastore service, over hmsclient's own thrift client: landing, and the answer to each check."""

    def __init__(self, service: Config, db: str) -> None:
        host, port = service.metastore_uris[0]
        self.client = HMSClient(host=host, port=port)
        self.client.open()
        self.warehouse = service.get("spark", "warehouse_dir")
        self.db = db
        location = f"file://{self.warehouse}/{db}.db"
        self.client.create_database(Database(name=db, description="", locationUri=location, parameters={}))

    def land(self, table: str, example: Example) -> None:
        """Create ``table`` with the example's layout and add its partitions (their locations made by Hive)."""
        keys = [FieldSchema(col, kind, None) for col, kind in example.layout]
        created = parquet_table(self.db, table, f"file://{self.warehouse}/{self.db}.db/{table}", keys)
        self.client.create_table(created)
        sd = created.sd
        parts = []
        for row in example.rows:
            part_sd = copy.deepcopy(sd)
            part_sd.location = None
            parts.append(Partition(values=list(row), dbName=self.db, tableName=table, sd=part_sd, parameters={}))
        self.client.add_partitions_req(
            AddPartitionsRequest(dbName=self.db, tblName=table, parts=parts, ifNotExists=False, needResult=False)
        )

    def answer(self, table: str, probe: Probe, types: dict[str, str], layout: list[tuple[str, str]]) -> bool:
        """The metastore's answer: the partition named exists, or some partition matches the spec or filter."""
        if probe.kind == "name":
            name = hive_name(layout, tuple(v for _, v in probe.spec))
            try:
                self.client.get_partition_by_name(self.db, table, name)
            except NoSuchObjectException:
                return False
            return True
        strings = Probe(probe.kind, tuple((c, v) for c, v in probe.spec if types[c] == "string"), probe.joiner)
        if strings.spec:
            listed = self.client.get_partitions_by_filter(self.db, table, filter_text(strings, types), -1)
        else:
            listed = self.client.get_partitions(self.db, table, -1)
        position = {col: i for i, (col, _) in enumerate(layout)}
        return any(
            all(same(types[c], part.values[position[c]], v) for c, v in probe.spec if types[c] != "string")
            for part in listed
        )

    def close(self) -> None:
        """Close the connection. The database stays: the session's service, and its database, go when the test
        process ends (this service's ``drop_database`` with cascade fails on a class missing from its classpath)."""
        self.client.close()


def product_check(db: str, table: str, probe: Probe, layout: list[tuple[str, str]]) -> Check:
    """smartsensor's check for a probe, made as a task's is: a sensor's checks, a filter parsed by the provider."""
    if probe.kind == "name":
        name = f"{db}.{table}/{hive_name(layout, tuple(v for _, v in probe.spec))}"
        [check] = NamedHivePartitionSensor(task_id="t", partition_names=[name]).checks()
        return check
    if probe.kind == "spec":
        partition = dict(probe.spec)
    else:
        partition = parse_partition_filter(filter_text(probe, dict(layout)))
    [check] = HivePartitionSensor(task_id="t", table=f"{db}.{table}", partition=partition).checks()
    return check


@dataclass
class Figures:
    """What one backend's run saw."""

    examples: int = 0
    checks: int = 0
    disagreements: list[str] = field(default_factory=list)
    false_successes: int = 0


@dataclass
class Backend:
    """A catalog backend under test: the service whose answers are the oracle's, and a checker per example."""

    service: Config
    checker: Callable[[], BatchChecker]
    land: Callable[[str, str, Example], None] = lambda db, table, example: None
    close: Callable[[], None] = lambda: None


class SparkSide:
    """The session's SparkSession (its own metastore), where each example's layout and partitions land too."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.dbs: set[str] = set()

    def land(self, db: str, table: str, example: Example) -> None:
        if db not in self.dbs:
            self.spark.sql(f"CREATE DATABASE {db}")
            self.dbs.add(db)
        cols = ", ".join(f"{quote_identifier(col)} {kind.upper()}" for col, kind in example.layout)
        self.spark.sql(f"CREATE TABLE {db}.{table} (x INT) PARTITIONED BY ({cols}) STORED AS PARQUET")
        parts = " ".join(
            "PARTITION ("
            + ", ".join(
                f"{quote_identifier(col)} = {sql_string_literal(v)}"
                for (col, _), v in zip(example.layout, row, strict=True)
            )
            + ")"
            for row in example.rows
        )
        self.spark.sql(f"ALTER TABLE {db}.{table} ADD {parts}")

    def close(self) -> None:
        """Drop the databases made here (the session's SparkSession outlives this test)."""
        for db in self.dbs:
            self.spark.sql(f"DROP DATABASE IF EXISTS {db} CASCADE")


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """The backend named by the test's parameter, on the test process's metastore service on PostgreSQL or MariaDB
    (thrift and spark: PostgreSQL's)."""
    name: str = request.param
    service, url = request.getfixturevalue("mysql_service" if "mysql" in name else "pg_service")
    if name == "thrift":
        catalog = ThriftCatalog(service.metastore_uris, 10.0)
        made = Backend(service, lambda: BatchChecker(lister=catalog), close=catalog.close)
    elif name == "spark":
        side = SparkSide(request.getfixturevalue("spark"))
        made = Backend(service, lambda: BatchChecker(side.spark), land=side.land, close=side.close)
    else:
        db_catalog = MetastoreDbCatalog.from_url(url, 10.0, PartitionFeed() if name.endswith("feed") else None)
        made = Backend(service, lambda: BatchChecker(lister=db_catalog), close=db_catalog.close)
    try:
        yield made
    finally:
        made.close()


BACKENDS = [
    pytest.param("thrift", marks=needs_test_pg),
    pytest.param("spark", marks=needs_test_pg),
    pytest.param("metastore_db-postgresql", marks=needs_test_pg),
    pytest.param("metastore_db-postgresql-feed", marks=needs_test_pg),
    pytest.param("metastore_db-mysql", marks=needs_test_mysql),
    pytest.param("metastore_db-mysql-feed", marks=needs_test_mysql),
]


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.timeout(600 + 3 * (EXAMPLES or 0))  # the slow run: ~0.3 s an example (Spark: ~2 s), loaded machine
def test_every_backend_answers_as_the_metastore_does(backend: Backend, request: pytest.FixtureRequest) -> None:
    """Each generated example, on its own table of one database per backend: smartsensor's answer to each check is
    the metastore's (a shrunk counter-example names the check, the layout and the partitions)."""
    db = f"oracle_{uuid.uuid4().hex[:10]}"
    oracle = Oracle(backend.service, db)
    figures = Figures()
    tables = iter(range(1_000_000))
    wanted = EXAMPLES or (CI_SPARK_EXAMPLES if request.node.callspec.id == "spark" else CI_EXAMPLES)

    @settings(
        max_examples=wanted,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(examples(pad_space="mysql" in request.node.callspec.id))
    def agrees(example: Example) -> None:
        table = f"t{next(tables)}"
        oracle.land(table, example)
        backend.land(db, table, example)
        types = dict(example.layout)
        checks = [product_check(db, table, probe, example.layout) for probe in example.probes]
        answers = backend.checker().check_all(checks)
        figures.examples += 1
        for probe, check in zip(example.probes, checks, strict=True):
            want = oracle.answer(table, probe, types, example.layout)
            got = outcome(answers[check])
            figures.checks += 1
            if got is not want:
                figures.false_successes += got is True
                figures.disagreements.append(f"{probe} on {example.layout} {example.rows}: {got!r} != {want!r}")
            assert got is want, (
                f"{request.node.callspec.id}: {probe.kind} {dict(probe.spec)} on layout {example.layout} "
                f"with partitions {example.rows}: smartsensor says {got!r}, the metastore {want!r}"
            )

    try:
        agrees()
    finally:
        print(
            f"\noracle: {request.node.callspec.id}: {figures.examples} examples, {figures.checks} checks, "
            f"{len(figures.disagreements)} disagreements, {figures.false_successes} false successes"
        )
        for line in figures.disagreements[:5]:
            print(f"oracle:   {line}")
        oracle.close()
    assert figures.examples >= wanted and figures.checks > figures.examples
    assert not figures.disagreements and figures.false_successes == 0


@pytest.mark.parametrize("text", ["ds > '2026-11-22'", "ds = 'a' OR ds = 'b'", "ds <> 'a'"])
@needs_test_pg
def test_a_filter_smartsensor_does_not_support_is_refused_never_answered(
    text: str, pg_service: tuple[Config, str]
) -> None:
    """The metastore answers these filters, but smartsensor has no answer for them: the provider refuses the filter
    (its sensor then waits as Airflow's own would, the classic path: ``sensors.py`` catches exactly this error),
    and a task of the sensors library with that text is refused as it is defined, never registered."""
    service, _ = pg_service
    oracle = Oracle(service, f"oracle_{uuid.uuid4().hex[:10]}")
    try:
        oracle.land("t", Example([("ds", "string")], [("a",), ("2026-11-23",)], []))
        assert oracle.client.get_partitions_by_filter(oracle.db, "t", text, -1)  # the metastore does answer it
        task = SimpleNamespace(table=f"{oracle.db}.t", schema="default", partition=text)
        with pytest.raises(UnsupportedPartitionFilter, match="only equalities joined by AND"):
            check_of("HivePartitionSensor", task)
        with pytest.raises(SensorDefinitionError):
            HivePartitionSensor(task_id="t", table=f"{oracle.db}.t", partition=text)
    finally:
        oracle.close()
