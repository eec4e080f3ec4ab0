"""The smartsensor HTTP API as the sensors use it: where it is, and registering one try of a task.

No Airflow import here: ``endpoint_from_connection`` takes any object with Airflow Connection's attributes. What
crosses HTTP (the key, the registration, the answers) is ``smartsensor_airflow.wire``'s.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import re
import time
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Coroutine, Mapping, TypeVar, Union

import httpx

from smartsensor_airflow.off_loop_log import as_sync_caller, log_off_loop
from smartsensor_airflow.wire import (
    INSTANCE_MAX_LENGTH,
    INSTANCE_PATTERN,
    Registered,
    Registration,
    TryKey,
    TryState,
    WireError,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
Answer = Union[Registered, TryState]  # the service's answer for one try: to a registration, or to a states request

API = "/api/v1"
# States after which the service never changes a try again; everything else is still waiting.
TERMINAL = frozenset({"success", "failed", "skipped", "upstream_failed", "removed", "superseded", "unknown"})
TRANSIENT_STATUS = frozenset({502, 503, 504})
# Why a try ended, as the service says it in an answer's ``reason`` (smartsensor.external.states.REASONS). A
# timeout ends a sensor for good, as AirflowSensorTimeout does.
TIMEOUT = "timeout"
# Services before 0.3.0 send no ``reason``: there a timeout is known by the start of its ``error`` text
# (smartsensor.domain.timing.timeout_error; a test pins the two together).
TIMEOUT_ERROR_PREFIX = "timed out waiting"
# Seconds of transient failures a registration rides out by default (back-off 1, 2, 4, 8 s...): a restarting
# service or a failover behind the balancer. A sensor with a safety valve asks for its grace period instead.
REGISTER_PATIENCE = 15.0
MAX_BACKOFF = 15.0
MAX_WAIT = 30.0  # the most a service holds a request (its own limit: a longer ``wait`` is refused)


@dataclass(frozen=True)
class Endpoint:
    """Base URL of a `smartsensor serve` (or its load balancer), its bearer token, if any, and the name of this
    Airflow deployment among those the service serves ("" for none: see ``endpoint_from_connection``)."""

    base_url: str
    token: str | None = None
    instance: str = ""

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


class ApiError(Exception):
    """The service refused or could not answer. ``transient``: asking again later may work."""

    def __init__(self, message: str, status: int | None = None, transient: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.transient = transient


INSTANCE = re.compile(INSTANCE_PATTERN)  # what the service takes as an instance name


def connection_instance(conn: Any, conn_id: str) -> str:
    """The connection's ``instance`` extra: this Airflow deployment's name, which the service keeps in the key of
    each of its tasks. Two deployments that share a service must each set their own (their ``scheduled__<date>``
    run ids are the same); "" when it sets none."""
    extra = getattr(conn, "extra_dejson", None)
    if not isinstance(extra, dict):
        try:
            extra = json.loads(getattr(conn, "extra", None) or "{}")
        except ValueError:
            extra = {}
    instance = extra.get("instance", "") if isinstance(extra, dict) else ""
    if not isinstance(instance, str) or len(instance) > INSTANCE_MAX_LENGTH or not INSTANCE.fullmatch(instance):
        raise ApiError(
            f"Airflow connection {conn_id!r} has an invalid instance {instance!r}: "
            f"up to {INSTANCE_MAX_LENGTH} letters, digits, '.', '_' or '-'"
        )
    return instance


def endpoint_from_connection(conn: Any, conn_id: str = "smartsensor_default") -> Endpoint:
    """An Airflow connection as an endpoint: ``host`` is a URL (``http://svc:8794``) or a host name with
    ``port`` and ``schema``/conn type ``http``/``https``; ``password`` is the token; the extra ``instance`` names
    this Airflow deployment (``connection_instance``)."""
    host = (getattr(conn, "host", None) or "").strip()
    if not host:
        raise ApiError(
            f"Airflow connection {conn_id!r} has no host: set it to the URL of `smartsensor serve`, "
            f"e.g. AIRFLOW_CONN_{conn_id.upper()}='http://:TOKEN@smartsensor.example:8794'"
        )
    if "://" in host:
        base = host.rstrip("/")
    else:
        conn_type = (getattr(conn, "conn_type", None) or "").lower()
        scheme = conn_type if conn_type in ("http", "https") else (getattr(conn, "schema", None) or "http")
        port = getattr(conn, "port", None)
        base = f"{scheme}://{host}" + (f":{port}" if port else "")
    return Endpoint(base, getattr(conn, "password", None) or None, connection_instance(conn, conn_id))


def error_message(response: httpx.Response) -> str:
    """The service's one-line error, or the start of whatever else answered (a proxy's page)."""
    try:
        body = response.json()
        if isinstance(body, dict) and "error" in body:
            return str(body["error"])
    except ValueError:
        pass
    return f"HTTP {response.status_code}: {response.text[:200]}"


def run_blocking(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to its end from synchronous code (a task's ``execute``): on a loop of its own, in a thread
    of its own when this thread already runs one. One implementation of each request serves both sides."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(as_sync_caller(coroutine))
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, as_sync_caller(coroutine)).result()


def registration_body(registration: Registration, instance: str = "") -> dict[str, Any]:
    """The body of ``POST /tasks`` for one try, in the deployment ``instance`` names (its connection's) if any."""
    if instance:
        registration = replace(registration, key=registration.key.in_instance(instance))
    return registration.to_json()


class _Retries:
    """The retry rule of a registration: transient failures (connection errors, 502/503/504) are retried with
    back-off (1, 2, 4, 8… s, at most MAX_BACKOFF) for ``patience`` seconds; anything else is final. The sync and
    async loops below share it."""

    def __init__(self, endpoint: Endpoint, patience: float) -> None:
        self.endpoint = endpoint
        self.patience = patience
        self.give_up = time.monotonic() + patience
        self.attempt = 0
        self.last: ApiError | None = None

    def next_delay(self) -> float | None:
        """Seconds to wait before the next attempt (0 for the first), or None when patience ran out."""
        if self.attempt and time.monotonic() >= self.give_up:
            return None
        delay = (
            0.0 if not self.attempt else min(2.0 ** (self.attempt - 1), MAX_BACKOFF, self.give_up - time.monotonic())
        )
        self.attempt += 1
        return max(0.0, delay)

    def answer(self, response: httpx.Response | None, error: Exception | None = None) -> Registered | None:
        """The service's answer, None to try again (the failure logged), or ApiError when it is final."""
        if response is None:
            self.last = ApiError(f"smartsensor at {self.endpoint.base_url} unreachable: {error}", transient=True)
        elif response.status_code == 200:
            try:
                return Registered.from_json(response.json())
            except ValueError as exc:  # not JSON (a proxy's page), or not the service's answer (WireError)
                why = exc if isinstance(exc, WireError) else "not JSON"
            self.last = ApiError(
                f"smartsensor answered the registration with a body that is not its answer ({why}): "
                f"{response.text[:200]}",
                200,
                transient=True,
            )
        else:
            self.last = ApiError(
                f"smartsensor refused the registration: {error_message(response)}",
                response.status_code,
                response.status_code in TRANSIENT_STATUS,
            )
            if not self.last.transient:
                raise self.last
        log_off_loop(
            log, "warning", "%s (attempt %d; retrying for up to %.0f s in all)", self.last, self.attempt, self.patience
        )
        return None

    def restart(self) -> None:
        """Count ``patience`` from now: the attempt that failed was held by the service, and its time was not an
        outage."""
        self.give_up = time.monotonic() + self.patience

    def final(self) -> ApiError:
        assert self.last is not None
        return self.last


def register_try(
    endpoint: Endpoint,
    key: TryKey,
    class_name: str,
    persist: dict[str, Any],
    exec_values: dict[str, Any],
    logical_date: datetime | None,
    timeout: float = 30.0,
    patience: float = REGISTER_PATIENCE,
    wait: float = 0.0,
) -> Registered:
    """POST /tasks: register this try (the same try again gets its task back), the answer held by the service
    while the try waits, for up to ``wait`` seconds. Retries transient failures (connection errors,
    502/503/504) with back-off for ``patience`` seconds; raises ApiError otherwise or when they last longer
    (``transient`` then tells the two apart). For a task's ``execute`` (no event loop)."""
    registration = Registration(key, class_name, persist, exec_values, logical_date)

    async def register() -> Registered:
        async with httpx.AsyncClient() as client:
            return await register_try_async(client, endpoint, registration, timeout, patience, wait)

    return run_blocking(register())


async def register_try_async(
    client: httpx.AsyncClient,
    endpoint: Endpoint,
    registration: Registration,
    timeout: float = 30.0,
    patience: float = REGISTER_PATIENCE,
    wait: float = 0.0,
) -> Registered:
    """``register_try`` for an event loop (the triggerer, where a try that starts there registers itself) over the
    loop's shared ``client``: ``registration`` in the endpoint's instance (``registration_body``).

    The first attempt asks the service to hold its answer for ``wait`` seconds (MAX_WAIT at most); one that
    failed in between is asked again without: a held request is an optimisation (a proxy may cut a long one),
    never a reason to give up. A service that holds no registration (before 0.3.0) ignores ``wait`` and answers at
    once; the caller then waits as for any try that still waits."""
    body = registration_body(registration, endpoint.instance)
    retries = _Retries(endpoint, patience)
    while (delay := retries.next_delay()) is not None:
        await asyncio.sleep(delay)
        hold = min(wait, MAX_WAIT) if retries.attempt == 1 else 0.0
        try:
            response = await client.post(
                f"{endpoint.base_url}{API}/tasks",
                json=body,
                params={"wait": f"{hold:g}"} if hold > 0 else None,
                headers=endpoint.headers(),
                timeout=timeout + hold,
            )
        except httpx.TransportError as exc:
            answer = retries.answer(None, exc)
        else:
            answer = retries.answer(response)
        if answer is not None:
            return answer
        if hold > 0:
            retries.restart()
    raise retries.final()


def is_timeout(answer: Mapping[str, Any] | Answer) -> bool:
    """Whether a ``failed`` answer (or an event made of one, a dict) means the try reached its timeout, not a check
    error: its ``reason``; from a service (or an event) without one, the start of its ``error``."""
    if isinstance(answer, Mapping):
        state, error, reason = answer.get("state"), answer.get("error"), answer.get("reason")
    else:
        state, error, reason = answer.state, answer.error, answer.reason
    if state != "failed":
        return False
    if reason is not None:
        return bool(reason == TIMEOUT)
    return str(error or "").startswith(TIMEOUT_ERROR_PREFIX)


def outcome(answer: Answer) -> dict[str, Any]:
    """What an answer says of how a try stands, as the event a task acts on carries it: its ``state``, ``error`` and
    ``reason`` (None from a service that sends none)."""
    return {"state": answer.state, "error": answer.error, "reason": answer.reason}
