"""Answer many checks with at most one catalog call per (db, table) and one FS call per path.

For each table the checker lists partitions once through its PartitionLister (the SparkSession's
external catalog, or the metastore's thrift API), narrowed inside the metastore by the plain string values
common to every check on that table (a superset), then answers each check by set membership on the
unescaped listing, its values first cast as Spark stores them for typed partition columns (``hr=00`` is listed
as ``hr=0`` on an int column; see smartsensor.adapters.catalog.partition_types).
Calls are counted in code (``catalog_calls``, ``fs_calls``, and ``schema_calls`` for the cached
column-type look-ups).
"""

from __future__ import annotations

import logging
import os
import time
from collections import defaultdict
from typing import Any, Callable, Iterable, Sequence

from smartsensor.adapters.catalog.catalog_errors import classify_error
from smartsensor.adapters.catalog.partition_types import narrowing_spec
from smartsensor.adapters.catalog.spark_catalog import SparkLister
from smartsensor.hive_filter.names import TableName, parse_spec
from smartsensor.ports import AnsweredListing, BatchLister, ListingRequest, PartitionLister, PartitionTypeCache
from smartsensor.sensors.checks import Check, PartitionCheck, PathCheck
from smartsensor.sensors.errors import CheckError, PermanentCheckError, TransientCheckError, first_line

log = logging.getLogger(__name__)


def parse_listing_row(row: str) -> dict[str, str]:
    """``ds=2024-01-01 10%3A00/hr=a%2Fb`` → {'ds': '2024-01-01 10:00', 'hr': 'a/b'} (keys lower-cased)."""
    return {column.lower(): value for column, value in parse_spec(row)}


def answer_checks(
    db: str,
    table: str,
    listing: list[dict[str, str]],
    checks: list[PartitionCheck],
    columns: set[str] | None = None,
) -> dict[Check, bool | CheckError]:
    """Answer checks on one table from its partition listing (pure; no catalog call).

    The listing is indexed once: exact checks are set lookups, partial ones intersect per-pair
    sets, so answering stays linear in checks + partitions instead of checks x partitions. The table's
    partition ``columns`` are those of the listing's rows unless given (a listing narrowed to the checks'
    own partitions may be empty).
    """
    if columns is None:
        columns = set(listing[0]) if listing else None
    exact_index = {frozenset(p.items()) for p in listing}
    pair_index: dict[tuple[str, str], set[int]] = defaultdict(set)
    for i, p in enumerate(listing):
        for pair in p.items():
            pair_index[pair].add(i)
    results: dict[Check, bool | CheckError] = {}
    for check in checks:
        spec = dict(check.spec)
        if columns is not None and not set(spec) <= columns:
            unknown = sorted(set(spec) - columns)
            results[check] = PermanentCheckError(
                f"{db}.{table}: {unknown} not partition column(s) (columns: {sorted(columns)})"
            )
        elif check.exact and columns is not None and set(spec) != columns:
            results[check] = PermanentCheckError(
                f"{db}.{table}: a partition name must give every partition column {sorted(columns)}, "
                f"got {sorted(spec)} (HivePartitionSensor waits on a partial spec)"
            )
        elif check.exact:
            results[check] = frozenset(check.spec) in exact_index
        elif not check.spec:
            results[check] = bool(listing)
        else:
            matches = set.intersection(*(pair_index.get(pair, set()) for pair in check.spec))
            results[check] = bool(matches)
    return results


def local_path(uri: str) -> str:
    """``file:///a/b`` (or ``file://host/a/b``) → ``/a/b``, taken literally as Hadoop's Path takes it."""
    rest = uri[len("file://") :]
    return rest if rest.startswith("/") else "/" + rest.partition("/")[2]


class _LazySparkLister:
    """The Spark catalog backend, its session started by the first listing or column-type look-up."""

    def __init__(self, spark: Callable[[], Any]) -> None:
        self._spark = spark
        self._lister: SparkLister | None = None

    def _started(self) -> SparkLister:
        if self._lister is None:
            self._lister = SparkLister(self._spark())
        return self._lister

    @property
    def types(self) -> PartitionTypeCache:
        return self._started().types

    def list_rows(self, db: str, table: str, spec: dict[str, str], columns: dict[str, str]) -> list[str] | None:
        return self._started().list_rows(db, table, spec, columns)


