"""One definition of what crosses HTTP: the provider and the service build and read the task API's JSON through the
one ``wire`` file both distributions ship, the service's pydantic models hold the same fields, and a body that is
not the shape it should be is refused with the field that was wrong (issue 56 item 4)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import smartsensor.wire
import smartsensor_airflow.wire
from smartsensor.api import tasks as api_tasks
from smartsensor.wire import (
    AskedTry,
    Refused,
    Registered,
    Registration,
    TaskInstanceRef,
    TryKey,
    TryState,
    WireError,
    batch_answer,
    states_answer,
    states_request,
    try_state_json,
)
from tests.support.common import ROOT
from tests.support.shipped import top_level_imports

WIRE = ROOT / "providers" / "airflow" / "smartsensor_airflow" / "wire" / "__init__.py"
KEY = TryKey("etl", "wait", "scheduled__2026-11-28", -1, 2)
REGISTERED = Registered(
    KEY.in_instance("prod"),
    "smart_pending",
    None,
    None,
    -42,
    True,
    TaskInstanceRef("etl", "wait", "2026-11-28T10:00:00+00:00"),
)


def test_both_distributions_load_the_one_file() -> None:
    assert Path(smartsensor.wire.__file__).resolve() == WIRE.resolve()
    assert Path(smartsensor_airflow.wire.__file__).resolve() == WIRE.resolve()
    assert "smartsensor.wire = providers/airflow/smartsensor_airflow/wire" in (ROOT / "setup.cfg").read_text()


def test_the_wire_imports_only_the_standard_library() -> None:
    """Shipped by both distributions (and run on Airflow 2.10's Python 3.9), it can import neither, nor pydantic."""
    found = top_level_imports(WIRE)
    assert found == {"__future__", "dataclasses", "datetime", "typing"}, found


def test_a_key_travels_with_its_instance_only_when_set() -> None:
    """A service before instance names refuses a field it does not know: a key without one sends none."""
    assert KEY.to_json() == {"dag_id": "etl", "task_id": "wait", "run_id": "scheduled__2026-11-28", "map_index": -1,
                             "try_number": 2}  # fmt: skip
    assert KEY.in_instance("prod").to_json()["instance"] == "prod"
    assert KEY.to_json(with_instance=True)["instance"] == ""
    for key in (KEY, KEY.in_instance("prod")):
        assert TryKey.from_json(key.to_json()) == key
        assert TryKey.from_json(json.loads(json.dumps(key.to_json()))) == key
    assert hash(KEY) == hash(TryKey.from_json(KEY.to_json()))  # the poller waits on it


def test_an_asked_try_carries_its_hashcode_only_when_known() -> None:
    assert AskedTry(KEY).to_json() == KEY.to_json()
    assert AskedTry(KEY, 7).to_json() == {**KEY.to_json(), "hashcode": 7}
    for asked in (AskedTry(KEY), AskedTry(KEY.in_instance("prod"), -(2**63))):
        assert AskedTry.from_json(asked.to_json()) == asked
    assert states_request([AskedTry(KEY, 7)]) == {"keys": [{**KEY.to_json(), "hashcode": 7}]}


def test_a_registration_round_trips() -> None:
    logical = datetime(2026, 11, 28, 10, tzinfo=timezone.utc)
    for date in (logical, None):
        registration = Registration(KEY, "NamedHivePartitionSensor", {"partition_names": ["db.t/ds=1"]}, {}, date)
        body = registration.to_json()
        assert body == {
            "key": KEY.to_json(),
            "sensor": {"class": "NamedHivePartitionSensor", "persist": {"partition_names": ["db.t/ds=1"]}, "exec": {}},
            "logical_date": None if date is None else "2026-11-28T10:00:00+00:00",
        }
        assert Registration.from_json(json.loads(json.dumps(body))) == registration


def test_the_answers_round_trip() -> None:
    assert Registered.from_json(json.loads(json.dumps(REGISTERED.to_json()))) == REGISTERED
    refused = Refused(KEY, 422, "no such class")
    assert Refused.from_json(refused.to_json()) == refused
    assert batch_answer({"tries": [REGISTERED.to_json(), refused.to_json()]}) == [REGISTERED, refused]
    state = TryState(KEY, "failed", "timed out waiting", "timeout", 5)
    assert state.to_json() == try_state_json(KEY, 2, "failed", "timed out waiting", "timeout", 5)
    assert states_answer({"states": [state.to_json()]}) == [state]
    assert TryState.from_json({**state.to_json(), "instance": "prod"}).key == KEY  # answers match waiters without one


def test_an_answer_from_an_older_service_reads() -> None:
    """Before 0.3.0 no ``reason``; before instance names the key has none, and the service takes no hashcode."""
    old = REGISTERED.to_json()
    del old["reason"], old["key"]["instance"]
    answer = Registered.from_json(old)
    assert (answer.reason, answer.asks_by_hashcode) == (None, False)
    assert answer.asked(KEY) == AskedTry(KEY)  # asked without the hashcode the older service would refuse
    assert answer.to_json() == {**old, "reason": None}
    assert REGISTERED.asked(KEY) == AskedTry(KEY, -42)
    minimal = {f: v for f, v in TryState(KEY, "success").to_json().items() if f not in ("error", "reason", "hashcode")}
    assert TryState.from_json(minimal) == TryState(KEY, "success")


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "registration answer: expected a JSON object, got list"),
        ({**REGISTERED.to_json(), "hashcode": "7"}, "'hashcode' must be int, got str '7'"),
        ({**REGISTERED.to_json(), "hashcode": True}, "'hashcode' must be int, got bool True"),
        ({**REGISTERED.to_json(), "state": None}, "registration answer: 'state' is null"),
        ({k: v for k, v in REGISTERED.to_json().items() if k != "created"}, "'created' is missing"),
        ({**REGISTERED.to_json(), "key": "etl"}, "registration answer: key: expected a JSON object, got str"),
        ({**REGISTERED.to_json(), "key": {"dag_id": "etl"}}, "registration answer: key: 'task_id' is missing"),
        ({**REGISTERED.to_json(), "task_instance": None}, "task_instance: expected a JSON object, got NoneType"),
    ],
)
def test_a_malformed_registration_answer_is_refused_by_its_field(doc: Any, message: str) -> None:
    with pytest.raises(WireError, match=message.replace("(", r"\(")):
        Registered.from_json(doc)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("<html>", "states answer: expected a JSON object, got str"),
        ({"states": {}}, "states answer: 'states' must be a list, got dict"),
        ({}, "states answer: 'states' must be a list, got NoneType"),
        ({"states": [{"state": "success"}]}, r"states answer: states\[0\]: 'dag_id' is missing"),
        ({"states": [{**KEY.to_json(), "state": "success", "map_index": "-1"}]}, "'map_index' must be int"),
        ({"states": [{**KEY.to_json(), "state": "success", "error": 3}]}, "'error' must be str, got int 3"),
    ],
)
def test_a_malformed_states_answer_is_refused_by_its_field(doc: Any, message: str) -> None:
    with pytest.raises(WireError, match=message):
        states_answer(doc)


