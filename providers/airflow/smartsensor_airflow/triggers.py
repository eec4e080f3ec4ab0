"""The triggers of a smartsensor sensor: ``SmartSensorStartTrigger``, which a try starts with in the triggerer (no
worker: ``start.py``) and which renders the check and registers the try before it waits; and ``SmartSensorTrigger``,
which a try that ran ``execute`` on a worker defers to. Both wait, through the process's shared poller, until the
service says this try of the task reached a terminal state.

How it ends the task (README: "Airflow versions, and no task failed by a race"):

- ``success`` and ``skipped`` end the task from the triggerer (``TaskSuccessEvent`` / ``TaskSkippedEvent``,
  Airflow 2.10+), unless ``end_from_trigger`` is off. The task is never queued again, so Airflow's deferral race
  (apache/airflow#67287, #72716: a trigger that fires before the scheduler has processed the exit of the try
  that deferred gets the task failed) cannot touch it, and no worker slot is spent on a resume.
- Everything else (a timeout, a check error, an unknown try, the try's ``execution_timeout``) resumes the task on
  a worker, whose ``execute_complete`` raises what Airflow's own sensor would (``AirflowSensorTimeout`` for a
  timeout: no retries; ``AirflowTaskTimeout`` for execution_timeout: retries apply). Such an event is not fired
  before ``RESUME_SETTLE`` seconds after the trigger started, so that the scheduler has taken the deferral in
  first.
- A service out of reach (no answer, 502/503/504, a body that is not its JSON, or the connection's look-up failing:
  ``poller.py``) for longer than ``fallback_grace`` seconds resumes the task with ``unreachable``: its
  ``execute_complete`` checks on its own (the safety valve, ``fallback.py``).
"""

from __future__ import annotations

import asyncio
import json
import time
import weakref
from datetime import datetime, timezone
from typing import Any, AsyncIterator, Mapping, Optional, Union

import httpx

from smartsensor_airflow._compat import BaseHook, BaseTrigger, TaskSkippedEvent, TriggerEvent, success_event
from smartsensor_airflow.client import (
    REGISTER_PATIENCE,
    TERMINAL,
    Answer,
    ApiError,
    Endpoint,
    endpoint_from_connection,
    register_try_async,
)
from smartsensor_airflow.off_loop_log import log_off_loop
from smartsensor_airflow.parked_checks import check_from
from smartsensor_airflow.poller import ServiceUnreachable, shared_poller
from smartsensor_airflow.start import START_CLASSPATH
from smartsensor_airflow.template_rules import STRICT, TemplateRules
from smartsensor_airflow.trigger_context import release_run_objects, run_context
from smartsensor_airflow.wire import AskedTry, Registration, TryKey, WireError

CLASSPATH = "smartsensor_airflow.triggers.SmartSensorTrigger"
# Seconds a resume event waits after the trigger started: the scheduler processes the executor's report of the
# deferring try within a loop or two (1 s heartbeats), and a resume before that is what the race needs.
RESUME_SETTLE = 5.0
UNREACHABLE = "unreachable"  # the event state of a try whose service was out of reach past its grace
# The event state of a try that started in the triggerer but must run its execute on a worker after all.
EXECUTE_ON_WORKER = "execute"


async def connection_endpoint(conn_id: str) -> Endpoint:
    """The endpoint of an Airflow connection, looked up without blocking the triggerer's event loop."""
    aget = getattr(BaseHook, "aget_connection", None)  # Airflow 3.1+
    if aget is not None:
        conn = await aget(conn_id)
    else:
        from asgiref.sync import sync_to_async  # shipped with Airflow 2.x

        conn = await sync_to_async(BaseHook.get_connection, thread_sensitive=False)(conn_id)
    return endpoint_from_connection(conn, conn_id)


# Per event loop and connection: the look-up in flight or done, and when it started. Triggers that start together
# (a triggerer picks up dozens a loop) share one look-up; a failed one, or one older than ENDPOINT_TTL, is redone.
_ENDPOINTS: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, tuple[asyncio.Task[Endpoint], float]]]" = (
    weakref.WeakKeyDictionary()
)
ENDPOINT_TTL = 60.0


# Per event loop: one HTTP client for the registrations and held requests of the triggers that start there (a client
# each would build an SSL context and a connection pool per trigger, on the triggerer's event loop).
_CLIENTS: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient]" = weakref.WeakKeyDictionary()


