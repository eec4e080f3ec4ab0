"""Tasks of another scheduler (Airflow) registered by their own key, on SQLite and PostgreSQL: one try here
per try there, idempotent re-registration, a new try never inheriting an old outcome, batched states, and a
shard round serving them like any other task (sharing one check with identical waits)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any

import pytest
from fastapi.testclient import TestClient

from smartsensor.adapters.sql import tasks as task_sql
from smartsensor.adapters.sql.external import SqlExternalTryStore
from smartsensor.adapters.sql.round_store import SqlRoundStore
from smartsensor.domain.clock import as_utc
from smartsensor.domain.keys import ExternalKey, TaskKey
from smartsensor.domain.states import State
from smartsensor.domain.timing import timeout_error
from smartsensor.external.registration import (
    ExternalConflict,
    ExternalRegistered,
    ExternalTry,
    register_external,
    register_externals,
)
from smartsensor.external.states import REASONS, Asked, external_states
from smartsensor.roots.serve import create_app
from smartsensor.sensors.errors import SensorDefinitionError
from smartsensor.service.round.range_rounds import RangeRounds, run_round
from tests.support.catalog_doubles import DictCatalog

KEY = ExternalKey("etl", "wait_events", "scheduled__2026-11-22T00:00:00+00:00")
NAMED = {"partition_names": ["db.events/ds=2026-11-22"]}
TOKEN = "t0ken"


def reg(
    engine: Any, cfg: Any, key: ExternalKey = KEY, try_number: int = 1, persist: dict | None = None, **exec_values: Any
) -> Any:
    return register_external(
        SqlExternalTryStore(engine),
        cfg,
        key,
        try_number,
        "NamedHivePartitionSensor",
        persist or NAMED,
        {"poke_interval": 30, "timeout": 600, **exec_values},
    )


def test_the_same_try_registering_again_gets_the_same_task_instance(cfg, engine) -> None:
    first = reg(engine, cfg)
    again = reg(engine, cfg)
    assert first.created and not again.created
    assert again.task_instance == first.task_instance and again.state == State.SMART_PENDING
    with engine.connect() as conn:
        assert len(task_sql.list_tasks(conn)) == 1
        row = task_sql.list_tasks(conn)[0]
    assert (row.dag_id, row.task_id, row.max_tries) == ("etl", "wait_events", 0)  # Airflow owns retries


def test_a_new_try_starts_fresh_and_ends_the_old_one(cfg, engine) -> None:
    first = reg(engine, cfg, try_number=1)
    with engine.begin() as conn:
        task_sql.set_state(conn, first.task_instance, State.FAILED, error="timed out waiting")
    second = reg(engine, cfg, try_number=2)
    assert second.created and second.state == State.SMART_PENDING and second.task_instance != first.task_instance
    third = reg(engine, cfg, try_number=3)  # try 2 still waits: it is ended, not left polling
    with engine.connect() as conn:
        old = task_sql.get_task(conn, *second.task_instance)
    assert old.state == State.SKIPPED and "superseded by try 3" in old.error
    assert external_states(SqlExternalTryStore(engine), [Asked(KEY, 1), Asked(KEY, 3), Asked(KEY, 4)]) == [
        {
            **_key(KEY),
            "try_number": 1,
            "state": "superseded",
            "error": None,
            "reason": "superseded",
            "hashcode": third.hashcode,
        },
        {
            **_key(KEY),
            "try_number": 3,
            "state": State.SMART_PENDING,
            "error": None,
            "reason": None,
            "hashcode": third.hashcode,
        },
        {**_key(KEY), "try_number": 4, "state": "unknown", "error": None, "reason": "unknown", "hashcode": None},
    ]


def test_an_older_try_than_the_registered_one_is_refused(cfg, engine) -> None:
    reg(engine, cfg, try_number=2)
    with pytest.raises(ExternalConflict, match="older than the registered try 2"):
        reg(engine, cfg, try_number=1)


def test_mapped_tasks_are_separate_task_instances(cfg, engine) -> None:
    a = reg(engine, cfg, ExternalKey("etl", "wait", "r1", 0))
    b = reg(engine, cfg, ExternalKey("etl", "wait", "r1", 1))
    assert (a.task_instance[1], b.task_instance[1]) == ("wait[0]", "wait[1]")
    assert a.hashcode == b.hashcode  # the same wait: one check for both


@pytest.mark.parametrize(
    "change, message",
    [
        ({"class_name": "os.system"}, "not in \\[smart_sensor\\] sensors_enabled"),
        ({"persist": {"partition_names": ["no-slash"]}}, "must look like"),
        ({"persist": {"partition_names": ["db.t/ds=1"], "evil": 1}}, "has no persist field"),
        ({"exec_values": {"poke_interval": -5}}, "poke_interval"),
        ({"exec_values": {"on_failure_callback": "x"}}, "has no exec field"),
        ({"key": ExternalKey("etl", "t\x00", "r")}, "task_id"),
        ({"key": ExternalKey("etl", "t", "r", -2)}, "map_index"),
        ({"try_number": -1}, "try_number"),
    ],
)
def test_bad_registrations_are_refused_with_the_reason(cfg, engine, change: dict, message: str) -> None:
    args = {
        "key": KEY,
        "try_number": 1,
        "class_name": "NamedHivePartitionSensor",
        "persist": NAMED,
        "exec_values": {},
        **change,
    }
    with pytest.raises(SensorDefinitionError, match=message):
        register_external(
            SqlExternalTryStore(engine),
            cfg,
            args["key"],
            args["try_number"],
            args["class_name"],
            args["persist"],
            args["exec_values"],
        )
    with engine.connect() as conn:
        assert task_sql.list_tasks(conn) == []


def many(keys: list[ExternalKey], try_number: int = 1) -> list[ExternalTry]:
    return [
        ExternalTry(k, try_number, "NamedHivePartitionSensor", NAMED, {"poke_interval": 30, "timeout": 600})
        for k in keys
    ]


def test_new_tries_register_together_in_four_statements(cfg, engine) -> None:
    """``register_externals``: the first registrations of 300 keys share one transaction (4 statements: the keys
    mapped, the task instances, the NOTIFY, the mappings; SQLite sends no NOTIFY), and each answer is what
    ``register_external`` would give."""
    keys = [ExternalKey("etl", f"t{i}", "r1") for i in range(300)]
    before = engine.statement_counter.count
    done = register_externals(SqlExternalTryStore(engine), cfg, many(keys))
    assert engine.statement_counter.count - before == (4 if engine.dialect.name == "postgresql" else 3)
    assert all(isinstance(d, ExternalRegistered) and d.created for d in done)
    one_by_one = [reg(engine, cfg, k) for k in keys[:3]]
    assert [(d.task_instance, d.hashcode, d.created) for d in one_by_one] == [
        (d.task_instance, d.hashcode, False) for d in done[:3]
    ]
    with engine.connect() as conn:
        assert len(task_sql.list_tasks(conn)) == 300


def test_registering_together_meets_registrations_of_the_same_keys(cfg, engine) -> None:
    """Mapped keys, a key named twice and a concurrent registration of the same keys: each key has one task
    instance for its try, and every answer says which (one of the concurrent ones created it)."""
    keys = [ExternalKey("etl", f"t{i}", "r1") for i in range(40)]
    reg(engine, cfg, keys[0])
    reg(engine, cfg, keys[1], try_number=2)
    tries = many(keys) + many(keys[2:3])
    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(lambda _: register_externals(SqlExternalTryStore(engine), cfg, tries), range(2))
    for answers in (first, second):
        assert isinstance(answers[1], ExternalConflict)  # try 1 is older than the registered try 2
        assert all(isinstance(a, ExternalRegistered) for i, a in enumerate(answers) if i != 1)
    created = [[a.created for a in answers if isinstance(a, ExternalRegistered)] for answers in (first, second)]
    assert [x or y for x, y in zip(*created, strict=True)] == [False] + [True] * 38 + [False]
    assert not any(x and y for x, y in zip(*created, strict=True))
    with engine.connect() as conn:
        assert len(task_sql.list_tasks(conn)) == 40  # one a key: key 0 (try 1), key 1 (try 2), 38 new ones
    for answers in (first, second):
        ti = {a.key: a.task_instance for a in answers if isinstance(a, ExternalRegistered)}
        assert ti == {a.key: a.task_instance for a in first if isinstance(a, ExternalRegistered)}


def test_a_round_serves_external_tasks_with_one_check_for_identical_waits(cfg, engine) -> None:
    tries = [reg(engine, cfg, ExternalKey("etl", f"t{i}", "r1")) for i in range(3)]
    catalog = DictCatalog()
    catalog.land("db.events/ds=2026-11-22")
    worker = RangeRounds(SqlRoundStore(engine), cfg, 0, cfg.shard_code_upper_limit)
    result = run_round([worker], lambda: catalog)
    assert result.distinct_checks == 1 and result.marked == {State.SUCCESS: 3}
    states = external_states(
        SqlExternalTryStore(engine), [Asked(ExternalKey("etl", f"t{i}", "r1"), 1) for i in range(3)]
    )
    assert [s["state"] for s in states] == [State.SUCCESS] * 3 and len({t.hashcode for t in tries}) == 1


# -- over HTTP -----------------------------------------------------------------------------------------


def _key(key: ExternalKey) -> dict[str, Any]:
    return {"dag_id": key.dag_id, "task_id": key.task_id, "run_id": key.run_id, "map_index": key.map_index}


def api(cfg: Any, engine: Any) -> TestClient:
    return TestClient(
        create_app(cfg, engine, TOKEN), raise_server_exceptions=False, headers={"Authorization": f"Bearer {TOKEN}"}
    )


def body(try_number: int = 1, **sensor: Any) -> dict[str, Any]:
    return {
        "key": {**_key(KEY), "try_number": try_number},
        "sensor": {"class": "NamedHivePartitionSensor", "persist": NAMED, "exec": {"timeout": 600}, **sensor},
        "logical_date": datetime(2026, 11, 22, tzinfo=timezone.utc).isoformat(),
    }


def test_register_and_read_states_over_http(cfg, engine) -> None:
    client = api(cfg, engine)
    r = client.post("/api/v1/tasks", json=body())
    assert r.status_code == 200 and r.json()["created"] and r.json()["state"] == State.SMART_PENDING
    assert client.post("/api/v1/tasks", json=body()).json()["created"] is False
    states = client.post("/api/v1/tasks/states", json={"keys": [{**_key(KEY), "try_number": 1}]}).json()["states"]
    assert [s["state"] for s in states] == [State.SMART_PENDING]
    assert client.post("/api/v1/tasks", json=body(try_number=2)).json()["created"]
    assert client.post("/api/v1/tasks", json=body(try_number=1)).status_code == 409


def test_many_tries_register_in_one_request_each_answered_as_one_registration(cfg, engine) -> None:
    """``POST /tasks/batch``: each try registered as ``POST /tasks`` registers it, answered in order; a try that
    ``POST /tasks`` would refuse (an older try: 409; a check it cannot take: 422) is answered with that status and
    reason and never fails the others; asking again registers nothing twice."""
    client = api(cfg, engine)
    assert client.post("/api/v1/tasks", json=body(try_number=2)).status_code == 200
    others = [{**body(), "key": {**_key(ExternalKey("etl", f"t{i}", "r1")), "try_number": 1}} for i in range(3)]
    unservable = {**others[0], "key": {**others[0]["key"], "task_id": "bad"}}
    unservable["sensor"] = {**unservable["sensor"], "persist": {"partition_names": ["no_table_here"]}}
    tries = [others[0], body(try_number=1), unservable, *others[1:]]
    first = client.post("/api/v1/tasks/batch", json={"tries": tries})
    assert first.status_code == 200, first.text
    answers = first.json()["tries"]
    assert [a.get("status", 200) for a in answers] == [200, 409, 422, 200, 200]
    assert [a["key"]["task_id"] for a in answers] == ["t0", KEY.task_id, "bad", "t1", "t2"]
    assert "older than the registered try 2" in answers[1]["detail"] and answers[2]["detail"]
    registered = [a for a in answers if "status" not in a]
    assert all(a["created"] and a["state"] == State.SMART_PENDING and a["reason"] is None for a in registered)
    again = client.post("/api/v1/tasks/batch", json={"tries": tries}).json()["tries"]
    assert [a.get("created") for a in again] == [False, None, None, False, False]
    assert [a["hashcode"] for a in again if "hashcode" in a] == [a["hashcode"] for a in registered]
    with engine.connect() as conn:
        assert len(task_sql.list_tasks(conn)) == 4  # try 2 of KEY and t0-t2
    too_many = client.post("/api/v1/tasks/batch", json={"tries": [others[0]] * 1001})
    assert too_many.status_code == 422  # MAX_BATCH, by the schema


def test_the_answers_are_the_same_bytes_as_before_the_wire_module(cfg, engine) -> None:
    """Old providers read new services: each answer keeps its fields, their order and its JSON formatting (``POST
    /tasks`` as FastAPI writes it, compact and not ASCII-escaped; the batch and states answers as ``json.dumps``
    does), now that they are built through ``smartsensor.wire`` and ``POST /tasks`` has a response model."""
    client = api(cfg, engine)
    key = {"dag_id": "etl", "task_id": "wäit", "run_id": "r1", "map_index": -1, "try_number": 1}
    one = client.post("/api/v1/tasks", json={**body(), "key": key})
    answer = one.json()
    assert one.content == json.dumps(answer, ensure_ascii=False, separators=(",", ":")).encode()
    assert list(answer) == ["key", "state", "error", "reason", "hashcode", "created", "task_instance"]
    assert answer["key"] == {**key, "instance": ""} and list(answer["key"]) == [*key, "instance"]
    assert list(answer["task_instance"]) == ["dag_id", "task_id", "execution_date"]
    older = {**body(), "key": {**key, "try_number": 0}}
    batch = client.post("/api/v1/tasks/batch", json={"tries": [{**body(), "key": key}, older]})
    assert batch.content == json.dumps(batch.json()).encode()
    assert batch.json()["tries"][0] == {**answer, "created": False}
    assert list(batch.json()["tries"][1]) == ["key", "status", "detail"]
    states = client.post("/api/v1/tasks/states", json={"keys": [{**key, "hashcode": answer["hashcode"]}]})
    assert states.content == json.dumps(states.json()).encode()
    assert states.json()["states"] == [
        {**key, "state": State.SMART_PENDING, "error": None, "reason": None, "hashcode": answer["hashcode"]}
    ]
    assert list(states.json()["states"][0]) == [*key, "state", "error", "reason", "hashcode"]


def test_an_ended_try_says_why_as_data_next_to_its_text(cfg, engine) -> None:
    """``reason`` beside ``error``: a timeout is ``timeout`` whatever else its text says, a check error that only
    reads like one is ``error`` (issue 42, "a timeout that travels as data"); register answers carry it too."""
    ended = {
        "timeout": (State.FAILED, timeout_error("metastore unreachable"), "timeout"),
        "soft": (State.SKIPPED, timeout_error(None), "timeout"),
        "error": (State.FAILED, "timed out waiting for the lock", "error"),
        "landed": (State.SUCCESS, None, "landed"),
        "by_hand": (State.SKIPPED, None, "skipped"),
    }
    client = api(cfg, engine)
    keys = {name: ExternalKey("etl", name, "r1") for name in ended}
    for name, (state, error, _) in ended.items():
        done = reg(engine, cfg, keys[name])
        with engine.begin() as conn:
            task_sql.set_state(conn, done.task_instance, state, from_states=list(State.SMART_WAITING), error=error)
    asked = [{**_key(k), "try_number": 1} for k in keys.values()]
    states = client.post("/api/v1/tasks/states", json={"keys": asked}).json()["states"]
    assert [(s["state"], s["error"], s["reason"]) for s in states] == list(ended.values())
    same_wait = body(exec={"poke_interval": 30, "timeout": 600})  # as reg() registered it
    again = client.post("/api/v1/tasks", json={**same_wait, "key": asked[0]}).json()
    assert (again["created"], again["state"], again["reason"]) == (False, State.FAILED, "timeout")
    waiting = client.post("/api/v1/tasks", json=body()).json()
    assert (waiting["state"], waiting["reason"]) == (State.SMART_PENDING, None)


def test_the_openapi_document_states_the_reason(cfg, engine) -> None:
    schemas = api(cfg, engine).get("/api/v1/openapi.json").json()["components"]["schemas"]
    for model in ("TryState", "Registered"):
        reason = schemas[model]["properties"]["reason"]
        assert {"enum": list(REASONS), "type": "string"} in reason["anyOf"], reason
        assert "timeout" in reason["description"]
    assert schemas["StatesAnswer"]["properties"]["states"]["items"] == {"$ref": "#/components/schemas/TryState"}


def test_one_states_request_is_one_statement_for_ten_thousand_keys(cfg, engine) -> None:
    for i in range(5):
        reg(engine, cfg, ExternalKey("etl", f"t{i}", "r1"))
    keys = [
        {"dag_id": "etl", "task_id": f"t{i}", "run_id": "r1", "map_index": -1, "try_number": 1} for i in range(10_000)
    ]
    statements = engine.statement_counter.count
    r = api(cfg, engine).post("/api/v1/tasks/states", json={"keys": keys})
    assert r.status_code == 200
    states = [s["state"] for s in r.json()["states"]]
    assert states == [State.SMART_PENDING] * 5 + ["unknown"] * 9995
    assert engine.statement_counter.count - statements == 1


@pytest.mark.parametrize(
    "payload, status",
    [
        ({"key": {"dag_id": "d"}, "sensor": {"class": "X"}}, 422),  # key fields missing
        ({**body(), "extra": 1}, 422),
        ({**body(), "sensor": {"class": "NamedHivePartitionSensor", "persist": "not an object"}}, 422),
        ({**body(), "key": {**_key(KEY), "try_number": "1; DROP TABLE task_instance"}}, 422),
        ({**body(), "key": {**_key(KEY), "dag_id": "x" * 251, "try_number": 1}}, 422),
        (body(**{"class": "EvilSensor"}), 422),  # type: ignore[arg-type]  # "class" is a keyword
        (body(persist={"partition_names": ["db.t/ds=' OR '1'='1"]}), 200),  # a value, stored and matched literally
        ("not json at all", 422),
        ([], 422),
    ],
)
def test_hostile_bodies_are_a_4xx_with_a_reason(cfg, engine, payload: Any, status: int) -> None:
    client = api(cfg, engine)
    r = (
        client.post("/api/v1/tasks", json=payload)
        if not isinstance(payload, str)
        else client.post("/api/v1/tasks", content=payload, headers={"content-type": "application/json"})
    )
    assert r.status_code == status, r.text
    if status != 200:
        assert set(r.json()) == {"error"} and r.json()["error"]


def test_too_many_keys_in_one_request_is_refused(cfg, engine) -> None:
    keys = [{"dag_id": "d", "task_id": "t", "run_id": "r", "try_number": 1}] * 10_001
    r = api(cfg, engine).post("/api/v1/tasks/states", json={"keys": keys})
    assert r.status_code == 422 and "keys" in r.json()["error"]


def test_task_endpoints_need_the_token(cfg, engine) -> None:
    client = TestClient(create_app(cfg, engine, TOKEN), raise_server_exceptions=False)
    assert client.post("/api/v1/tasks", json=body()).status_code == 401
    assert client.post("/api/v1/tasks/states", json={"keys": []}).status_code == 401


def test_a_class_whose_module_cannot_be_imported_here_is_a_transient_503(tmp_path, db_url) -> None:
    from tests.support.common import new_db

    cfg, engine = new_db(
        tmp_path / "home",
        db_url,
        smart_sensor__sensor_modules="no_such_module_here",
        smart_sensor__sensors_enabled="NamedHivePartitionSensor, MissingSensor",
    )
    try:
        r = api(cfg, engine).post("/api/v1/tasks", json=body(**{"class": "MissingSensor"}))  # type: ignore[arg-type]  # "class" is a keyword
        assert r.status_code == 503 and "no_such_module_here" in r.json()["error"]
    finally:
        engine.dispose()


def test_concurrent_tries_of_one_key_end_on_the_newest_without_errors(cfg, engine) -> None:
    """10 tries × 20 keys sent together: each either registers or is a stale try (409), never a database error;
    every key ends mapped to its newest try, and exactly that try's task instance still waits."""
    keys = [ExternalKey("race", f"t{i}", "run") for i in range(20)]
    outcomes: list[str] = []

    def one(key: ExternalKey, try_number: int) -> None:
        try:
            reg(engine, cfg, key=key, try_number=try_number)
            outcomes.append("ok")
        except ExternalConflict:
            outcomes.append("stale")

    with ThreadPoolExecutor(max_workers=16) as pool:
        for future in [pool.submit(one, key, t) for key in keys for t in range(1, 11)]:
            future.result()  # re-raises anything that is neither a registration nor a 409
    assert len(outcomes) == 200 and "ok" in outcomes
    assert [s["state"] for s in external_states(SqlExternalTryStore(engine), [Asked(k, 10) for k in keys])] == [
        State.SMART_PENDING
    ] * 20
    with engine.connect() as conn:
        waiting = [r for r in task_sql.list_tasks(conn) if r.state == State.SMART_PENDING]
    assert sorted(r.task_id for r in waiting) == sorted(k.task_id for k in keys)


