"""Run inside an Airflow venv (not by pytest; parking on): the parking attendant's decisions
(issue 66), each case with a fresh attendant whose Airflow side is a twin (the parked tries, the serialized checks
and runs given here, the ends, hand-backs and pool changes recorded) and whose services are fakes of smartsensor's
HTTP API on httpx's MockTransport, one per connection (the real wire module writes their answers). The checks are
the real ones: made from real drop-in sensors in a DAG, by ``start.parked_check`` as the dag-processor makes them.
Prints one JSON line with what each case saw, for tests/airflow/test_attendant_in_airflow.py to assert on."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import datetime, timedelta, timezone
from typing import Any

os.environ["AIRFLOW__SMARTSENSOR__PARK"] = "True"  # before Airflow reads its configuration

import airflow  # noqa: F401 - first, as the attendant's program does
import httpx

from smartsensor_airflow import attendant as attendant_module
from smartsensor_airflow._compat import airflow_version
from smartsensor_airflow.attendant import Attendant, Settings
from smartsensor_airflow.attendant_airflow import Parked
from smartsensor_airflow.client import Endpoint
from smartsensor_airflow.parked_checks import start_kwargs
from smartsensor_airflow.parking import HandBack, Key, ParkedEnd
from smartsensor_airflow.sensors import NamedHivePartitionSensor
from smartsensor_airflow.start import PARKED_FIELD
from smartsensor_airflow.try_log import log_file
from smartsensor_airflow.wire import Registered, TaskInstanceRef, TryKey, try_state_json

try:
    from airflow.sdk import DAG
except ImportError:
    from airflow import DAG

DAY = datetime(2026, 11, 22, tzinfo=timezone.utc)
RUN_ID = "manual__2026-11-22"


def callback(context: Any) -> None:
    """A task's on_success_callback (never called here: its presence is what the attendant reads)."""


with DAG("checks", start_date=datetime(2026, 1, 1), schedule=None) as dag:
    TASKS = {
        "plain": NamedHivePartitionSensor(task_id="plain", partition_names=["db.t/ds={{ ds }}"], pool="own_pool"),
        "other_conn": NamedHivePartitionSensor(
            task_id="other_conn", partition_names=["db.t/ds={{ ds }}"], smartsensor_conn_id="svc_b"
        ),
        "callback": NamedHivePartitionSensor(
            task_id="callback", partition_names=["db.t/ds={{ ds }}"], on_success_callback=callback
        ),
        "undefined": NamedHivePartitionSensor(
            task_id="undefined", partition_names=["db.t/ds={{ params.nope }}"], pool="own_pool"
        ),
        "timeout": NamedHivePartitionSensor(
            task_id="timeout", partition_names=["db.t/ds=1999-01-01"], execution_timeout=timedelta(seconds=60)
        ),
        "soft": NamedHivePartitionSensor(task_id="soft", partition_names=["db.t/ds=1999-01-02"], soft_fail=True),
    }
KWARGS = {name: start_kwargs({PARKED_FIELD: task.smartsensor_parked}) for name, task in TASKS.items()}