def test_malformed_requests_and_batches_are_refused() -> None:
    with pytest.raises(WireError, match=r"batch answer: tries\[0\]: 'detail' is missing"):
        batch_answer({"tries": [{"key": KEY.to_json(), "status": 409}]})
    with pytest.raises(WireError, match="'logical_date' is not an ISO 8601 date-time"):
        Registration.from_json({**Registration(KEY, "C", {}, {}).to_json(), "logical_date": "yesterday"})
    with pytest.raises(WireError, match="registration: sensor: 'class' is missing"):
        Registration.from_json({"key": KEY.to_json(), "sensor": {}})
    assert issubclass(WireError, ValueError)  # a reader that catches ValueError (not JSON) catches it too


def _fields(model: type[BaseModel]) -> list[str]:
    return [field.alias or name for name, field in model.model_fields.items()]


def test_the_services_models_hold_the_wires_fields() -> None:
    """The pydantic models add the schema's constraints to the wire's shapes: the same fields, in the same order."""
    asked = AskedTry(KEY.in_instance("prod"), 7)
    assert _fields(api_tasks.Key) == list(KEY.to_json(with_instance=True))
    assert _fields(api_tasks.AskedKey) == list(asked.to_json())
    assert _fields(api_tasks.TryState) == list(TryState(KEY, "success").to_json())
    assert _fields(api_tasks.Registered) == list(REGISTERED.to_json())
    assert _fields(api_tasks.TaskInstanceRef) == list(REGISTERED.task_instance.to_json())
    assert _fields(api_tasks.Refused) == list(Refused(KEY, 409, "").to_json())
    for model, doc in (
        (api_tasks.Key, KEY.to_json(with_instance=True)),
        (api_tasks.AskedKey, asked.to_json()),
        (api_tasks.Registered, REGISTERED.to_json()),
        (api_tasks.Refused, Refused(KEY, 409, "older try").to_json()),
        (api_tasks.TryState, TryState(KEY, "failed", "timed out waiting", "timeout", 5).to_json()),
    ):
        assert model.model_validate(doc).model_dump(mode="json") == doc, model
    assert api_tasks.Key.model_validate(KEY.to_json()).wire() == KEY


def test_the_registration_models_take_what_the_provider_sends() -> None:
    register = api_tasks.register_model(["NamedHivePartitionSensor"])
    registration = Registration(KEY, "NamedHivePartitionSensor", {"partition_names": ["db.t/ds=1"]}, {"timeout": 60})
    body = register.model_validate(registration.to_json())
    assert body.key.wire() == KEY  # type: ignore[attr-defined]
    assert body.model_dump(by_alias=True, mode="json", exclude_unset=True) == registration.to_json()