def shared_client() -> httpx.AsyncClient:
    """The running loop's HTTP client for registrations, created on first use."""
    loop = asyncio.get_running_loop()
    client = _CLIENTS.get(loop)
    if client is None or client.is_closed:
        client = _CLIENTS[loop] = httpx.AsyncClient(timeout=30.0)
    return client


async def shared_endpoint(conn_id: str) -> Endpoint:
    """``connection_endpoint`` shared by the triggers of this event loop for ENDPOINT_TTL seconds."""
    per_loop = _ENDPOINTS.setdefault(asyncio.get_running_loop(), {})
    held = per_loop.get(conn_id)
    now = time.monotonic()
    if held is None or now - held[1] > ENDPOINT_TTL or (held[0].done() and held[0].exception() is not None):
        held = per_loop[conn_id] = (asyncio.ensure_future(connection_endpoint(conn_id)), now)
    return await asyncio.shield(held[0])


class SmartSensorTrigger(BaseTrigger):
    """Fires once when the try ``key`` is terminal in smartsensor: a task-end event for success or skipped (with
    ``end_from_trigger``), else ``{"state", "error", "hashcode", "key"}`` for the task's ``execute_complete``
    (``state`` ``"error"`` when the service rejects the request for good, ``"unreachable"`` when it was out of
    reach for longer than ``fallback_grace`` seconds). Triggers serialized before ``end_from_trigger`` or
    ``fallback_grace`` existed resume on a worker and never fall back, as they did."""

    def __init__(
        self,
        key: Union[AskedTry, Mapping[str, Any], None],
        conn_id: str = "smartsensor_default",
        poll_interval: float = 10.0,
        end_from_trigger: bool = False,
        settle: float = RESUME_SETTLE,
        deadline: float | None = None,
        fallback_grace: float | None = None,
        try_started: float | None = None,
    ) -> None:
        super().__init__()
        # ``key`` as serialized (``AskedTry.to_json``; without the hashcode in older triggers); None in a start
        # trigger, until its task instance gives it one
        try:
            self.key: Optional[AskedTry] = key if key is None or isinstance(key, AskedTry) else AskedTry.from_json(key)
        except WireError as exc:
            raise ValueError(f"trigger key: {exc}") from None
        self.conn_id = conn_id
        self.poll_interval = float(poll_interval)
        self.end_from_trigger = bool(end_from_trigger)
        self.settle = float(settle)
        self.deadline = None if deadline is None else float(deadline)  # epoch seconds: the try's execution_timeout
        # None or below 0: wait for the service however long it is away.
        self.fallback_grace = None if fallback_grace is None or fallback_grace < 0 else float(fallback_grace)
        # Epoch seconds the try started, as the deferring task saw it: the safety valve counts its timeout from
        # there, whatever start_date the resumed task is given (fallback.try_start).
        self.try_started = None if try_started is None else float(try_started)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return CLASSPATH, {
            "key": self.key_json(),
            "conn_id": self.conn_id,
            "poll_interval": self.poll_interval,
            "end_from_trigger": self.end_from_trigger,
            "settle": self.settle,
            "deadline": self.deadline,
            "fallback_grace": self.fallback_grace,
            "try_started": self.try_started,
        }

    def key_json(self) -> dict[str, Any] | None:
        """The key as serialized and as events carry it (``AskedTry.to_json``)."""
        return None if self.key is None else self.key.to_json()

    async def run(self) -> AsyncIterator[TriggerEvent]:
        yield await self.wait(time.monotonic())

    async def wait(self, started: float) -> TriggerEvent:
        """Wait through the process's shared poller until the try ``self.key`` ends; the event that ends it."""
        assert self.key is not None, "a trigger waits on a key"
        poller = shared_poller(self.conn_id, lambda: connection_endpoint(self.conn_id))
        try:
            waiting = poller.wait(self.key, self.poll_interval, self.fallback_grace)
            if self.deadline is None:
                answer = await waiting
            else:
                answer = await asyncio.wait_for(waiting, max(0.0, self.deadline - time.time()))
        except asyncio.TimeoutError:
            return await self.resume(started, "execution_timeout", "execution_timeout reached")
        except ServiceUnreachable as exc:
            log_off_loop(self.log, "warning", "smartsensor: %s; the task resumes to check on its own", exc)
            return await self.resume(started, UNREACHABLE, str(exc))
        except ApiError as exc:
            return await self.resume(started, "error", str(exc))
        return await self.answered(started, answer)

    async def answered(self, started: float, answer: Answer) -> TriggerEvent:
        """The event for the service's terminal answer: the task ends here on success or skip (with
        ``end_from_trigger``), or resumes on a worker with the answer."""
        state = answer.state
        if self.end_from_trigger and state in ("success", "skipped"):
            # The time it was heard is in the line: the line itself may be written later (``off_loop_log``).
            log_off_loop(
                self.log,
                "info",
                "smartsensor: %s (hash %s)%s, heard at %s; the task ends from the triggerer",
                state,
                answer.hashcode,
                f": {answer.error}" if answer.error else "",
                datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            )
            return success_event() if state == "success" else TaskSkippedEvent()
        log_off_loop(
            self.log, "info", "smartsensor: %s (hash %s); the task resumes on a worker", state, answer.hashcode
        )
        return await self.resume(started, state, answer.error, answer.hashcode, answer.reason)

    async def resume(
        self, started: float, state: str, error: str | None, hashcode: int | None = None, reason: str | None = None
    ) -> TriggerEvent:
        """An event that resumes the task on a worker (its ``execute_complete``), not before the settle time;
        ``reason`` is the service's (None from a service that sends none, and for the provider's own states)."""
        await self._settle(started)
        payload: dict[str, Any] = {
            "state": state,
            "error": error,
            "reason": reason,
            "hashcode": hashcode,
            "key": self.key_json(),
        }
        if state == UNREACHABLE and self.try_started is not None:
            payload["try_started"] = self.try_started  # where the valve counts the timeout from
        return TriggerEvent(payload)

    async def _settle(self, started: float) -> None:
        """Hold a resume event until ``settle`` seconds after the trigger started (the race guard)."""
        left = self.settle - (time.monotonic() - started)
        if left > 0:
            await asyncio.sleep(left)


