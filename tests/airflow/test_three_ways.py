"""One DAG, three ways (issue 66's done-when), in Airflow as a platform team runs it
(tests/support/airflow_deployment.py: scheduler, triggerer, 3.x's dag-processor and api-server, LocalExecutor, its
database on PostgreSQL; smartsensor's ``serve`` and ``workers -n 2``): the same five sensors (a partition that lands,
a timeout, a retry by ``execution_timeout``, a soft_fail, a template the run cannot render) **parked** (the default:
``park = auto`` with the attendant running), **started in the triggerer** (``smartsensor_park=False``) and as
**Airflow's own Hive sensor**, each with every callback, email on failure and retry (a local SMTP server), a listener
plugin, an outlet a consumer DAG is scheduled on, and a user's note on the waiting try. What Airflow's own sensor
does is the contract: the other two must do the same, to the try.

With a listener plugin installed, every end of a parked try (and of a try started in the triggerer) is a worker's:
Airflow tells listeners of an end only on a worker. On 3.1.8 (``SMARTSENSOR_AIRFLOW_VERSIONS=3.1.8``; 3.0-3.2
ignore ``start_from_trigger``) the triggerer way starts on a worker and defers, and listeners hear that try
``running`` once more when it resumes, as any deferrable operator's: the only difference, Airflow's own. The ends
the attendant makes alone (no worker) are held to Airflow's rules by tests/airflow/test_parked_end_to_end.py."""

from __future__ import annotations

import email
import threading
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator

import pytest
from aiosmtpd.controller import Controller
from sqlalchemy import create_engine, text

from scripts.airflow.stack import version_of
from smartsensor.adapters.metastore_service_process import free_port
from smartsensor.config import Config
from tests.support.airflow_databases import AirflowDatabases
from tests.support.airflow_deployment import Deployment, deployed, metastore_connection, tmp_for
from tests.support.airflow_helpers import airflow_venvs
from tests.support.airflow_race import TABLES

pytestmark = pytest.mark.slow

DAY = "2026-10-05"
WAYS = ("parked", "triggerer", "airflow")
SCENARIOS = ("success", "timeout", "retry", "soft_fail", "unrenderable")
NOTE = "checked by the on-call: the upstream job is late"
ENDED = ("success", "failed", "skipped", "upstream_failed")
# The mails' subject (``[email] subject_template``): which try of which task, on 2.10 and 3.x alike.
SUBJECT = "three ways: {{ ti.dag_id }} {{ ti.task_id }} {{ try_number }} of {{ max_tries + 1 }}"
DAG_FILE = """
from datetime import datetime, timedelta
from pathlib import Path

from airflow import DAG

try:
    from airflow.sdk import Asset
    from airflow.providers.standard.operators.empty import EmptyOperator
except ImportError:  # Airflow 2
    from airflow.datasets import Dataset as Asset
    from airflow.operators.empty import EmptyOperator

from airflow.providers.apache.hive.sensors import named_hive_partition as airflows
from smartsensor_airflow import sensors as drop_in

MARKS = Path("@MARKS@")
NEVER = ["@DB@.events/ds=1999-01-01"]


def marker(kind):
    def write(context):
        ti = context["ti"]
        with open(MARKS / "callbacks.log", "a") as out:
            out.write(f"{ti.dag_id} {ti.task_id} {ti.try_number} {kind}\\n")

    return write


WAYS = {
    "parked": (drop_in, {}),  # park = auto, the default: parks while the attendant runs
    "triggerer": (drop_in, {"smartsensor_park": False}),
    "airflow": (airflows, {"mode": "poke"}),  # execution_timeout bounds a try that pokes on
}
for way, (module, options) in WAYS.items():
    Sensor = module.NamedHivePartitionSensor
    args = dict(
        email=["team@example.com"], email_on_failure=True, email_on_retry=True, poke_interval=1,
        retry_delay=timedelta(seconds=2),
        **{f"on_{kind}_callback": marker(kind) for kind in ("success", "failure", "retry", "skipped")},
        **options,
    )
    asset = Asset(f"smartsensor-test://three/{way}")
    with DAG(f"three_{way}", start_date=datetime(2026, 1, 1), schedule=None, catchup=False):
        Sensor(task_id="success", partition_names=["@DB@.events/ds={{ ds }}"], timeout=600, retries=1,
               outlets=[asset], **args)
        Sensor(task_id="timeout", partition_names=NEVER, timeout=5, retries=2, **args)
        Sensor(task_id="retry", partition_names=NEVER, timeout=600, execution_timeout=timedelta(seconds=6),
               retries=1, **args)
        Sensor(task_id="soft_fail", partition_names=NEVER, timeout=5, soft_fail=True, retries=2, **args)
        Sensor(task_id="unrenderable", partition_names=["@DB@.events/ds={{ params.nope }}"], retries=0, **args)
    with DAG(f"three_{way}_consumer", start_date=datetime(2026, 1, 1), schedule=[asset], catchup=False):
        EmptyOperator(task_id="consume")
"""
LISTENER = """
from airflow.listeners import hookimpl
from airflow.plugins_manager import AirflowPlugin

LOG = "@MARKS@/listener.log"


def heard(event, ti):
    with open(LOG, "a") as out:
        out.write(f"{ti.dag_id} {ti.task_id} {ti.try_number} {event}\\n")


class Heard:
    @hookimpl
    def on_task_instance_running(self, previous_state, task_instance):
        heard("running", task_instance)

    @hookimpl
    def on_task_instance_success(self, previous_state, task_instance):
        heard("success", task_instance)

    @hookimpl
    def on_task_instance_failed(self, previous_state, task_instance, error):
        heard("failed", task_instance)


class ThreeWaysListener(AirflowPlugin):
    name = "three_ways_listener"
    listeners = [Heard()]
"""