class FakeService:
    """smartsensor's HTTP API as the attendant uses it, for one connection: registrations answered from ``landed``
    (a partition text in the check), states likewise (in reverse order, with an answer for a try nobody asked
    about first), ``refuse``: a status every registration gets, ``broken``: every request answers 500."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.landed: set[str] = set()
        self.failed: dict[str, str] = {}  # task_id → reason
        self.refuse: int | None = None
        self.broken = False
        self.registered: list[str] = []  # task ids, in order
        self.checks: dict[tuple[str, int], str] = {}  # (task_id, try) → the check's text

    def state(self, task_id: str, try_number: int) -> tuple[str, str | None, str | None]:
        if task_id in self.failed:
            return "failed", f"timed out waiting ({self.name})", self.failed[task_id]
        check = self.checks.get((task_id, try_number), "")
        return ("success", None, None) if any(p in check for p in self.landed) else ("running", None, None)

    def handle(self, request: httpx.Request) -> httpx.Response:
        if self.broken:
            return httpx.Response(500, json={"detail": "internal error"})
        path = request.url.path
        if path.endswith("/health"):
            return httpx.Response(200, json={"status": "ok"})
        body = json.loads(request.content)
        if path.endswith("/tasks/batch"):
            return httpx.Response(200, json={"tries": [self.register(one) for one in body["tries"]]})
        if path.endswith("/tasks/states"):
            asked = [TryKey.from_json(k) for k in body["keys"]]
            stranger = try_state_json(TryKey("x", "y", "z", -1, 1), 1, "success", None, None, 1)
            answers = [stranger] + [
                try_state_json(k, k.try_number, *self.state(k.task_id, k.try_number), 7) for k in reversed(asked)
            ]
            return httpx.Response(200, json={"states": answers})
        return httpx.Response(404, json={"detail": "no such path"})

    def register(self, one: dict[str, Any]) -> dict[str, Any]:
        key = TryKey.from_json(one["key"])
        self.registered.append(key.task_id)
        if self.refuse is not None:
            return {"key": key.to_json(with_instance=True), "status": self.refuse, "detail": "an older try"}
        self.checks[(key.task_id, key.try_number)] = json.dumps(one["sensor"]["persist"])
        state, error, reason = self.state(key.task_id, key.try_number)
        ref = TaskInstanceRef(key.dag_id, key.task_id, DAY.isoformat())
        return Registered(key, state, error, reason, 7, True, ref).to_json()


class TwinAttendant(Attendant):
    """The attendant with its Airflow side given here: ``parked`` (task name → Parked), ``pool_slots``; its ends,
    hand-backs and pool changes recorded."""

    def __init__(self, services: dict[str, FakeService], parked: dict[str, Parked], **settings: Any) -> None:
        now = [0.0]
        super().__init__(
            Settings(**{"fallback_grace": 5.0, **settings}),
            session_factory=lambda: None,
            endpoint=lambda conn_id: Endpoint(f"http://{conn_id}.test", "token"),
            clock=lambda: now[0],
        )
        self.now = now
        self.services = services
        self.parked = {("checks", RUN_ID, name, -1): p for name, p in parked.items()}
        self.pool_slots = 0
        self.ended: list[ParkedEnd] = []
        self.backs: list[HandBack] = []
        self.waiting_recorded: list[tuple[Key, int]] = []

        def route(request: httpx.Request) -> httpx.Response:
            return self.services[request.url.host.removesuffix(".test")].handle(request)

        self.http = httpx.AsyncClient(transport=httpx.MockTransport(route))

    def parked_tries(self, changed_since: datetime | None = None) -> tuple[dict[Key, Parked], datetime | None]:
        return dict(self.parked), None

    def start_kwargs_of(self, new: dict[Key, Parked]) -> dict[tuple[Any, str], tuple[dict[str, Any] | None, str]]:
        # As the real one: the pool a parked check carries, else the serialized task's ("serialized_pool" here).
        found = {k[2]: KWARGS.get(k[2]) for k in new}
        return {
            (p.version, k[2]): (found[k[2]], str((found[k[2]] or {}).get("pool") or "serialized_pool"))
            for k, p in new.items()
        }

    def run_rows(self, runs: set[tuple[str, str]]) -> dict[tuple[str, str], tuple[Any, Any, Any, Any]]:
        return {run: (DAY, DAY - timedelta(days=1), DAY, {}) for run in runs}

    def record_waiting(self, tries: list[tuple[Key, int]]) -> None:
        self.waiting_recorded += tries

    def end_in_airflow(self, batch: list[ParkedEnd]) -> list[ParkedEnd]:
        done = [end for end in batch if self.parked.pop(end.key, None) is not None]
        self.ended += done
        return done

    def hand_back_in_airflow(self, batch: list[HandBack]) -> list[HandBack]:
        moved = [back for back in batch if self.parked.pop(back.key, None) is not None]
        self.backs += moved
        return moved

    def beat(self) -> None:
        pass  # the heartbeat is Airflow's database's: tests/airflow/test_parked_end_to_end.py and test_parking_auto.py

    def repark_retries(self) -> int:
        return 0  # no retries here: tests/airflow/test_parked_end_to_end.py parks them again in real Airflow

    def set_pool_slots(self, expected: int, slots: int) -> None:
        if self.pool_slots == expected:
            self.pool_slots = slots

    def ensure_pool(self) -> int:
        return self.pool_slots

    def seen(self) -> dict[str, Any]:
        return {
            "ended": {e.task_id: e.state for e in self.ended},
            "backs": {b.task_id: [b.pool, b.why] for b in self.backs},
            "events": {b.task_id: b.event for b in self.backs if b.event is not None},
            "watched": sorted(k[2] for k in self.watched),
            "registered": {name: s.registered for name, s in self.services.items()},
            "pool_slots": self.pool_slots,
            "valve_open": self.valve_open,
        }

    async def settle(self, until: Any, timeout: float = 20.0) -> None:
        """Let the groups' tasks run until ``until()`` holds (bounded)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not until() and loop.time() < deadline:
            await asyncio.sleep(0.05)

    async def close(self) -> None:
        for group in self.groups:
            if group.task is not None:
                group.task.cancel()
        await asyncio.gather(*(g.task for g in self.groups if g.task is not None), return_exceptions=True)
        assert self.http is not None
        await self.http.aclose()
        self.db.shutdown(wait=True)


