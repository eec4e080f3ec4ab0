"""Issue 44: landings published to a real Airflow 3.3 as asset events start one run per partition of each
``PartitionedAssetTimetable`` consumer, with the partition key, and nothing else, through faults.

Production-like (tests/support/airflow_deployment.py): Airflow's api-server, dag-processor, scheduler and triggerer
(LocalExecutor, its database on the suite's PostgreSQL); smartsensor's ``serve`` and ``workers -n 2`` on PostgreSQL
with the thrift backend on the metastore service, the workers publishing (``[landings] publish``). Partitions land
through the metastore's thrift API, as a pipeline's commit adds them, on three tables, in phases:

- **steady**: landings followed by a landing signal (the publisher wakes at once), then landings without one (its
  next listing, every ``[landings] interval``, finds them);
- **api-server restarted**: stopped while two partitions land; `status` shows the backlog; started again;
- **workers killed**: ``kill -9`` of every worker process as soon as the landings are in the outbox (mid-publish),
  then started again;
- **Airflow's database unreachable**: it refuses connections while two partitions land (the posts fail), then
  comes back; an Airflow component that exited meanwhile is started again, as a supervisor would;
- **metastore service down**: stopped right after two partitions land, started again (what a worker sees while
  the metastore's database fails over: its listings fail).

DAGs: two partitioned consumers of ``orders``, one of ``hourly`` (a two-column key, ``|``-joined), a plain consumer
of ``orders`` (an event with a partition key does not queue it: Airflow 3.3's ``AssetManager._queue_dagruns``) and
a producer of ``unused``, an asset no DAG is scheduled on (no event for it).

The guarantee under test is the documented one (issue 54): one event per landing, a post of unknown outcome looked
up in Airflow before it is sent again. So the check is that every landing started exactly one run of each
partitioned consumer with its key, Airflow holds exactly one event for it, and that event is a post the outbox
counted (a 2xx, or an attempt of unknown outcome found in Airflow). A second test kills the workers exactly while
a post is in flight, after Airflow committed it (a proxy holds Airflow's answer).
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.exc import OperationalError

from scripts.airflow.stack import USER, AirflowStack, version_of
from scripts.harness.hive_tables import Metastore
from smartsensor.adapters import metastore_service
from smartsensor.adapters.airflow_assets import AirflowAssets
from smartsensor.adapters.sql.signals import SqlLandingSignals
from smartsensor.adapters.sql.status_store import SqlStatusReads
from smartsensor.config import Config
from smartsensor.domain import clock
from smartsensor.domain.landings import DELIVERED, HIVE_PARTITION, LANDING_ID, SENDING, EventLookup, partition_key
from smartsensor.schema.models import asset_watch as AW, landing_outbox
from smartsensor.service.signals import send_signal
from smartsensor.service.status import LandingsStatus, collect_landings
from tests.support.airflow_databases import AirflowDatabases
from tests.support.airflow_deployment import Deployment, deployed, tmp_for
from tests.support.airflow_helpers import airflow_venvs
from tests.support.answer_hold import AnswerHold
from tests.support.common import SHARD_LIMIT, wait_until
from tests.support.pg import database_unreachable
from tests.support.redirecting_proxy import RedirectingProxy

pytestmark = pytest.mark.slow

AIRFLOW_33 = [v for v in airflow_venvs() if not isinstance(v, Path) or version_of(v).startswith("3.3")]
DB = "landings"
DAILY, HOURLY, UNUSED = "orders", "hourly", "unused"
PARTITIONED = {"orders_daily": DAILY, "orders_daily_too": DAILY, "hourly_load": HOURLY}
CONSUMERS = [*PARTITIONED, "orders_plain", "producer_unused"]
DAGS = """
from datetime import datetime

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset, PartitionedAssetTimetable

ORDERS = Asset("{prefix}{db}/orders")
HOURLY = Asset("{prefix}{db}/hourly")
UNUSED = Asset("{prefix}{db}/unused")

for dag_id in ("orders_daily", "orders_daily_too"):
    with DAG(dag_id, start_date=datetime(2026, 11, 1), schedule=PartitionedAssetTimetable(assets=ORDERS)):
        EmptyOperator(task_id="load")