class Mailbox:
    """A local SMTP server (aiosmtpd) that keeps the subject of every mail it is sent."""

    def __init__(self) -> None:
        self.subjects: list[str] = []
        self.lock = threading.Lock()
        self.port = free_port()
        self.controller = Controller(self, hostname="127.0.0.1", port=self.port)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        """aiosmtpd's hook for a mail's content."""
        message = email.message_from_bytes(envelope.content)
        with self.lock:
            self.subjects.append(str(message.get("Subject", "")))
        return "250 OK"

    def env(self) -> dict[str, str]:
        """Airflow's settings to send mail here: 2.10's ``[smtp]``, 3.x's SMTP provider's connection."""
        return {
            "AIRFLOW__SMTP__SMTP_HOST": "127.0.0.1",
            "AIRFLOW__SMTP__SMTP_PORT": str(self.port),
            "AIRFLOW__SMTP__SMTP_STARTTLS": "False",
            "AIRFLOW__SMTP__SMTP_SSL": "False",
            "AIRFLOW__SMTP__SMTP_MAIL_FROM": "airflow@example.com",
            "AIRFLOW__SMTP__SMTP_RETRY_LIMIT": "1",
            "AIRFLOW__EMAIL__FROM_EMAIL": "airflow@example.com",
            "AIRFLOW_CONN_SMTP_DEFAULT": f"smtp://127.0.0.1:{self.port}?disable_tls=true&disable_ssl=true",
        }

    def sent(self) -> list[str]:
        with self.lock:
            return list(self.subjects)


@pytest.fixture(scope="module")
def mailbox() -> Iterator[Mailbox]:
    box = Mailbox()
    box.controller.start()
    try:
        yield box
    finally:
        box.controller.stop()


@pytest.fixture(scope="module", params=airflow_venvs(), ids=version_of)
def deployment(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    service: Config,
    airflow_databases: AirflowDatabases,
    mailbox: Mailbox,
) -> Iterator[tuple[Deployment, Path]]:
    venv: Path = request.param
    db = "three_" + version_of(venv).replace(".", "_")
    tmp = tmp_for(tmp_path_factory, venv)
    marks = tmp / "marks"
    marks.mkdir()
    (marks / "subject.j2").write_text(SUBJECT)
    with deployed(
        venv,
        airflow_databases,
        tmp,
        service,
        db,
        TABLES,
        {},  # the DAG file comes once the attendant runs: park = auto parks at parse time while one does
        [],
        home_files={"plugins/three_ways_listener.py": LISTENER.replace("@MARKS@", str(marks))},
        airflow_env={
            "AIRFLOW__SCHEDULER__DAG_DIR_LIST_INTERVAL": "5",  # 2.10: a new DAG file is found within 5 s
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",  # 3.x
            **mailbox.env(),
            "AIRFLOW__EMAIL__SUBJECT_TEMPLATE": str(marks / "subject.j2"),
            **metastore_connection(service),  # Airflow's own Hive sensor's
        },
    ) as running:
        running.start_attendant()
        (running.stack.dags / "three_ways.py").write_text(DAG_FILE.replace("@DB@", db).replace("@MARKS@", str(marks)))
        running.stack.wait_parsed([f"three_{way}{end}" for way in WAYS for end in ("", "_consumer")], timeout=300)
        yield running, marks


