"""The thrift catalog backend: partition names straight from the Hive metastore's thrift API, no JVM.

One ``ThriftCatalog`` per worker process holds a pool of at most ``POOL_SIZE`` connections, or
``[catalog] parallelism`` if more (a thrift client is not thread-safe: a thread takes one for each call); a round
lists its tables on ``parallelism`` connections at once (``list_tables``), tries ``[spark] metastore_uris`` in
order when it connects, and drops a connection on any transport error (the table's checks are then
transient errors; a pooled connection the server closed is retried once on a fresh one). A URI whose call timed
out, or whose fresh connection failed, is tried last for ``COOL_OFF`` seconds, and the call is tried once more on
the next URI: a metastore that accepts connections and never answers (stalled, hung) would otherwise be the first
one connected to for every call, each failing after ``metastore_timeout``, while the next URI answers. Column types
come from one cached ``get_table`` per table; check values are cast in Python as Spark would cast them
(smartsensor.adapters.catalog.python_casts). Names come back escaped exactly like ``SHOW PARTITIONS`` rows.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

from hmsclient.genthrift.hive_metastore import ThriftHiveMetastore
from hmsclient.genthrift.hive_metastore.ttypes import MetaException, NoSuchObjectException
from thrift.protocol.TBinaryProtocol import TBinaryProtocolAccelerated
from thrift.Thrift import TApplicationException
from thrift.transport.TSocket import TSocket
from thrift.transport.TTransport import TBufferedTransport, TTransportException

from smartsensor.adapters.catalog.partition_types import PartitionTypes, narrowing_spec
from smartsensor.adapters.catalog.python_casts import python_cast_all, python_castable
from smartsensor.config import Config
from smartsensor.hive_filter.names import TableName
from smartsensor.ports import ListingRequest
from smartsensor.sensors.errors import CheckError, PermanentCheckError, TransientCheckError, first_line

POOL_SIZE = 2
COOL_OFF = 60.0  # seconds a metastore URI that timed out or refused a connection is tried after the others
# Errors after which the server answered in full: the connection stays usable.
_ANSWERED = (NoSuchObjectException, MetaException, TApplicationException)


class _Connection:
    def __init__(self, address: tuple[str, int], transport: Any) -> None:
        self.address = address
        self.uri = f"thrift://{address[0]}:{address[1]}"
        self.transport = transport
        self.client = ThriftHiveMetastore.Client(TBinaryProtocolAccelerated(transport))

    def close(self) -> None:
        try:
            self.transport.close()
        except Exception:  # noqa: BLE001 - closing a broken socket must not raise
            pass


class _Breaker:
    """One batch's calls: once its first ``limit`` calls all failed transiently, and none answered, it is open."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.failures = 0
        self.answered = False
        self.first: str | None = None
        self._lock = threading.Lock()

    def refusal(self) -> TransientCheckError | None:
        with self._lock:
            if self.answered or self.failures < self.limit:
                return None
            return TransientCheckError(
                f"not asked: the metastore failed this round's first {self.failures} calls ({self.first})"
            )

    def record(self, out: Any) -> None:
        with self._lock:
            if isinstance(out, TransientCheckError):
                self.failures += 1
                self.first = self.first or str(out)[:200]
            else:
                self.answered = True