with DAG("hourly_load", start_date=datetime(2026, 11, 1), schedule=PartitionedAssetTimetable(assets=HOURLY)):
    EmptyOperator(task_id="load")

with DAG("orders_plain", start_date=datetime(2026, 11, 1), schedule=[ORDERS]):
    EmptyOperator(task_id="load")

with DAG("producer_unused", start_date=datetime(2026, 11, 1), schedule=None):
    EmptyOperator(task_id="write", outlets=[UNUSED])
"""


@dataclass
class Phase:
    """One phase: what landed when, and when its fault ended (None: no fault)."""

    name: str
    landed: dict[tuple[str, str], datetime] = field(default_factory=dict)  # (table, partition key) → landed at
    recovered: datetime | None = None
    airflow_calls: int = 0
    listings: int = 0


class Landings:
    """The pipeline's side: partitions added over thrift (then, with ``signal``, a landing signal), each timed."""

    def __init__(self, deployment: Deployment) -> None:
        self.metastore = deployment.landing.metastore
        self.engine = deployment.engine
        self.phases: list[Phase] = []

    def phase(self, name: str) -> Phase:
        self.phases.append(Phase(name))
        return self.phases[-1]

    def land(self, table: str, *values: str, signal: bool = False) -> None:
        self.metastore.land(table, *values)
        name = "/".join(f"{c}={v}" for c, v in zip(("ds", "hr")[: len(values)], values, strict=True))
        self.phases[-1].landed[(table, partition_key(name))] = datetime.now(timezone.utc)
        if signal:
            send_signal(SqlLandingSignals(self.engine), f"{DB}.{table}/{name}")

    def keys(self, table: str) -> list[str]:
        return sorted(k for p in self.phases for (t, k) in p.landed if t == table)