def test_ended_answers_are_kept_and_waiting_or_unknown_ones_are_read_again(cfg, engine) -> None:
    from smartsensor.external.states import TerminalAnswers

    done = reg(engine, cfg, ExternalKey("etl", "done", "r1"))
    reg(engine, cfg, ExternalKey("etl", "w", "r1"))
    with engine.begin() as conn:
        task_sql.set_state(conn, done.task_instance, State.SUCCESS)
    cache = TerminalAnswers(ttl=3600)
    asked = [
        Asked(ExternalKey("etl", "done", "r1"), 1),
        Asked(ExternalKey("etl", "w", "r1"), 1),
        Asked(ExternalKey("etl", "x", "r1"), 1),
    ]
    first = external_states(SqlExternalTryStore(engine), asked, cache)
    before = engine.statement_counter.count
    assert (
        external_states(SqlExternalTryStore(engine), asked, cache) == first and cache.hits == 1
    )  # the ended one came from memory
    assert engine.statement_counter.count - before == 1  # the other two were read again
    before = engine.statement_counter.count
    assert (
        external_states(SqlExternalTryStore(engine), asked[:1], cache) == first[:1]
        and engine.statement_counter.count == before
    )
    assert [a["state"] for a in first] == [State.SUCCESS, State.SMART_PENDING, "unknown"]
    with engine.begin() as conn:  # a user restarts the wait by hand: seen once the kept answer expires
        task_sql.set_state(conn, done.task_instance, State.SMART_PENDING)
    assert (
        external_states(SqlExternalTryStore(engine), asked[:1], TerminalAnswers(ttl=0))[0]["state"]
        == State.SMART_PENDING
    )