def try_log_text(task_id: str, try_number: int = 1) -> str | None:
    """The text of the attendant's log of a try of ``task_id`` (None when it wrote none)."""
    path = log_file(("checks", RUN_ID, task_id, -1), try_number)
    return None if path is None or not path.exists() else path.read_text()


def waiting(try_number: int = 1, since: datetime | None = None) -> Parked:
    return Parked(try_number, "v1", since)


async def own_connection() -> dict[str, Any]:
    """Two services, the partition landed in only one: each try is asked at its own task's connection."""
    a, b = FakeService("smartsensor_default"), FakeService("svc_b")
    a.landed.add("ds=2026-11-22")
    att = TwinAttendant({"smartsensor_default": a, "svc_b": b}, {"plain": waiting(), "other_conn": waiting()})
    try:
        await att.cycle()
        await att.settle(lambda: False, timeout=0.5)
        logs = {name: try_log_text(name) for name in ("plain", "other_conn")}
        return {**att.seen(), "logs": logs}
    finally:
        await att.close()


async def answers_by_key() -> dict[str, Any]:
    """Answers come in reverse order, with one for a try nobody asked about: each end is the answered try's."""
    a = FakeService("smartsensor_default")
    att = TwinAttendant({"smartsensor_default": a}, {"plain": waiting(), "soft": waiting()})
    try:
        await att.cycle()
        before = att.seen()
        a.landed.add("ds=2026-11-22")  # plain's partition lands; soft's never does
        await att.settle(lambda: bool(att.ended))
        return {"before": before, "after": att.seen()}
    finally:
        await att.close()


async def refused_for_now() -> dict[str, Any]:
    """A service that keeps refusing a try (409) is asked ``REFUSALS`` times, then the try is handed back."""
    a = FakeService("smartsensor_default")
    a.refuse = 409
    att = TwinAttendant({"smartsensor_default": a}, {"plain": waiting()})
    handed = []
    try:
        for _ in range(attendant_module.REFUSALS + 1):
            handed.append((await att.cycle()).handed_back)
        return {**att.seen(), "handed_per_cycle": handed}
    finally:
        await att.close()