class FaultRun:
    """The phases of the test, one method each, on a running deployment: each lands partitions, brings its fault
    about and ends it, then waits until every landing so far is delivered, and counts the calls it cost."""

    def __init__(self, deployment: Deployment, service: Config) -> None:
        self.deployment, self.service = deployment, service
        self.stack, self.processes, self.engine = deployment.stack, deployment.stack.processes, deployment.engine
        self.pipeline = Landings(deployment)
        self.api_log = deployment.logs / "airflow-api-server.log"
        self.metastore_log = Path(service.home) / "metastore_service" / "metastore.log"
        self.supervised = False  # from Airflow's database outage on, a component that exited is started again
        self.restarted: list[str] = []  # those that were

    def waiting(self, what: str, predicate: Callable[[], bool], timeout: float = 300, step: float = 0.5) -> None:
        """Poll ``predicate``; every component must live meanwhile, or (``supervised``) is started again."""

        def reached() -> bool:
            if self.supervised:
                self.restarted += self.deployment.restart_exited()
            else:
                self.processes.check_alive()
            try:
                return predicate()
            except (OSError, OperationalError):
                return False  # Airflow's api-server or database not back yet

        try:
            wait_until(reached, timeout=timeout, step=step)
        except AssertionError:
            raise AssertionError(f"{what}: not reached within {timeout:g} s (logs in {self.deployment.logs})") from None

    def delivered(self) -> int:
        return sum(1 for r in outbox_rows(self.engine) if r.state == DELIVERED)

    def phase(self, name: str, run: Callable[[Phase], None]) -> None:
        """``run`` the phase, then wait until every landing so far is delivered, and count what it cost."""
        phase = self.pipeline.phase(name)
        calls, listings = count_airflow_calls(self.api_log), count_listings(self.metastore_log)
        run(phase)
        total = sum(1 for p in self.pipeline.phases for table, _ in p.landed if table != UNUSED)
        self.waiting(f"{name}: every landing delivered", lambda: self.delivered() == total)
        phase.airflow_calls = count_airflow_calls(self.api_log) - calls
        phase.listings = count_listings(self.metastore_log) - listings

    def steady(self, signalled: bool) -> Callable[[Phase], None]:
        """Landings at a pipeline's pace, one per table every 1.5 s, each followed by a landing signal or not (then
        the publisher's next listing, every ``[landings] interval``, finds it)."""
        first = 2 if signalled else 5

        def run(phase: Phase) -> None:
            for day in range(first, first + 3):
                for table, more in ((DAILY, ()), (HOURLY, ("03",)), (UNUSED, ())):
                    self.pipeline.land(table, f"2026-10-{day:02d}", *more, signal=signalled)
                time.sleep(1.5)

        return run

    def api_server_restarted(self, phase: Phase) -> None:
        self.processes.stop(names=["airflow-api-server"])
        self.pipeline.land(DAILY, "2026-10-08")
        self.pipeline.land(HOURLY, "2026-10-08", "04")
        wait_until(
            lambda: collect_landings(SqlStatusReads(self.engine), clock.now(), SHARD_LIMIT).backlog == 2,
            timeout=120,
            step=0.5,
        )
        self.stack.start("api-server")
        self.stack.wait_healthy(timeout=300)
        phase.recovered = datetime.now(timezone.utc)

    def workers_killed(self, phase: Phase) -> None:
        """``kill -9`` of every worker process as soon as the landings are in the outbox: mid-publish."""
        before = len(outbox_rows(self.engine))
        self.pipeline.land(DAILY, "2026-10-09", signal=True)
        self.pipeline.land(HOURLY, "2026-10-09", "05", signal=True)
        wait_until(lambda: len(outbox_rows(self.engine)) >= before + 2, timeout=120, step=0.05)
        os.killpg(self.processes.procs["workers"].pid, signal.SIGKILL)
        self.processes.stop(names=["workers"])
        self.deployment.start_workers()
        phase.recovered = datetime.now(timezone.utc)

    def airflow_database_down(self, phase: Phase) -> None:
        failed = failed_posts(self.engine)
        self.supervised = True
        with database_unreachable(self.deployment.airflow_db):
            self.pipeline.land(DAILY, "2026-10-10", signal=True)
            self.pipeline.land(HOURLY, "2026-10-10", "06", signal=True)
            wait_until(lambda: failed_posts(self.engine) >= failed + 2, timeout=120, step=0.5)
        phase.recovered = datetime.now(timezone.utc)
        self.waiting("Airflow healthy after its database outage", self.stack.healthy)

    def metastore_down(self, phase: Phase) -> None:
        self.pipeline.land(DAILY, "2026-10-11")
        self.pipeline.land(HOURLY, "2026-10-11", "07")
        assert metastore_service.stop(self.service)
        try:
            time.sleep(6)  # the outage: three listing intervals
        finally:
            metastore_service.start(self.service)
        phase.recovered = datetime.now(timezone.utc)

    def runs_queued(self) -> bool:
        found = runs(self.stack)
        return all(len(found.get((d, k), [])) >= 1 for d, t in PARTITIONED.items() for k in self.pipeline.keys(t))


@pytest.mark.timeout(2400)
@pytest.mark.parametrize("venv", AIRFLOW_33, ids=version_of)
def test_each_landing_starts_one_run_per_partitioned_consumer_through_faults(
    venv: Path,
    tmp_path_factory: pytest.TempPathFactory,
    service: Config,
    airflow_databases: AirflowDatabases,
) -> None:
    prefix = f"hive://127.0.0.1:{service.get('spark', 'metastore_uris').rsplit(':', 1)[1]}/"
    # The tables, and a partition there before the publisher watches them: its baseline, never published.
    before = Metastore(service, DB)
    try:
        before.create_tables([DAILY, UNUSED])
        before.create_tables([HOURLY], ("ds", "hr"))
        before.land(DAILY, "2026-10-01")
    finally:
        before.close()
    with deployed(
        venv,
        airflow_databases,
        tmp_for(tmp_path_factory, venv),
        service,
        DB,
        (),
        {"landings.py": DAGS.format(prefix=prefix, db=DB)},
        CONSUMERS,
        smartsensor_settings={"landings__assets_refresh_interval": "5", "landings__retry_max": "3"},
        landings_prefix=prefix,
    ) as deployment:
        run = FaultRun(deployment, service)
        run.waiting("both consumed tables watched, their baselines taken", lambda: baselines(run.engine) == 2)
        run.phase("steady, landing signals", run.steady(signalled=True))
        run.phase("steady, listings every 2 s", run.steady(signalled=False))
        run.phase("api-server restarted", run.api_server_restarted)
        run.phase("workers killed -9", run.workers_killed)
        run.phase("Airflow's database unreachable", run.airflow_database_down)
        run.phase("metastore service down", run.metastore_down)
        run.waiting("every landing's runs queued", run.runs_queued, step=1.0)
        found = runs(run.stack)
        events = airflow_events(run.stack)
        rows = outbox_rows(run.engine)
        status = collect_landings(SqlStatusReads(run.engine), clock.now(), SHARD_LIMIT)
    extra_events = assert_each_landing_published(run.pipeline, found, events, rows, status)
    print(f"\nAirflow {version_of(venv)}: {report(run.pipeline.phases, found)}")
    print(
        f"events beyond one per landing: {extra_events}; the outbox counted {status.duplicates} duplicates and "
        f"{status.unknown_outcomes} unknown outcomes; Airflow's components restarted after its database outage: "
        f"{', '.join(run.restarted) or 'none'}"
    )