OTHER = {"partition_names": ["db.events/ds=2026-11-23"]}


def test_the_same_try_registered_with_another_check_never_gets_the_old_checks_verdict(cfg, engine) -> None:
    """A run created again, a reset Airflow or a second deployment registers the same key and try for another wait:
    it gets a task instance of its own, waiting, never the verdict of the check registered first."""
    first = reg(engine, cfg)
    with engine.begin() as conn:
        task_sql.set_state(conn, first.task_instance, State.SUCCESS)  # the first check's partition landed
    other = reg(engine, cfg, persist=OTHER)
    assert other.created and other.state == State.SMART_PENDING and other.hashcode != first.hashcode
    assert other.task_instance != first.task_instance
    assert reg(engine, cfg, persist=OTHER).task_instance == other.task_instance  # the same wait again: idempotent
    answers = external_states(
        SqlExternalTryStore(engine), [Asked(KEY, 1, first.hashcode), Asked(KEY, 1, other.hashcode), Asked(KEY, 1)]
    )
    assert [(a["state"], a["reason"]) for a in answers] == [
        ("superseded", "superseded"),  # asked by its own check: never the other check's state
        (State.SMART_PENDING, None),
        (State.SMART_PENDING, None),  # asked without a hashcode: the key's current wait
    ]
    assert "registered again with another check" in answers[0]["error"]
    with engine.connect() as conn:
        assert task_sql.get_task(conn, *first.task_instance).state == State.SUCCESS  # an ended one is left as it is