class ThriftCatalog:
    """A PartitionLister over the metastore's thrift API, shared by every round of one process."""

    calls_per_table = True  # one listing call per table (BatchChecker counts one per table asked about)

    def __init__(
        self, uris: list[tuple[str, int]], timeout: float, pool_size: int = POOL_SIZE, parallelism: int = 1
    ) -> None:
        self.uris = uris
        self.timeout = timeout
        self.parallelism = max(1, parallelism)
        pool_size = max(pool_size, self.parallelism)
        self.connects = 0  # connections opened so far
        self._idle: list[_Connection] = []
        self._failed_until: dict[tuple[str, int], float] = {}  # URI -> monotonic time it is tried last until
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(pool_size)
        self.types = PartitionTypes(None, read_schema=self._read_schema, cast=python_cast_all, castable=python_castable)

    @classmethod
    def from_config(cls, cfg: Config) -> "ThriftCatalog":
        return cls(
            cfg.metastore_uris,
            cfg.settings.smart_sensor.metastore_timeout,
            parallelism=cfg.settings.catalog.parallelism,
        )

    # -- connections ---------------------------------------------------------------------------------

    def _order(self) -> list[tuple[str, int]]:
        """The URIs to connect to, in the configured order, those in their cool-off (``COOL_OFF``) last."""
        now = time.monotonic()
        with self._lock:
            cooling = {uri for uri, until in self._failed_until.items() if until > now}
        return [u for u in self.uris if u not in cooling] + [u for u in self.uris if u in cooling]

    def _failed(self, address: tuple[str, int]) -> None:
        """``address`` failed: tried last for ``COOL_OFF`` seconds, and its idle connections dropped (a call tried
        again must not take one of them)."""
        with self._lock:
            self._failed_until[address] = time.monotonic() + COOL_OFF
            stale = [c for c in self._idle if c.address == address]
            self._idle = [c for c in self._idle if c.address != address]
        for conn in stale:
            conn.close()

    def _another_uri(self, address: tuple[str, int]) -> bool:
        """Whether a URI other than ``address`` is out of its cool-off (a call failed there may try it)."""
        now = time.monotonic()
        with self._lock:
            return any(u != address and self._failed_until.get(u, 0.0) <= now for u in self.uris)

    def _connect(self) -> _Connection:
        errors = []
        for host, port in self._order():
            sock = TSocket(host, port)
            sock.setTimeout(self.timeout * 1000)  # milliseconds; connect and every read
            transport = TBufferedTransport(sock)
            try:
                transport.open()
            except (TTransportException, OSError) as exc:
                errors.append(f"thrift://{host}:{port}: {first_line(exc)}")
                self._failed((host, port))
                continue
            self.connects += 1
            return _Connection((host, port), transport)
        raise TransientCheckError("no metastore reachable: " + "; ".join(errors))

    def call(self, what: str, method: str, *args: Any) -> Any:
        """One thrift call on a pooled connection. Transport errors → TransientCheckError (the connection
        is dropped); the metastore's own exceptions are raised as they are."""
        if not self._slots.acquire(timeout=self.timeout * 2):
            raise TransientCheckError(f"no metastore connection free {what} within {self.timeout * 2:g} s")
        try:
            for attempt in (1, 2):
                with self._lock:
                    conn = self._idle.pop() if self._idle else None
                reused = conn is not None
                conn = conn or self._connect()
                try:
                    result = getattr(conn.client, method)(*args)
                except _ANSWERED:
                    self._give_back(conn)
                    raise
                except Exception as exc:  # transport/protocol: the stream is unusable
                    conn.close()
                    timed_out = isinstance(exc, TimeoutError) or any(w in str(exc) for w in ("timeout", "timed out"))
                    if timed_out or not reused:
                        self._failed(conn.address)  # stalled, or failing on a fresh connection: tried last a while
                    if attempt == 1 and ((reused and not timed_out) or self._another_uri(conn.address)):
                        continue  # an idle connection the server closed, or another URI: once more, afresh
                    raise TransientCheckError(
                        f"metastore {conn.uri} unreachable {what}: {type(exc).__name__}: {first_line(exc)}"
                    ) from exc
                self._give_back(conn)
                return result
            raise AssertionError("unreachable")
        finally:
            self._slots.release()

    def _give_back(self, conn: _Connection) -> None:
        with self._lock:
            self._idle.append(conn)

    def close(self) -> None:
        """Close the idle connections."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # -- the PartitionLister -------------------------------------------------------------------------

    def _read_schema(self, db: str, table: str) -> dict[str, str] | None:
        """{partition column: type} in partition order; None if the table or database is missing."""
        try:
            t = self.call(f"reading {db}.{table}", "get_table", db, table)
        except NoSuchObjectException:
            return None
        except _ANSWERED as exc:
            raise PermanentCheckError(f"reading the columns of {db}.{table} failed: {first_line(exc)}") from exc
        return {k.name.lower(): k.type.lower() for k in (t.partitionKeys or [])}

    def list_rows(self, db: str, table: str, spec: dict[str, str], columns: dict[str, str]) -> list[str] | None:
        """Escaped partition names of db.table: ``get_partition_names_ps`` narrowed by the spec's plain
        values on string columns (values in column order, '' for any), else ``get_partition_names``."""
        narrowing = narrowing_spec(spec, columns)
        what = f"listing {db}.{table}"
        try:
            if narrowing:
                return list(
                    self.call(what, "get_partition_names_ps", db, table, [narrowing.get(k, "") for k in columns], -1)
                )
            return list(self.call(what, "get_partition_names", db, table, -1))
        except NoSuchObjectException:
            self.types.forget(db, table)
            return None
        except _ANSWERED as exc:  # get_partition_names answers a dropped table with an "Internal error"
            self.types.forget(db, table)
            if self._read_schema(db, table) is None:
                return None
            raise PermanentCheckError(f"listing partitions of {db}.{table} failed: {first_line(exc)}") from exc

    # -- the BatchLister: several tables at once ------------------------------------------------------

    def _each(self, work: Any, items: Sequence[Any]) -> list[Any]:
        """``work(item)`` (a call that returns its CheckError) for every item, on ``parallelism`` threads (one
        connection each) when there are several. Once the batch's first ``max(2, parallelism)`` calls have all
        failed transiently (the metastore down, stalled or out of reach), the items not begun yet are not asked
        (a TransientCheckError saying so): a round under a metastore fault lasts a few calls' bounds, not one per
        table. The items are asked in a random order, so that a few tables whose calls always time out (while the
        metastore answers the others) cannot be the first ones of every round."""
        breaker = _Breaker(max(2, self.parallelism))
        out: list[Any] = [None] * len(items)

        def guarded(index: int) -> None:
            refused = breaker.refusal()
            if refused is not None:
                out[index] = refused
                return
            out[index] = work(items[index])
            breaker.record(out[index])

        order = random.sample(range(len(items)), len(items))
        if self.parallelism == 1 or len(items) < 2:
            for index in order:
                guarded(index)
        else:
            with ThreadPoolExecutor(max_workers=min(self.parallelism, len(items)), thread_name_prefix="thrift") as pool:
                list(pool.map(guarded, order))
        return out

    def fetch_types(
        self, tables: Sequence[TableName]
    ) -> tuple[dict[TableName, dict[str, str] | None | CheckError], int]:
        """One ``get_table`` per table, ``parallelism`` at a time, into the types cache."""

        def fetch(key: TableName) -> dict[str, str] | None | CheckError:
            try:
                return self.types.fetch(*key)
            except CheckError as exc:
                return exc

        found = self._each(fetch, list(tables))
        return dict(zip(tables, found, strict=True)), len(tables)

    def list_tables(
        self, requests: Sequence[ListingRequest]
    ) -> tuple[dict[TableName, list[str] | None | CheckError], int]:
        """One listing call per table (as ``list_rows``), ``parallelism`` at a time."""

        def listing(request: ListingRequest) -> list[str] | None | CheckError:
            try:
                return self.list_rows(request.db, request.table, request.narrowing, request.columns)
            except CheckError as exc:
                return exc

        rows = self._each(listing, list(requests))
        return {r.table_name: out for r, out in zip(requests, rows, strict=True)}, len(requests)