async def a_500_opens_the_valve() -> dict[str, Any]:
    """A service that answers 500 to everything is out of reach: past the grace the parking pool opens."""
    a = FakeService("smartsensor_default")
    a.broken = True
    att = TwinAttendant({"smartsensor_default": a}, {"plain": waiting()}, fallback_grace=5.0)
    try:
        first = await att.cycle()
        att.now[0] += 6.0
        await att.cycle()
        return {**att.seen(), "first_reachable": first.reachable}
    finally:
        await att.close()


async def valve_found_open(healthy: bool) -> dict[str, Any]:
    """An attendant that starts with the pool opened to ``valve_slots`` (a restart during an outage) closes it once
    the service answers, and keeps it open while it does not."""
    a = FakeService("smartsensor_default")
    a.broken = not healthy
    att = TwinAttendant({"smartsensor_default": a}, {})
    att.pool_slots = att.settings.valve_slots
    try:
        att.open_valve_found(att.ensure_pool())
        opened = att.valve_open
        await att.cycle()
        return {**att.seen(), "found_open": opened}
    finally:
        await att.close()


async def what_a_worker_ends() -> dict[str, Any]:
    """A check the attendant cannot render goes back to its own pool; a task with an on_success_callback, and a
    timeout, are handed back to a worker; a success with nothing after it is ended here; with listener plugins every
    end is a worker's."""
    a = FakeService("smartsensor_default")
    a.landed.add("ds=2026-11-22")
    a.failed["timeout"] = "timeout"
    tries = {"plain": waiting(), "callback": waiting(), "undefined": waiting(), "timeout": waiting()}
    att = TwinAttendant({"smartsensor_default": a}, tries)
    listening = TwinAttendant({"smartsensor_default": a}, {"plain": waiting()})
    listening.listeners = True
    try:
        await att.cycle()
        await listening.cycle()
        return {"plain": att.seen(), "listeners": listening.seen()}
    finally:
        await att.close()
        await listening.close()


async def execution_timeout_from_when_it_waits() -> dict[str, Any]:
    """A try that has waited longer than its execution_timeout (60 s) when the attendant first sees it ends at
    once; one with no record of when it began to wait has it recorded (2.10)."""
    a = FakeService("smartsensor_default")
    an_hour_ago = datetime.now(timezone.utc) - timedelta(hours=1)
    att = TwinAttendant({"smartsensor_default": a}, {"timeout": waiting(since=an_hour_ago), "soft": waiting()})
    try:
        await att.cycle()
        return {**att.seen(), "recorded": sorted(k[2] for k, _ in att.waiting_recorded)}
    finally:
        await att.close()


async def no_longer_parks_and_release() -> dict[str, Any]:
    """A parked try whose serialized task carries no check (parking switched off) goes back to the pool its task
    names; ``release`` hands every parked try back."""
    a = FakeService("smartsensor_default")
    a_task = TwinAttendant({"smartsensor_default": a}, {"gone": waiting()})
    released = TwinAttendant({"smartsensor_default": a}, {"plain": waiting(), "other_conn": waiting()})
    try:
        await a_task.cycle()
        count = released.release()
        return {"gone": a_task.seen(), "released": released.seen(), "count": count}
    finally:
        await a_task.close()
        await released.close()


async def main() -> dict[str, Any]:
    return {
        "airflow": list(airflow_version()),
        "kwargs": {name: {"pool": k["pool"], "after_end": k["after_end"]} for name, k in KWARGS.items() if k},
        "own_connection": await own_connection(),
        "answers_by_key": await answers_by_key(),
        "refused_for_now": await refused_for_now(),
        "a_500": await a_500_opens_the_valve(),
        "valve_found_open_healthy": await valve_found_open(True),
        "valve_found_open_down": await valve_found_open(False),
        "worker_ends": await what_a_worker_ends(),
        "execution_timeout": await execution_timeout_from_when_it_waits(),
        "no_longer_parks": await no_longer_parks_and_release(),
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main()), default=str))
    sys.exit(0)