KILLS = int(os.environ.get("SMARTSENSOR_KILL_MID_POST_REPEATS", "4"))
HELD_BACK = "s3://smartsensor-test/held-back"  # not a hive:// asset: never watched
HELD_BACK_DAG = f"""
from datetime import datetime

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, Asset, PartitionedAssetTimetable

with DAG(
    "held_back",
    start_date=datetime(2026, 11, 1),
    schedule=PartitionedAssetTimetable(assets=Asset("{HELD_BACK}")),
    max_active_runs=1,
):
    BashOperator(task_id="hold", bash_command="sleep 900")
"""


@pytest.mark.extended  # CI runs the faults above and the outbox's model (tests/integration/test_landings.py)
@pytest.mark.timeout(2400)
@pytest.mark.parametrize("venv", AIRFLOW_33, ids=version_of)
def test_a_worker_killed_while_its_post_is_in_flight_starts_no_second_run(
    venv: Path,
    tmp_path_factory: pytest.TempPathFactory,
    service: Config,
    airflow_databases: AirflowDatabases,
) -> None:
    """Issue 54: the workers reach Airflow through a proxy that can hold Airflow's answers to posted events
    (tests/support/answer_hold.py). ``KILLS`` times: a partition lands on each consumed table; the first post goes
    through, Airflow commits its event and answers, the answer is held (the worker waits for it, its row
    ``sending``); then ``kill -9`` of every worker process, the proxy forwards again, the workers start again. The
    next claimant of each row asks Airflow first: the event it holds makes the row delivered, never posted again.
    Each landing then has exactly one event in Airflow (its ``extra`` naming its row) and each partitioned consumer
    exactly one run per partition."""
    prefix = tables_of(service)
    with (
        AnswerHold() as proxy,
        deployed(
            venv,
            airflow_databases,
            tmp_for(tmp_path_factory, venv),
            service,
            DB,
            (),
            {"landings.py": DAGS.format(prefix=prefix, db=DB), "held_back.py": HELD_BACK_DAG},
            [*CONSUMERS, "held_back"],
            smartsensor_settings={"landings__assets_refresh_interval": "5", "landings__retry_max": "3"},
            landings_prefix=prefix,
            landings_via=proxy.via,
        ) as deployment,
    ):
        run = FaultRun(deployment, service)
        run.waiting("both consumed tables watched, their baselines taken", lambda: baselines(run.engine) == 2)
        killed_sending = 0
        for i in range(KILLS):
            phase = run.pipeline.phase(f"killed mid-post {i + 1}")
            held = proxy.held
            proxy.hold()
            run.pipeline.land(DAILY, f"2026-09-{i + 1:02d}", signal=True)
            run.pipeline.land(HOURLY, f"2026-09-{i + 1:02d}", "01", signal=True)

            def answer_held(before: int = held) -> bool:
                return proxy.held > before

            run.waiting("Airflow answered a post, the answer held", answer_held, step=0.02)
            os.killpg(run.processes.procs["workers"].pid, signal.SIGKILL)
            run.processes.stop(names=["workers"])
            killed_sending += sum(1 for r in outbox_rows(run.engine) if r.state == SENDING)
            proxy.forward()
            deployment.start_workers()
            phase.recovered = datetime.now(timezone.utc)
            total = sum(1 for p in run.pipeline.phases for table, _ in p.landed if table != UNUSED)

            def all_delivered(total: int = total) -> bool:
                return run.delivered() == total

            run.waiting(f"{phase.name}: every landing delivered", all_delivered)
        run.waiting("every landing's runs queued", run.runs_queued, step=1.0)
        found = runs(run.stack)
        by_landing = airflow_events_by_landing(run.stack)
        rows = outbox_rows(run.engine)
        status = collect_landings(SqlStatusReads(run.engine), clock.now(), SHARD_LIMIT)
        lookups = lookup_answers(run.api_log)
        blocked, other = listing_while_a_run_is_queued(run.stack, prefix)
    # Airflow 3.3.2's listing answers 500 while an event it would list created a run not started yet; filtered by
    # asset, the look-up of another asset's landing is answered meanwhile
    assert not blocked.answered and "HTTP 500" in blocked.detail, blocked
    assert other.answered and len(other.event_ids) == 1, other
    assert killed_sending >= KILLS  # each kill left at least the row whose answer was held `sending`
    assert all(n == 1 for n in by_landing.values()), by_landing  # one event per landing
    delivered = {(r.uri.rsplit("/", 1)[1], r.key): r for r in rows if r.state == DELIVERED}
    assert len(delivered) == 2 * KILLS and sorted(by_landing) == sorted(r.id for r in delivered.values())
    for dag_id, table in PARTITIONED.items():
        for key in run.pipeline.keys(table):
            assert len(found[(dag_id, key)]) == 1, (dag_id, key, found[(dag_id, key)])  # one run per partition
    looked_up = [r for r in delivered.values() if r.unknown_outcomes]
    assert sum(1 for r in looked_up if r.posts == 0) >= KILLS  # the held posts: found in Airflow, never posted again
    assert status.duplicates == 0 and status.unresolved == 0 and status.backlog == 0
    print(
        f"\nAirflow {version_of(venv)}: {KILLS} kills mid-post, {proxy.held} answers held; runs per partition per "
        f"consumer: {sorted({len(v) for (d, _), v in found.items() if d in PARTITIONED})}; events per landing: "
        f"{sorted(set(by_landing.values()))}; rows looked up: {len(looked_up)} (found in Airflow, not posted: "
        f"{sum(1 for r in looked_up if r.posts == 0)}); look-ups answered: {lookups}; with a run queued: "
        f"{blocked.detail}"
    )