@dataclass(frozen=True)
class Seen:
    """What one task did, as its users see it."""

    state: str
    tries: int
    callbacks: tuple[str, ...]  # "<try> <kind>", sorted
    mails: tuple[str, ...]  # "<try> of <tries>" of each mail about it, sorted
    listener: tuple[str, ...]  # "<try> <event>", sorted
    history: int  # rows in task_instance_history
    note: str | None
    logs: tuple[bool, ...]  # per try: a log Airflow's UI reads
    consumer_runs: int  # runs of the DAG scheduled on its outlet (the success task's)


def test_the_same_dag_three_ways(deployment: tuple[Deployment, Path], mailbox: Mailbox) -> None:
    running, marks = deployment
    stack = running.stack
    dag_ids = [f"three_{way}" for way in WAYS]
    runs = dict(zip(dag_ids, stack.trigger_many(dag_ids, DAY), strict=True))
    waiting = {
        "three_parked": "state = 'scheduled' AND pool = 'smartsensor_parked'",
        "three_triggerer": "state = 'deferred'",
        "three_airflow": "state = 'running'",
    }

    def all_waiting() -> bool:
        for dag_id, predicate in waiting.items():
            sql = (
                "SELECT count(*) FROM task_instance WHERE dag_id = :d AND run_id = :r AND task_id = 'success' "
                f"AND {predicate}"
            )
            if stack.rows(sql, d=dag_id, r=runs[dag_id])[0][0] != 1:
                return False
        return registered_success(running.engine) == 2

    stack.wait("each way's success task waiting (parked, deferred, poking)", all_waiting, timeout=600, step=0.5)
    write_notes(stack, runs)
    running.landing.land(DAY)

    def ended() -> bool:
        states = [s for dag_id, run_id in runs.items() for s in states_of(stack, dag_id, run_id)]
        return len(states) == len(WAYS) * len(SCENARIOS) and all(s in ENDED for s in states)

    stack.wait("every task of the three DAGs ended", ended, timeout=900, step=1)
    stack.wait(
        "the outlets' consumers ran",
        lambda: all(consumer_runs(stack, way) >= 1 for way in WAYS),
        timeout=300,
    )
    seen = {way: gather(stack, marks, mailbox, way, runs[f"three_{way}"]) for way in WAYS}
    print_table(stack.version, seen)
    for scenario in SCENARIOS:
        airflows = seen["airflow"][scenario]
        for way in ("parked", "triggerer"):
            mine = seen[way][scenario]
            if way == "triggerer" and defers_from_a_worker(stack):
                # 3.0-3.2 ignore start_from_trigger: the try starts on a worker, defers and resumes there, and
                # listeners hear it `running` at each start, as any deferrable operator's try (Airflow's own rule)
                mine = replace(mine, listener=tuple(sorted(set(mine.listener))))
            assert mine == airflows, f"{way} {scenario}: {mine} != Airflow's {airflows}"
    expected = {
        "success": ("success", 1),
        "timeout": ("failed", 1),  # a sensor's timeout is not retried
        "retry": ("failed", 2),
        "soft_fail": ("skipped", 1),
        "unrenderable": ("failed", 1),
    }
    assert {s: (e.state, e.tries) for s, e in seen["airflow"].items()} == expected
    assert seen["airflow"]["success"].note == NOTE and seen["airflow"]["success"].consumer_runs == 1
    assert "1 retry" in seen["airflow"]["retry"].callbacks and seen["airflow"]["retry"].mails


def defers_from_a_worker(stack: Any) -> bool:
    """Whether this Airflow ignores ``start_from_trigger`` (3.0-3.2): a try started in the triggerer there starts on
    a worker."""
    major, minor = (int(part) for part in stack.version.split(".")[:2])
    return major == 3 and minor < 3


def registered_success(engine: Any) -> int:
    """How many of the parked and triggerer ways' success tasks smartsensor registered."""
    with engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM external_task WHERE task_id = 'success' "
                    "AND dag_id IN ('three_parked', 'three_triggerer')"
                )
            ).scalar_one()
        )


def states_of(stack: Any, dag_id: str, run_id: str) -> list[str]:
    return [
        s
        for (s,) in stack.rows("SELECT state FROM task_instance WHERE dag_id = :d AND run_id = :r", d=dag_id, r=run_id)
    ]


