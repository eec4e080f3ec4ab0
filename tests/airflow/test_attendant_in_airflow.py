"""The parking attendant's decisions inside real Airflow 2.10 and 3.x (issue 66), from
``tests/airflow/inside/attendant_checks.py``: the real attendant and the real checks of drop-in sensors, its Airflow
side a twin and its services fakes of smartsensor's API. Each assertion below failed before issue 66: a try asked at
another connection's service (a false success), answers matched by position, a 409 asked about forever, a 500 that
never opened the valve, a restarted attendant that forgot the pool it opened, an unrenderable check ended as an
error, ends whose callbacks and listeners never ran, an execution_timeout counted from the attendant's own start, a
task that no longer parks left parked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scripts.airflow.stack import version_of
from tests.support.airflow_helpers import airflow_venvs, seen_inside

pytestmark = [pytest.mark.slow, pytest.mark.every_version]


@pytest.fixture(scope="module", params=airflow_venvs(), ids=version_of)
def seen(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    venv: Path = request.param
    return seen_inside(venv, tmp_path_factory.mktemp(f"attendant-{version_of(venv)}"), "attendant_checks.py")


def test_a_parked_task_carries_its_own_pool_and_what_airflow_runs_after_its_end(seen: dict[str, Any]) -> None:
    kwargs = seen["kwargs"]
    assert kwargs["plain"] == {"pool": "own_pool", "after_end": {}}
    assert kwargs["other_conn"]["pool"] == "default_pool"
    assert kwargs["callback"]["after_end"] == {"success": ["on_success_callback"]}


def test_each_try_is_asked_at_its_own_tasks_connection(seen: dict[str, Any]) -> None:
    """The partition landed in svc_a's metastore only: the try of a task whose connection is svc_b waits."""
    own = seen["own_connection"]
    assert own["registered"] == {"smartsensor_default": ["plain"], "svc_b": ["other_conn"]}
    assert own["ended"] == {"plain": "success"}
    assert own["watched"] == ["other_conn"]


def test_a_parked_try_has_a_log_beside_airflows_own(seen: dict[str, Any]) -> None:
    """``attempt=1.log.attendant.log``, in the version's own format: what it waits for, where it was registered,
    how it ended."""
    logs = seen["own_connection"]["logs"]
    plain = logs["plain"]
    if seen["airflow"][0] >= 3:
        events = [json.loads(line)["event"] for line in plain.splitlines()]
    else:
        events = [line.split(" INFO - ", 1)[1] for line in plain.splitlines()]
    assert len(events) == 2, plain
    assert (
        events[0].startswith("smartsensor: waiting since ")
        and '{"partition_names": ["db.t/ds=2026-11-22"]}' in events[0]
    )
    assert "registered with the service of connection 'smartsensor_default'" in events[0]
    assert events[1] == "smartsensor: ended success by the attendant, no worker: what it waits for is there"
    assert "connection 'svc_b'" in logs["other_conn"] and "ended" not in logs["other_conn"]


def test_answers_are_matched_to_tries_by_key(seen: dict[str, Any]) -> None:
    """The service answers in reverse order, with an answer for a try nobody asked about first."""
    answers = seen["answers_by_key"]
    assert answers["before"]["ended"] == {} and answers["before"]["watched"] == ["plain", "soft"]
    assert answers["after"]["ended"] == {"plain": "success"}
    assert answers["after"]["watched"] == ["soft"]


def test_a_try_the_service_keeps_refusing_is_handed_back(seen: dict[str, Any]) -> None:
    refused = seen["refused_for_now"]
    assert refused["handed_per_cycle"] == [0, 0, 0, 0, 1, 0]
    assert refused["registered"]["smartsensor_default"] == ["plain"] * 5
    assert refused["backs"] == {"plain": ["own_pool", "smartsensor refused it (409): an older try, 5 times"]}


def test_a_service_answering_500_opens_the_valve_after_the_grace(seen: dict[str, Any]) -> None:
    broken = seen["a_500"]
    assert broken["first_reachable"] is False
    assert broken["valve_open"] is True and broken["pool_slots"] == 128


def test_the_valves_state_is_kept_in_airflow(seen: dict[str, Any]) -> None:
    """A pool an earlier attendant opened is closed once the service answers, and stays open while it does not."""
    assert seen["valve_found_open_healthy"]["found_open"] is True
    assert seen["valve_found_open_healthy"]["pool_slots"] == 0
    assert seen["valve_found_open_down"]["pool_slots"] == 128 and seen["valve_found_open_down"]["valve_open"]


def test_what_airflow_runs_after_an_end_is_left_to_a_worker(seen: dict[str, Any]) -> None:
    ends = seen["worker_ends"]["plain"]
    assert ends["ended"] == {"plain": "success"}
    assert ends["backs"]["callback"] == ["default_pool", "success: a worker runs on_success_callback"]
    assert ends["backs"]["timeout"] == ["default_pool", "failed: a worker runs Airflow's failure handling"]
    pool, why = ends["backs"]["undefined"]
    assert pool == "own_pool" and why.startswith("UndefinedError"), why
    assert "undefined" not in ends["registered"]["smartsensor_default"]
    assert seen["worker_ends"]["listeners"]["backs"] == {"plain": ["own_pool", "success: a worker runs the listeners"]}
    # Resumed as the provider's trigger resumes a try: its execute_complete gets the answer as its event.
    key = {"dag_id": "checks", "task_id": "callback", "run_id": "manual__2026-11-22", "map_index": -1, "try_number": 1}
    assert ends["events"]["callback"] == {"state": "success", "error": None, "reason": None, "hashcode": 7, "key": key}
    assert ends["events"]["timeout"]["state"] == "failed" and ends["events"]["timeout"]["reason"] == "timeout"
    assert "undefined" not in ends["events"]  # not answered: the worker runs it from the start


def test_execution_timeout_counts_from_when_the_try_began_to_wait(seen: dict[str, Any]) -> None:
    timing = seen["execution_timeout"]
    # Waited an hour, 60 s allowed: at first sight it is resumed on a worker with the trigger's execution_timeout
    # event (execute_complete raises AirflowTaskTimeout; Airflow's failure handling and retries run there).
    assert timing["ended"] == {}
    assert timing["events"]["timeout"]["state"] == "execution_timeout"
    assert timing["backs"]["timeout"][1].startswith("error: a worker runs Airflow's failure handling")
    assert timing["watched"] == ["soft"]
    assert timing["recorded"] == ["soft"]  # no record of when it began to wait: recorded in Airflow


def test_a_task_that_no_longer_parks_and_release_hand_tries_back(seen: dict[str, Any]) -> None:
    gone = seen["no_longer_parks"]
    assert gone["gone"]["backs"] == {"gone": ["serialized_pool", "its task no longer parks"]}
    assert gone["count"] == 2
    assert gone["released"]["backs"] == {
        "plain": ["own_pool", "released: parking switched off"],
        "other_conn": ["default_pool", "released: parking switched off"],
    }