LANDS_BEHIND_PROXY = 4  # days landed on each consumed table behind the redirecting, slow proxy
LOOKUP_DELAY = 10.0  # seconds each look-up of events takes behind it
REQUEST_TIMEOUT = 12.0  # [landings] request_timeout there: a look-up fits; a held post's answer does not


@pytest.mark.extended  # minutes of a deployment; CI runs the outbox's model and the client's redirect rules
@pytest.mark.timeout(2400)
@pytest.mark.parametrize("venv", AIRFLOW_33, ids=version_of)
def test_through_a_redirecting_proxy_and_slow_look_ups_each_landing_once(
    venv: Path,
    tmp_path_factory: pytest.TempPathFactory,
    service: Config,
    airflow_databases: AirflowDatabases,
) -> None:
    """Issue 67: the workers are given Airflow's old URL; a proxy answers every call there 308 to the same route
    under ``/airflow`` (tests/support/redirecting_proxy.py), so each call, the token's included, is redirected once.
    Look-ups of events take ``LOOKUP_DELAY`` s each (with the default 15 s claim, longer than the claim leaves after
    a look-up for a 12 s request: before, such a row was handed back unposted every cycle), and the first two posts
    are committed by Airflow with their answers held past the workers' timeout (outcomes they never learn). Every
    landing still has exactly one event in Airflow and each partitioned consumer one run per partition; the posts of
    unknown outcome are found by their look-ups, never posted again."""
    prefix = tables_of(service)
    with (
        RedirectingProxy(LOOKUP_DELAY, slow_posts=2, post_delay=REQUEST_TIMEOUT + 3) as proxy,
        deployed(
            venv,
            airflow_databases,
            tmp_for(tmp_path_factory, venv),
            service,
            DB,
            (),
            {"landings.py": DAGS.format(prefix=prefix, db=DB)},
            CONSUMERS,
            smartsensor_settings={
                "landings__assets_refresh_interval": "5",
                "landings__retry_max": "3",
                "landings__request_timeout": str(REQUEST_TIMEOUT),
            },
            landings_prefix=prefix,
            landings_via=proxy.via,
        ) as deployment,
    ):
        run = FaultRun(deployment, service)
        run.waiting("both consumed tables watched, their baselines taken", lambda: baselines(run.engine) == 2)
        phase = run.pipeline.phase("behind a redirecting, slow proxy")
        for day in range(1, LANDS_BEHIND_PROXY + 1):
            run.pipeline.land(DAILY, f"2026-11-{day:02d}", signal=True)  # days no other test lands
            run.pipeline.land(HOURLY, f"2026-11-{day:02d}", "01", signal=True)
        phase.recovered = datetime.now(timezone.utc)
        total = 2 * LANDS_BEHIND_PROXY
        run.waiting("every landing delivered", lambda: run.delivered() == total, timeout=900)
        run.waiting("every landing's runs queued", run.runs_queued, step=1.0)
        found = runs(run.stack)
        by_landing = airflow_events_by_landing(run.stack)
        rows = outbox_rows(run.engine)
        status = collect_landings(SqlStatusReads(run.engine), clock.now(), SHARD_LIMIT)
    assert all(n == 1 for n in by_landing.values()), by_landing  # one event per landing
    delivered = [r for r in rows if r.state == DELIVERED]  # this deployment's outbox: its landings only
    assert len(delivered) == total and sorted(by_landing) == sorted(r.id for r in delivered)
    for dag_id, table in PARTITIONED.items():
        for key in run.pipeline.keys(table):
            assert len(found[(dag_id, key)]) == 1, (dag_id, key, found[(dag_id, key)])  # one run per partition
    looked_up = [r for r in delivered if r.unknown_outcomes]
    assert proxy.held_posts == 2 and sum(1 for r in looked_up if r.posts == 0) >= 1, (proxy.held_posts, looked_up)
    assert proxy.redirects > 0 and proxy.lookups >= 1
    assert status.duplicates == 0 and status.unresolved == 0 and status.backlog == 0
    print(
        f"\nAirflow {version_of(venv)} behind a redirecting proxy: {proxy.redirects} redirects, {proxy.lookups} "
        f"look-ups of {LOOKUP_DELAY:g} s, {proxy.held_posts} posts' answers held; events per landing: "
        f"{sorted(set(by_landing.values()))}; rows looked up: {len(looked_up)} (found, not posted again: "
        f"{sum(1 for r in looked_up if r.posts == 0)})"
    )


