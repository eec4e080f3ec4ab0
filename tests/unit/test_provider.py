"""The Airflow provider's Airflow-free parts: the Hive filter parser, the connection → endpoint rule, and the
rule that the provider never imports smartsensor (Airflow 2.10's environment cannot hold it)."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from smartsensor_airflow.client import ApiError, Endpoint, endpoint_from_connection
from smartsensor_airflow.hive_filter import UnsupportedPartitionFilter, parse_partition_filter
from tests.support.common import ROOT

PROVIDER = ROOT / "providers" / "airflow" / "smartsensor_airflow"


@pytest.mark.parametrize(
    "text, spec",
    [
        ("ds='2026-11-22'", {"ds": "2026-11-22"}),
        ("ds = '2026-11-22' AND hr = '00'", {"ds": "2026-11-22", "hr": "00"}),
        ('DS="2026-11-22" and `Hr`=7', {"ds": "2026-11-22", "hr": "7"}),
        ("note='salt and pepper' AND ds='x'", {"note": "salt and pepper", "ds": "x"}),
        ("ds='a/b=c%d'", {"ds": "a/b=c%d"}),
        ("ds='é'", {"ds": "é"}),
        ("", {}),
        ("ds='1' AND ds='1'", {"ds": "1"}),
    ],
)
def test_equalities_joined_by_and_become_a_spec(text: str, spec: dict[str, str]) -> None:
    assert parse_partition_filter(text) == spec


@pytest.mark.parametrize(
    "text, why",
    [
        ("ds>'2026-11-22'", "not a `column = 'value'` equality"),
        ("ds='1' OR ds='2'", "not a `column = 'value'` equality"),
        ("ds LIKE '2026%'", "not a `column = 'value'` equality"),
        ("(ds='1')", "not a `column = 'value'` equality"),
        ("ds='1' AND", "not a `column = 'value'` equality"),
        ("ds='unterminated", "unterminated quote"),
        ("ds='1' AND ds='2'", "given two values"),
        ("ds=upper('x')", "not a `column = 'value'` equality"),
        ("ds='1'; DROP TABLE t", "not a `column = 'value'` equality"),
    ],
)
def test_anything_else_is_refused_with_the_reason(text: str, why: str) -> None:
    with pytest.raises(UnsupportedPartitionFilter, match="partition filter") as info:
        parse_partition_filter(text)
    assert why in str(info.value)


def test_a_filter_must_be_text() -> None:
    with pytest.raises(UnsupportedPartitionFilter, match="filter string"):
        parse_partition_filter({"ds": "1"})  # a dict on purpose


def conn(**fields: object) -> SimpleNamespace:
    return SimpleNamespace(
        **{"host": None, "port": None, "schema": None, "conn_type": None, "password": None, **fields}
    )


@pytest.mark.parametrize(
    "fields, endpoint",
    [
        ({"host": "http://svc:8794/", "password": "t"}, Endpoint("http://svc:8794", "t")),
        ({"host": "svc", "port": 8794, "conn_type": "http"}, Endpoint("http://svc:8794", None)),
        ({"host": "svc", "conn_type": "https", "password": "t"}, Endpoint("https://svc", "t")),
        ({"host": "svc", "port": 1, "conn_type": "generic", "schema": "https"}, Endpoint("https://svc:1", None)),
    ],
)
def test_a_connection_names_the_service(fields: dict[str, object], endpoint: Endpoint) -> None:
    assert endpoint_from_connection(conn(**fields)) == endpoint


def test_a_connection_without_host_says_how_to_set_it() -> None:
    with pytest.raises(ApiError, match="AIRFLOW_CONN_SMARTSENSOR_DEFAULT"):
        endpoint_from_connection(conn(), "smartsensor_default")


def test_the_token_goes_in_a_bearer_header_only_when_set() -> None:
    assert Endpoint("http://x", "s").headers() == {"Authorization": "Bearer s"}
    assert Endpoint("http://x").headers() == {}


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_the_provider_never_imports_smartsensor_itself() -> None:
    files = sorted(PROVIDER.rglob("*.py"))
    assert len(files) >= 6
    for path in files:
        bad = {m for m in imported_modules(path) if m == "smartsensor" or m.startswith("smartsensor.")}
        assert not bad, f"{path.name} imports {bad}: Airflow 2.10's environment cannot install smartsensor"


def test_only_sensors_triggers_and_compat_import_airflow() -> None:
    """The parser, client and poller are plain Python + httpx, so they are tested here without Airflow. The parking
    attendant, a program, imports ``airflow`` itself, first: Airflow's start imports the local settings, whose
    policy imports ``_compat``, which must not be half-imported then."""
    for path in PROVIDER.rglob("*.py"):
        imported = imported_modules(path)
        uses_airflow = any(m == "airflow" or m.startswith("airflow.") for m in imported)
        if path.name == "attendant.py":
            assert {m for m in imported if m.split(".")[0] == "airflow"} == {"airflow"}, path.name
            continue
        assert uses_airflow == (path.name in {"_compat.py"}), path.name


def test_the_provider_knows_a_timeout_by_the_services_own_words() -> None:
    """From a service before 0.3.0 (an answer with no ``reason``): a ``failed`` try that reached its timeout ends a
    drop-in for good (AirflowSensorTimeout); the provider cannot import the service, so it matches the start of the
    error the service writes, pinned here to the source."""
    from smartsensor.domain.timing import timeout_error
    from smartsensor_airflow.client import is_timeout

    assert is_timeout({"state": "failed", "error": timeout_error(None)})
    assert is_timeout({"state": "failed", "error": timeout_error("metastore unreachable")})
    assert not is_timeout({"state": "failed", "error": "attr_dict is missing"})
    assert not is_timeout({"state": "skipped", "error": timeout_error(None)})
    assert not is_timeout({"state": "failed", "error": None})


def test_the_provider_knows_a_timeout_by_its_reason() -> None:
    """From a service that says why a try ended (``reason``), the reason decides, whatever the text says; the
    provider's name for it is the service's own (issue 42, "a timeout that travels as data")."""
    from smartsensor.external.states import REASONS, end_reason
    from smartsensor_airflow.client import TIMEOUT, is_timeout

    assert TIMEOUT in REASONS and end_reason("failed", "timed out waiting") == TIMEOUT
    assert end_reason("failed", "timed out waiting for the lock") == "error"  # a check error that reads alike
    assert is_timeout({"state": "failed", "error": "the metastore went away", "reason": "timeout"})
    assert not is_timeout({"state": "failed", "error": "timed out waiting for the lock", "reason": "error"})
    assert not is_timeout({"state": "skipped", "error": "timed out waiting", "reason": "timeout"})  # soft_fail: a skip
    assert not is_timeout({"state": "superseded", "error": None, "reason": "superseded"})


def test_an_answer_carries_its_reason_to_the_task_or_none_from_an_older_service() -> None:
    from smartsensor_airflow.client import is_timeout, outcome
    from smartsensor_airflow.wire import TryState

    key = {"dag_id": "d", "task_id": "t", "run_id": "r", "map_index": -1, "try_number": 1}
    new = TryState.from_json({**key, "state": "failed", "error": "x", "reason": "timeout", "hashcode": 1})
    old = TryState.from_json({**key, "state": "failed", "error": "timed out waiting", "hashcode": 1})
    assert outcome(new) == {"state": "failed", "error": "x", "reason": "timeout"}
    assert outcome(old) == {"state": "failed", "error": "timed out waiting", "reason": None}
    assert is_timeout(outcome(new)) and is_timeout(outcome(old))  # the event a task acts on
    assert is_timeout(new) and is_timeout(old)  # the answer itself


def test_the_schema_names_the_reasons_the_service_gives() -> None:
    from typing import get_args

    from smartsensor.api.tasks import Reason
    from smartsensor.external.states import REASONS

    assert get_args(Reason) == REASONS