class SmartSensorStartTrigger(SmartSensorTrigger):
    """The trigger a task starts with in the triggerer (``start.py``), without a worker: it renders the check with
    the run's context, registers the try Airflow gave it (idempotent: a trigger run twice registers the same try
    and gets the same task back), then waits as ``SmartSensorTrigger`` does. What it cannot do here (a check it
    cannot render or read) resumes the task on a worker with ``EXECUTE_ON_WORKER``: the task's ``execute`` runs
    there, as it would without start_from_trigger. A service out of reach for longer than ``fallback_grace``
    resumes it with ``unreachable`` (the safety valve)."""

    def __init__(
        self,
        sensor_class: str,
        fields: dict[str, Any],
        exec_values: dict[str, Any],
        execution_timeout: float | None = None,
        native: bool = False,
        params: dict[str, Any] | None = None,
        hold: float = 0.0,
        undefined: str = STRICT,
        jinja_options: dict[str, Any] | None = None,
        **waiting: Any,
    ) -> None:
        """``native``, ``undefined`` and ``jinja_options``: the DAG's template rules (``template_rules``; a trigger
        serialized before they were sent renders by Airflow's default, ``StrictUndefined``). ``waiting``: how it
        waits once registered, as ``SmartSensorTrigger`` (``conn_id``, ``poll_interval``, ``end_from_trigger``,
        ``settle``, ``fallback_grace``); its key comes from the task instance Airflow gives it."""
        super().__init__(None, **waiting)
        self.sensor_class = sensor_class
        self.fields = dict(fields)
        self.exec_values = dict(exec_values)
        self.execution_timeout = None if execution_timeout is None else float(execution_timeout)
        self.rules = TemplateRules.from_kwargs(native, undefined, jinja_options)
        self.params = None if params is None else dict(params)
        self.hold = max(0.0, float(hold))

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return START_CLASSPATH, {
            "sensor_class": self.sensor_class,
            "fields": dict(self.fields),
            "exec_values": dict(self.exec_values),
            "conn_id": self.conn_id,
            "poll_interval": self.poll_interval,
            "end_from_trigger": self.end_from_trigger,
            "settle": self.settle,
            "fallback_grace": self.fallback_grace,
            "execution_timeout": self.execution_timeout,
            "native": self.rules.native,
            "params": self.params,
            "hold": self.hold,
            "undefined": self.rules.undefined,
            "jinja_options": json.loads(self.rules.options),
        }

    async def run(self) -> AsyncIterator[TriggerEvent]:
        started = time.monotonic()
        ti = self.task_instance
        key = TryKey(ti.dag_id, ti.task_id, ti.run_id, ti.map_index if ti.map_index is not None else -1, ti.try_number)
        self.key = AskedTry(key)
        self.try_started = _epoch(getattr(ti, "start_date", None))  # the scheduler's deferral stamped it
        if self.execution_timeout is not None:
            self.deadline = self.try_started + self.execution_timeout
        try:
            context = await run_context(ti, self.params)
            registered_as, persist = self.check(context)
        except Exception as exc:  # noqa: BLE001 - whatever the triggerer cannot do, the worker's execute does
            # Among them a template that Airflow's rules refuse (StrictUndefined: a name the context lacks): on the
            # worker, Airflow renders the task itself and fails the try with its own error, as it would have.
            log_off_loop(
                self.log,
                "warning",
                "smartsensor: the triggerer cannot read this check (%s); the task starts on a worker",
                exc,
            )
            yield await self.resume(started, EXECUTE_ON_WORKER, f"{type(exc).__name__}: {exc}")
            return
        log_off_loop(self.log, "info", "smartsensor: started in the triggerer; check %s %s", registered_as, persist)
        logical_date = context.get("logical_date")
        del context  # a waiting trigger keeps no context (it holds the run, the task, its DAG)
        release_run_objects(ti)
        patience = max(REGISTER_PATIENCE, self.fallback_grace or 0)
        try:
            endpoint = await self._endpoint(patience)
            registration = Registration(key, registered_as, persist, self.exec_values, logical_date)
            # As execute does: the answer held while this try waits, for up to ``hold`` seconds. A partition that is
            # already there is answered in the service's next round, and heard here at once, not at the shared
            # poller's next request.
            answer = await register_try_async(
                shared_client(), endpoint, registration, patience=patience, wait=self.hold
            )
        except ApiError as exc:
            if exc.transient and self.fallback_grace is not None:
                log_off_loop(self.log, "warning", "smartsensor: %s; the task resumes to check on its own", exc)
                yield await self.resume(started, UNREACHABLE, str(exc))
            else:
                yield await self.resume(started, "error", str(exc))
            return
        log_off_loop(
            self.log,
            "info",
            "smartsensor: registered %s try %s as hash %s (%s)",
            registered_as,
            key.try_number,
            answer.hashcode,
            answer.state,
        )
        if answer.state in TERMINAL:
            yield await self.answered(started, answer)
        else:
            self.key = answer.asked(key)
            yield await self.wait(started)

    def check(self, context: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The check this try registers: its fields rendered with ``context`` by the DAG's rules, read as the
        service's class and persist fields. Raises what rendering or reading raises."""
        return check_from(self.sensor_class, self.fields, self.rules, context)  # as a parked try's

    async def _endpoint(self, patience: float) -> Endpoint:
        """The service's endpoint from the connection. A look-up that fails (Airflow 3's ``aget_connection`` briefly
        failing, a connection missing on this host) is asked again with back-off for ``patience`` seconds, then
        counts as the service out of reach (a transient ApiError), as the shared poller counts it."""
        give_up, delay = time.monotonic() + patience, 1.0
        while True:
            try:
                return await shared_endpoint(self.conn_id)
            except ApiError:
                raise  # the connection has no host: nothing to wait for
            except Exception as exc:  # noqa: BLE001 - whatever the look-up raised, the valve decides
                if time.monotonic() + delay > give_up:
                    raise ApiError(
                        f"smartsensor connection {self.conn_id!r} cannot be looked up: {type(exc).__name__}: {exc}",
                        transient=True,
                    ) from None
                log_off_loop(
                    self.log,
                    "warning",
                    "smartsensor: looking up connection %r failed (%s); again in %g s",
                    self.conn_id,
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(2 * delay, 15.0)


def _epoch(when: Any) -> float:
    """``when`` (a datetime, naive meaning UTC) as epoch seconds; now when it is None."""
    if when is None:
        return time.time()
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return float(when.timestamp())