def tables_of(service: Config) -> str:
    """The consumed tables and the unused one, made where the module's other tests have not made them yet (their
    partitions are then a new deployment's baseline); the ``hive://`` prefix of the metastore service's assets."""
    before = Metastore(service, DB)
    try:
        databases = before.catalog.call("listing the databases", "get_all_databases")
        there = set(before.catalog.call("listing the tables", "get_all_tables", DB)) if DB in databases else set()
        before.create_tables([t for t in (DAILY, UNUSED) if t not in there])
        before.create_tables([HOURLY] if HOURLY not in there else [], ("ds", "hr"))
    finally:
        before.close()
    return f"hive://127.0.0.1:{service.get('spark', 'metastore_uris').rsplit(':', 1)[1]}/"


def listing_while_a_run_is_queued(stack: AirflowStack, prefix: str) -> tuple[EventLookup, EventLookup]:
    """Reproduce 3.3.2's 500: two events of ``held_back``'s asset (``max_active_runs=1``, a task that sleeps): the
    first run starts, the second stays queued (no ``start_date``). Then look an event of that asset up, and the
    first landing of ``orders`` (another asset), through ``AirflowAssets.find_events``."""
    client = AirflowAssets(stack.url, USER, stack.password, 30)
    try:
        since = datetime.now(timezone.utc) - timedelta(hours=1)
        assets = client._send("GET", "/api/v2/assets", params={"uri_pattern": "held-back"}).json()["assets"]
        (asset_id,) = [a["id"] for a in assets if a["uri"] == HELD_BACK]
        for key in ("a", "b"):
            assert client.post_event(asset_id, key, {LANDING_ID: -1}).kind == "delivered"

        def one_running_one_queued() -> bool:
            rows = stack.rows("SELECT state, start_date FROM dag_run WHERE dag_id = 'held_back'")
            return sorted((state, start is None) for state, start in rows) == [("queued", True), ("running", False)]

        wait_until(one_running_one_queued, timeout=300, step=1.0)
        blocked = client.find_events(asset_id, since, None, {LANDING_ID: -1})
        (orders,) = [a for a in client.consumed_hive_assets(prefix) if a.table == DAILY]
        other = client.find_events(orders.asset_id, since, None, {HIVE_PARTITION: "ds=2026-09-01"})
        return blocked, other
    finally:
        client.close()