def test_a_waiting_try_superseded_by_another_check_or_other_exec_fields_is_ended(cfg, engine) -> None:
    first = reg(engine, cfg)
    second = reg(engine, cfg, timeout=60)  # the same partition, another timeout: another wait
    assert second.created and second.hashcode == first.hashcode and second.task_instance != first.task_instance
    third = reg(engine, cfg, persist=OTHER)
    assert third.created
    with engine.connect() as conn:
        for ended in (first, second):
            old = task_sql.get_task(conn, *ended.task_instance)
            assert old.state == State.SKIPPED and old.error.startswith("superseded by another check"), old
        assert [t.state for t in task_sql.list_tasks(conn)].count(State.SMART_PENDING) == 1


def test_two_airflow_deployments_under_one_key_each_have_their_own_task_instance(cfg, engine) -> None:
    """``scheduled__<date>`` run ids are the same in two deployments: their instance names keep them apart."""
    a, b = KEY._replace(instance="prod-a"), KEY._replace(instance="prod-b")
    on_a, on_b = reg(engine, cfg, a), reg(engine, cfg, b, persist=OTHER)
    assert on_a.created and on_b.created and on_a.task_instance != on_b.task_instance
    with engine.begin() as conn:
        task_sql.set_state(conn, on_a.task_instance, State.SUCCESS)
    answers = external_states(
        SqlExternalTryStore(engine), [Asked(a, 1, on_a.hashcode), Asked(b, 1, on_b.hashcode), Asked(KEY, 1)]
    )
    assert [x["state"] for x in answers] == [State.SUCCESS, State.SMART_PENDING, "unknown"]
    assert not reg(engine, cfg, a).created and not reg(engine, cfg, b, persist=OTHER).created