class BatchChecker:
    """Answers checks through one catalog backend; one instance per round keeps the counters per round."""

    def __init__(
        self, spark: Any = None, lister: PartitionLister | None = None, spark_provider: Callable[[], Any] | None = None
    ) -> None:
        """Partitions through ``lister`` (default: the external catalog of ``spark``); Spark itself, for paths
        that are not file:// and for user sensors, is ``spark`` or made by ``spark_provider`` on first use.

        With a provider and neither ``spark`` nor ``lister``, Spark starts only when a check needs it: a
        partition, a path that is not file://, or a user sensor reading ``spark``. If it cannot start, each of
        those gets a TransientCheckError ("Spark unavailable: ..."), tried once per checker (per round).
        """
        self._spark = spark
        self._spark_provider = spark_provider
        self._spark_error: TransientCheckError | None = None
        if lister is not None:
            self.lister: PartitionLister = lister
        elif spark is None and spark_provider is not None:
            self.lister = _LazySparkLister(lambda: self.spark)
        else:
            self.lister = SparkLister(spark)
        self.catalog_calls = 0
        self.fs_calls = 0
        self.schema_calls = 0
        self.catalog_seconds = 0.0

    @property
    def types(self) -> PartitionTypeCache:
        """The catalog backend's cache of partition column types."""
        return self.lister.types

    @property
    def spark(self) -> Any:
        """The SparkSession, started now if it was not yet (None without one or a provider). Raises
        TransientCheckError if the provider failed, now or earlier in this checker's life."""
        if self._spark is None and self._spark_provider is not None:
            if self._spark_error is None:
                try:
                    self._spark = self._spark_provider()
                except Exception as exc:  # noqa: BLE001 - no Java, the JVM failing to start: an outage
                    log.warning("cannot start Spark: %s", first_line(exc))
                    self._spark_error = TransientCheckError(f"Spark unavailable: {first_line(exc)}")
            if self._spark_error is not None:
                raise self._spark_error
        return self._spark

    def retry_spark(self) -> None:
        """Let the next use of ``spark`` ask the provider again after a failed start: a checker that outlives a
        round (a classic run keeps one for all its pokes) tries once per poke, as each round's checker does."""
        self._spark_error = None

    def check_all(self, checks: Iterable[Check]) -> dict[Check, bool | CheckError]:
        """Answer every check: True/False, or a TransientCheckError / PermanentCheckError."""
        by_table: dict[TableName, list[PartitionCheck]] = defaultdict(list)
        paths: set[PathCheck] = set()
        for check in set(checks):
            if isinstance(check, PartitionCheck):
                by_table[check.table_key].append(check)
            elif isinstance(check, PathCheck):
                paths.add(check)
            else:
                raise TypeError(f"unknown check {check!r}")
        results: dict[Check, bool | CheckError] = {}
        if by_table and hasattr(self.lister, "list_tables"):
            results.update(self._check_tables_at_once(by_table))
        else:
            for (db, table), table_checks in by_table.items():
                results.update(self._check_table(db, table, table_checks))
        for path_check in paths:
            results[path_check] = self._check_path(path_check)
        return results

    def _check_table(self, db: str, table: str, checks: list[PartitionCheck]) -> dict[Check, bool | CheckError]:
        common = set(checks[0].spec)
        for check in checks[1:]:
            common &= set(check.spec)
        try:
            listing = self.list_partitions(db, table, dict(sorted(common)))
        except CheckError as exc:
            if isinstance(exc, PermanentCheckError):
                self.types.forget(db, table)
            return {c: exc for c in checks}
        if listing is None:  # table or database missing: not landed yet
            self.types.forget(db, table)
            return {c: False for c in checks}
        if not listing:
            return {c: False for c in checks}
        try:
            normalized = self._normalize(db, table, checks)
        except CheckError as exc:
            return {c: exc for c in checks}
        if normalized is None:  # dropped between the two calls
            return {c: False for c in checks}
        results: dict[Check, bool | CheckError] = {}
        ready: list[tuple[PartitionCheck, PartitionCheck]] = []
        for check, spec in zip(checks, normalized, strict=False):
            if isinstance(spec, CheckError):
                results[check] = spec
            else:
                ready.append((check, PartitionCheck(db, table, spec, check.exact)))
        answers = answer_checks(db, table, listing, [n for _, n in ready])
        for check, as_stored in ready:
            results[check] = answers[as_stored]
        return results

    def _check_tables_at_once(self, by_table: dict[TableName, list[PartitionCheck]]) -> dict[Check, bool | CheckError]:
        """A BatchLister's round: the column types of uncached tables in one go, every check normalized, then
        every table listed in one go (narrowed to what the checks need), and each check answered."""
        lister: BatchLister = self.lister  # type: ignore[assignment]
        results: dict[Check, bool | CheckError] = {}
        requests: list[ListingRequest] = []
        ready: dict[TableName, list[tuple[PartitionCheck, PartitionCheck]]] = {}
        uncached = [key for key in by_table if self.types.cached(*key) is None]
        fetched: dict[TableName, dict[str, str] | None | CheckError] = {}
        if uncached:
            started = time.perf_counter()
            fetched, calls = lister.fetch_types(uncached)
            self.schema_calls += calls
            self.catalog_seconds += time.perf_counter() - started
        for (db, table), checks in by_table.items():
            prepared = self._prepare(db, table, checks, results, fetched)
            if prepared is not None:
                requests.append(prepared[0])
                ready[prepared[0].table_name] = prepared[1]
        started = time.perf_counter()
        listings, calls = lister.list_tables(requests) if requests else ({}, 0)
        # A per-table backend counts a call for every table asked about, as the table-by-table path does (a
        # missing table's look-up included); one that lists them all at once counts its statements.
        self.catalog_calls += len(by_table) if getattr(lister, "calls_per_table", False) else calls
        self.catalog_seconds += time.perf_counter() - started
        for request in requests:
            key = request.table_name
            pairs = ready[key]
            listing = listings.get(key)
            if isinstance(listing, CheckError):
                if isinstance(listing, PermanentCheckError):
                    self.types.forget(*key)
                results.update({check: listing for check, _ in pairs})
            elif listing is None:  # dropped since its types were read: not landed
                self.types.forget(*key)
                results.update({check: False for check, _ in pairs})
            else:  # the names; an AnsweredListing also decides some checks itself (the feed's exact ones)
                decided, names = (
                    (listing.answers, listing.names) if isinstance(listing, AnsweredListing) else ({}, listing)
                )
                results.update({check: decided[stored] for check, stored in pairs if stored in decided})
                rest = [(check, stored) for check, stored in pairs if stored not in decided]
                if rest:
                    rows = [parse_listing_row(row) for row in names]
                    answers = answer_checks(*key, rows, [stored for _, stored in rest], set(request.columns))
                    results.update({check: answers[stored] for check, stored in rest})
        return results

    def _prepare(
        self,
        db: str,
        table: str,
        checks: list[PartitionCheck],
        results: dict[Check, bool | CheckError],
        fetched: dict[TableName, dict[str, str] | None | CheckError],
    ) -> tuple[ListingRequest, list[tuple[PartitionCheck, PartitionCheck]]] | None:
        """One table's listing request and its checks as stored; checks answered without a listing (a missing
        or unpartitioned table, a value its column rejects, an unknown column) go into ``results``. The table's
        column types are in ``fetched`` when this round read them, else in the cache."""
        try:
            key = TableName(db, table)
            columns = fetched[key] if key in fetched else self._columns(db, table)
            if isinstance(columns, CheckError):
                raise columns
            if columns is None:
                self.types.forget(db, table)
                results.update({c: False for c in checks})
                return None
            if not columns:
                raise PermanentCheckError(f"listing partitions of {db}.{table} failed: the table is not partitioned")
            memo = self.types.prepared(db, table)
            ready = self._ready(db, table, columns, [c for c in checks if c not in memo])
        except CheckError as exc:
            if isinstance(exc, PermanentCheckError):
                self.types.forget(db, table)
            results.update({c: exc for c in checks})
            return None
        if ready is None:  # dropped since its types were read
            results.update({c: False for c in checks})
            return None
        memo.update(ready)
        pairs: list[tuple[PartitionCheck, PartitionCheck]] = []
        common: set[tuple[str, str]] | None = None
        for check in checks:
            stored = memo[check]
            if isinstance(stored, CheckError):
                results[check] = stored
                continue
            pairs.append((check, stored))
            if common is None:
                common = set(stored.spec)
            elif common:
                common.intersection_update(stored.spec)
        if not pairs:
            return None
        narrowing = narrowing_spec(dict(sorted(common or ())), columns)
        return ListingRequest(db, table, columns, tuple(stored for _, stored in pairs), narrowing), pairs

    def _ready(
        self, db: str, table: str, columns: dict[str, str], checks: list[PartitionCheck]
    ) -> dict[PartitionCheck, PartitionCheck | CheckError] | None:
        """Each check as the catalog stores it (values cast for typed columns), or the PermanentCheckError it gets
        (a value its column rejects, a column the table does not have). None if the table went missing."""
        if not checks:
            return {}
        normalized = self._normalize(db, table, checks)
        if normalized is None:
            return None
        out: dict[PartitionCheck, PartitionCheck | CheckError] = {}
        for check, spec in zip(checks, normalized, strict=True):
            if isinstance(spec, CheckError):
                out[check] = spec
            elif any(k not in columns for k, _ in check.spec):
                unknown = sorted(k for k, _ in check.spec if k not in columns)
                out[check] = PermanentCheckError(
                    f"{db}.{table}: {unknown} not partition column(s) (columns: {sorted(columns)})"
                )
            else:
                out[check] = PartitionCheck(db, table, spec, check.exact)
        return out

    def _normalize(
        self, db: str, table: str, checks: list[PartitionCheck]
    ) -> Sequence[tuple[tuple[str, str], ...] | CheckError] | None:
        """Each check's spec with values as Spark stores them in this table's typed partition columns."""
        started = time.perf_counter()
        try:
            types = self._columns(db, table)
            if types is None:
                return None
            try:
                return self.types.normalize(db, table, types, [c.spec for c in checks])
            except Exception as exc:  # a local Spark query; classified below
                if classify_error(exc) == "transient":
                    raise TransientCheckError(
                        f"Spark unavailable normalizing values of {db}.{table}: {first_line(exc)}"
                    ) from exc
                raise PermanentCheckError(f"normalizing values of {db}.{table} failed: {first_line(exc)}") from exc
        finally:
            self.catalog_seconds += time.perf_counter() - started

    def list_partitions(self, db: str, table: str, spec: dict[str, str]) -> list[dict[str, str]] | None:
        """One catalog call: the partitions of db.table matching ``spec`` (None if the table is missing).

        A listing may hold more than ``spec`` asks for (the thrift backend narrows by pattern, or not at
        all on typed columns); answer_checks' exact membership keeps the answers right.
        """
        self.catalog_calls += 1
        started = time.perf_counter()
        try:
            cols = self._columns(db, table)
            if cols is None:
                return None
            if not cols:
                raise PermanentCheckError(f"listing partitions of {db}.{table} failed: the table is not partitioned")
            unknown = sorted(set(spec) - set(cols))
            if unknown:
                raise PermanentCheckError(f"{db}.{table}: {unknown} not partition column(s) (columns: {sorted(cols)})")
            rows = self.lister.list_rows(db, table, spec, cols)
        finally:
            self.catalog_seconds += time.perf_counter() - started
        return None if rows is None else [parse_listing_row(row) for row in rows]

    def _columns(self, db: str, table: str) -> dict[str, str] | None:
        """The table's partition columns and types, from the cache or one counted schema call."""
        types = self.types.cached(db, table)
        if types is None:
            self.schema_calls += 1
            types = self.types.fetch(db, table)
        return types

    def _check_path(self, check: PathCheck) -> bool | CheckError:
        self.fs_calls += 1
        started = time.perf_counter()
        if check.path.startswith("file://"):  # local: no JVM needed
            try:
                return os.path.exists(local_path(check.path))
            finally:
                self.catalog_seconds += time.perf_counter() - started
        try:
            spark = self.spark
        except TransientCheckError as exc:
            self.catalog_seconds += time.perf_counter() - started
            return exc
        try:
            jvm = spark.sparkContext._jvm
            path = jvm.org.apache.hadoop.fs.Path(check.path)
            fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
            return bool(fs.exists(path))
        except Exception as exc:  # noqa: BLE001 - classified below
            message = first_line(exc)
            if classify_error(exc) == "permanent" and "IllegalArgumentException" in str(exc):
                return PermanentCheckError(f"path {check.path!r} is invalid: {message}")
            return TransientCheckError(f"file system unreachable checking {check.path!r}: {message}")
        finally:
            self.catalog_seconds += time.perf_counter() - started