def assert_each_landing_published(
    pipeline: Landings,
    found: dict[tuple[str, str | None], list[datetime]],
    events: dict[tuple[str, str], int],
    rows: list[OutboxRow],
    status: LandingsStatus,
) -> int:
    """Each landing on a consumed table started one run of each partitioned consumer per event Airflow holds for
    it, and each event is a post its outbox row counted; nothing else ran or was published. The events beyond one
    per landing."""
    landed_keys = {t: pipeline.keys(t) for t in (DAILY, HOURLY)}
    assert landed_keys[HOURLY][0] == "2026-10-02|03"
    assert {k for (d, k) in found if d == "orders_plain"} == set()  # a partitioned event queues no plain consumer
    assert not any(d == "producer_unused" for d, _ in found)
    assert all(not uri.endswith(f"/{UNUSED}") for uri, _ in events), events  # nobody consumes it: no event
    assert "2026-10-01" not in {k for _, k in events}  # the baseline is never published
    counted = {(r.uri.rsplit("/", 1)[1], r.key): r for r in rows if r.state == DELIVERED}
    for dag_id, table in PARTITIONED.items():
        for key in landed_keys[table]:
            took = events.get((table, key), 0)
            row = counted[(table, key)]
            # one event, a post the row counted: a 2xx (posts), or an attempt whose answer was lost (a worker killed
            # between Airflow's commit and its own: unknown_outcomes), found in Airflow before a second post
            assert took == 1 and row.posts <= took <= row.posts + row.unknown_outcomes, (table, key, took, row)
            assert len(found[(dag_id, key)]) == took, (dag_id, key, found[(dag_id, key)])  # one run per event
    assert status.duplicates == sum(max(r.posts - 1, 0) for r in counted.values()) and status.backlog == 0
    return sum(events.get(k, 0) for k in counted) - len(counted)


def count_airflow_calls(log: Path) -> int:
    """Requests to the asset API and for tokens in the api-server's access log (what the publisher sends)."""
    if not log.exists():
        return 0
    pattern = r"method=(?:GET path=/api/v2/assets|POST path=/api/v2/assets/events|POST path=/auth/token) "
    return len(re.findall(pattern, log.read_text(errors="replace")))


def count_listings(log: Path) -> int:
    """Partition listings of the test's database in the metastore service's audit log."""
    if not log.exists():
        return 0
    return len(re.findall(rf"cmd=\S+ get_partition(?:s)?_names(?:_ps)? : db={DB} ", log.read_text(errors="replace")))


def lookup_answers(log: Path) -> dict[str, int]:
    """``GET /api/v2/assets/events`` in the api-server's access log, by the status it answered."""
    if not log.exists():
        return {}
    found: dict[str, int] = {}
    for line in log.read_text(errors="replace").splitlines():
        if "GET path=/api/v2/assets/events" in line:
            status = re.search(r"status(?:_code)?=(\d{3})", line)
            key = status.group(1) if status else "?"
            found[key] = found.get(key, 0) + 1
    return found