def write_notes(stack: Any, runs: dict[str, str]) -> None:
    """A user's note on each way's waiting success task, as Airflow's UI writes it (its table, this version's
    columns)."""
    engine = create_engine(stack.db_url)
    try:
        with engine.begin() as conn:
            for dag_id, run_id in runs.items():
                if stack.major >= 3:
                    conn.execute(
                        text(
                            "INSERT INTO task_instance_note (ti_id, user_id, content, created_at, updated_at) "
                            "SELECT id, 'on-call', :note, now(), now() FROM task_instance "
                            "WHERE dag_id = :d AND run_id = :r AND task_id = 'success'"
                        ),
                        {"note": NOTE, "d": dag_id, "r": run_id},
                    )
                else:
                    conn.execute(
                        text(
                            "INSERT INTO task_instance_note (dag_id, task_id, run_id, map_index, content, created_at, "
                            "updated_at) SELECT dag_id, task_id, run_id, map_index, :note, now(), now() "
                            "FROM task_instance WHERE dag_id = :d AND run_id = :r AND task_id = 'success'"
                        ),
                        {"note": NOTE, "d": dag_id, "r": run_id},
                    )
    finally:
        engine.dispose()


def consumer_runs(stack: Any, way: str) -> int:
    return int(stack.rows("SELECT count(*) FROM dag_run WHERE dag_id = :d", d=f"three_{way}_consumer")[0][0])


def gather(stack: Any, marks: Path, mailbox: Mailbox, way: str, run_id: str) -> dict[str, Seen]:
    """scenario → what its task did, in the DAG of ``way``."""
    dag_id = f"three_{way}"
    notes_sql = (
        "SELECT t.task_id, n.content FROM task_instance_note n JOIN task_instance t ON n.ti_id = t.id "
        "WHERE t.dag_id = :d AND t.run_id = :r"
        if stack.major >= 3
        else "SELECT task_id, content FROM task_instance_note WHERE dag_id = :d AND run_id = :r"
    )
    notes = dict(stack.rows(notes_sql, d=dag_id, r=run_id))
    history_sql = "SELECT task_id FROM task_instance_history WHERE dag_id = :d AND run_id = :r"
    history = Counter(task_id for (task_id,) in stack.rows(history_sql, d=dag_id, r=run_id))
    callbacks, listener = lines_of(marks / "callbacks.log", dag_id), lines_of(marks / "listener.log", dag_id)
    seen: dict[str, Seen] = {}
    for task_id, state, tries in stack.rows(
        "SELECT task_id, state, try_number FROM task_instance WHERE dag_id = :d AND run_id = :r", d=dag_id, r=run_id
    ):
        folder = stack.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
        seen[task_id] = Seen(
            state=state,
            tries=int(tries),
            callbacks=tuple(sorted(callbacks.get(task_id, []))),
            mails=mails_of(mailbox.sent(), dag_id, task_id),
            listener=tuple(sorted(listener.get(task_id, []))),
            history=history[task_id],
            note=notes.get(task_id),
            logs=tuple(
                any(path.stat().st_size > 0 for path in folder.glob(f"attempt={n}.log*")) for n in range(1, tries + 1)
            ),
            consumer_runs=consumer_runs(stack, way) if task_id == "success" else 0,
        )
    return seen


def lines_of(path: Path, dag_id: str) -> dict[str, list[str]]:
    """task_id → "<try> <what>" of a marks file's lines ("<dag_id> <task_id> <try> <what>") for ``dag_id``."""
    out: dict[str, list[str]] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        dag, task_id, rest = line.split(" ", 2)
        if dag == dag_id:
            out.setdefault(task_id, []).append(rest)
    return out


def mails_of(subjects: list[str], dag_id: str, task_id: str) -> tuple[str, ...]:
    """ "<try> of <tries>" of each mail about ``dag_id``.``task_id`` (its subject: SUBJECT), sorted."""
    prefix = f"three ways: {dag_id} {task_id} "
    return tuple(sorted(s.removeprefix(prefix) for s in subjects if s.startswith(prefix)))


def print_table(version: str, seen: dict[str, dict[str, Seen]]) -> None:
    print(f"\nAirflow {version}: one DAG three ways (parked / started in the triggerer / Airflow's own Hive sensor)")
    for scenario in SCENARIOS:
        for way in WAYS:
            print(f"{scenario:<13}{way:<10}{seen[way][scenario]}")
