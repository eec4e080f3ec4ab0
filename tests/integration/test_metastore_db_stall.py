"""The metastore-database backend on PostgreSQL behind a connection that stalls without closing (no RST, no FIN:
tests.support.fault_proxy, whose kernel still acknowledges every packet): a listing fails as a transient error
within ``[smart_sensor] metastore_timeout`` and a second, instead of waiting forever, and once new connections go
through the backend answers again. The server's ``statement_timeout`` alone could not bound it: the server never
sees the statement, or its error never comes back; libpq has no timeout on an answer (issue 57)."""

from __future__ import annotations

import threading
import time
from typing import Any

from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from smartsensor.adapters.catalog.metastore_db import ANSWER_MARGIN, MetastoreDbCatalog
from smartsensor.adapters.sql.engine import normalize_url
from smartsensor.sensors.errors import TransientCheckError
from tests.support.fault_proxy import FaultProxy
from tests.support.hive_schema import HiveSchema
from tests.support.pg import drop_pg_database, needs_test_pg, new_pg_database

TIMEOUT = 1.0  # [smart_sensor] metastore_timeout here
COLUMNS = {"ds": "string"}


def list_in_thread(catalog: MetastoreDbCatalog, wait: float) -> tuple[Any, float]:
    """``list_rows`` of db.t in a thread of its own, waited for at most ``wait`` seconds: (what it returned or
    raised, seconds it took); fails if it is still waiting then."""
    out: list[Any] = []
    started = time.monotonic()

    def call() -> None:
        try:
            out.append(catalog.list_rows("db", "t", {}, COLUMNS))
        except Exception as exc:  # noqa: BLE001 - returned: the test looks at it
            out.append(exc)

    thread = threading.Thread(target=call, daemon=True)  # a hung call must not hold the test's exit
    thread.start()
    thread.join(wait)
    assert not thread.is_alive(), f"the listing still waits after {wait:g} s: no bound on a stalled connection"
    return out[0], time.monotonic() - started


@needs_test_pg
def test_a_stalled_metastore_database_connection_fails_the_listing_within_its_bound() -> None:
    name, url = new_pg_database()
    engine = create_engine(normalize_url(url))
    server = make_url(url)
    proxy = FaultProxy("127.0.0.1", (server.host or "127.0.0.1", server.port or 5432))
    catalog = None
    try:
        hive = HiveSchema(engine)
        hive.create_table("db", "t", COLUMNS)
        hive.add("db", "t", "ds=2026-11-28", 1)
        via_proxy = server.set(host=proxy.address[0], port=proxy.address[1])
        catalog = MetastoreDbCatalog.from_url(via_proxy.render_as_string(hide_password=False), TIMEOUT, feed=None)
        assert catalog.list_rows("db", "t", {}, COLUMNS) == ["ds=2026-11-28"]  # a pooled connection, now idle

        proxy.stall()  # the pooled connection and every new one: nothing forwarded, nothing closed
        failed, took = list_in_thread(catalog, wait=30)
        assert isinstance(failed, TransientCheckError), failed
        assert "unreachable" in str(failed), failed
        # the pool's ping, then a new connection's attempt: each bounded (the answer at TIMEOUT + ANSWER_MARGIN,
        # connecting at TIMEOUT); what stays open stays silent
        assert took <= 3 * (TIMEOUT + ANSWER_MARGIN) + 2, took
        assert proxy.stalled_connections() >= 1
        print(f"\nmetastore database connection stalled: the listing failed after {took:.2f} s (timeout {TIMEOUT:g} s)")

        proxy.heal()  # new connections go through again: the next listing answers, without a new catalog
        hive.add("db", "t", "ds=2026-11-29", 2)
        answered, _ = list_in_thread(catalog, wait=30)
        assert sorted(answered) == ["ds=2026-11-28", "ds=2026-11-29"], answered
    finally:
        if catalog is not None:
            catalog.close()
        proxy.close()
        engine.dispose()
        drop_pg_database(name)