def airflow_events_by_landing(stack: AirflowStack) -> dict[int, int]:
    """Asset events in Airflow's database by the outbox row their ``extra`` names (``smartsensor_landing_id``)."""
    found: dict[int, int] = {}
    for (extra,) in stack.rows("SELECT extra FROM asset_event"):
        data = json.loads(extra) if isinstance(extra, str) else extra
        landing = (data or {}).get(LANDING_ID)
        if landing is not None:
            found[int(landing)] = found.get(int(landing), 0) + 1
    return found


@dataclass(frozen=True)
class OutboxRow:
    id: int
    uri: str
    name: str
    state: str
    posts: int
    unknown_outcomes: int
    key: str


def outbox_rows(engine: Engine) -> list[OutboxRow]:
    """Every outbox row."""
    lo = landing_outbox
    with engine.connect() as conn:
        query = select(
            lo.c.id, lo.c.uri, lo.c.partition_name, lo.c.state, lo.c.posts, lo.c.unknown_outcomes, lo.c.partition_key
        )
        return [OutboxRow(*r) for r in conn.execute(query)]


def baselines(engine: Engine) -> int:
    """Watched tables whose baseline was taken (``asset_watch.baselined_at``)."""
    with engine.connect() as conn:
        return len(list(conn.execute(select(AW.c.uri).where(AW.c.baselined_at.is_not(None)))))


def failed_posts(engine: Engine) -> int:
    """Outbox rows with a failed attempt on record."""
    lo = landing_outbox
    with engine.connect() as conn:
        return len(list(conn.execute(select(lo.c.id).where(lo.c.last_error.is_not(None)))))


def runs(stack: AirflowStack) -> dict[tuple[str, str | None], list[datetime]]:
    """Airflow's dag runs by (dag id, partition key): when each was queued."""
    found: dict[tuple[str, str | None], list[datetime]] = {}
    for dag_id, key, queued in stack.rows("SELECT dag_id, partition_key, queued_at FROM dag_run"):
        found.setdefault((dag_id, key), []).append(_aware(queued))
    return found


def airflow_events(stack: AirflowStack) -> dict[tuple[str, str], int]:
    """Asset events in Airflow's database by (table, partition key). Its database, not GET /api/v2/assets/events:
    on 3.3.2 that answers 500 while a run the events created has not started (AssetEventResponse wants its
    start_date)."""
    found: dict[tuple[str, str], int] = {}
    sql = "SELECT a.uri, e.partition_key FROM asset_event e JOIN asset a ON a.id = e.asset_id"
    for uri, key in stack.rows(sql):
        found[(uri.rsplit("/", 1)[1], key)] = found.get((uri.rsplit("/", 1)[1], key), 0) + 1
    return found


def _aware(when: datetime | str) -> datetime:
    when = datetime.fromisoformat(when) if isinstance(when, str) else when
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def report(phases: list[Phase], found: dict[tuple[str, str | None], list[datetime]]) -> str:
    """Landed → run queued per phase (and, after a fault, recovered → run queued), with the calls each made."""
    lines = [
        "landings published as asset events, landed -> run queued (s)",
        f"{'phase':32} {'runs':>5} {'p50':>6} {'p95':>6} {'max':>6} {'after fault max':>16} {'Airflow calls':>14} "
        f"{'listings':>9}",
    ]
    for phase in phases:
        lags, after = [], []
        for (table, key), landed in phase.landed.items():
            for dag_id, consumed in PARTITIONED.items():
                if consumed != table:
                    continue
                queued = min(found[(dag_id, key)])
                lags.append((queued - landed).total_seconds())
                if phase.recovered is not None:
                    after.append((queued - phase.recovered).total_seconds())
        lags.sort()
        p95 = lags[min(len(lags) - 1, round(0.95 * (len(lags) - 1)))]
        tail = f"{max(after):16.2f}" if after else f"{'-':>16}"
        lines.append(
            f"{phase.name:32} {len(lags):5d} {statistics.median(lags):6.2f} {p95:6.2f} {max(lags):6.2f} {tail} "
            f"{phase.airflow_calls:14d} {phase.listings:9d}"
        )
    return "\n".join(lines)