def test_a_kept_answer_is_not_given_to_another_check_of_the_try_over_http(cfg, engine) -> None:
    """The serve process's cache of ended answers: asked by hashcode, an answer read for one check is never given for
    another; a registration that starts a new task instance for the try forgets it."""
    client = api(cfg, engine)
    first = client.post("/api/v1/tasks", json=body()).json()
    with engine.begin() as conn:
        ti = first["task_instance"]
        key = TaskKey(ti["dag_id"], ti["task_id"], as_utc(datetime.fromisoformat(ti["execution_date"])))
        task_sql.set_state(conn, key, State.SUCCESS)
    asked = {**_key(KEY), "try_number": 1}

    def states(**extra: Any) -> list[str]:
        answer = client.post("/api/v1/tasks/states", json={"keys": [{**asked, **extra}]})
        assert answer.status_code == 200, answer.text
        return [s["state"] for s in answer.json()["states"]]

    assert states() == states(hashcode=first["hashcode"]) == ["success"]  # both now kept by the process
    other = client.post("/api/v1/tasks", json=body(persist=OTHER)).json()
    assert other["created"] and other["state"] == State.SMART_PENDING
    assert states() == states(hashcode=other["hashcode"]) == [State.SMART_PENDING]
    assert states(hashcode=first["hashcode"]) == ["superseded"]
    named = client.post("/api/v1/tasks", json={**body(), "key": {**asked, "instance": "prod-a"}})
    assert named.status_code == 200 and named.json()["created"] and named.json()["key"]["instance"] == "prod-a"
    assert states(instance="prod-a") == [State.SMART_PENDING]
    bad = client.post("/api/v1/tasks", json={**body(), "key": {**asked, "instance": "a b"}})
    assert bad.status_code == 422
