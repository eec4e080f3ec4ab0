"""Task endpoints for another scheduler (the Airflow provider): register one try or many, read many tries' states.

The request models are the schema's truth: what they accept is what the service takes (ids as `submit` takes
them, integers that are not booleans, a logical date as an RFC 3339 string within the calendar in UTC, a class
name from ``[smart_sensor] sensors_enabled``), so a request the schema allows is not refused later for its form.
The shapes themselves, and the name of every field that crosses, are ``smartsensor.wire``'s (the provider's own
``smartsensor_airflow.wire``): the models here add the schema's constraints and convert through them (``Key.wire``;
the answers are ``wire.Registered``, ``wire.Refused`` and ``wire.try_state_json`` as JSON), and a unit test holds
each model's fields to its shape's.
"""

import asyncio
import json
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi.routing import APIRoute
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    ValidationInfo,
    create_model,
)
from starlette.concurrency import run_in_threadpool

from smartsensor.api.errors import error_responses
from smartsensor.config import Config
from smartsensor.domain.clock import as_utc, iso
from smartsensor.domain.keys import ExternalKey
from smartsensor.external.ended_watch import EndedWatch
from smartsensor.external.registration import (
    ExternalConflict,
    ExternalRegistered,
    ExternalTry,
    register_external,
    register_externals,
)
from smartsensor.external.states import Asked, TerminalAnswers, end_reason, external_states, still_waiting
from smartsensor.ports import ExternalTryStore
from smartsensor.sensors.errors import SensorDefinitionError, SensorModuleUnavailable
from smartsensor.sensors.validation import validate_id
from smartsensor.wire import (
    INSTANCE_MAX_LENGTH,
    INSTANCE_PATTERN,
    Refused as WireRefused,
    Registered as WireRegistered,
    TaskInstanceRef as WireTaskInstance,
    TryKey,
)

MAX_KEYS = 10_000  # keys per states request: one triggerer's deferred tasks, with room to spare
MAX_BATCH = 1000  # tries per registration request: one scheduler loop's new parked tries, in a few requests
MAX_WAIT = 30.0  # seconds a states request may be held: under the idle timeouts of common load balancers
LONG_POLL_HEADER = "X-Smartsensor-Long-Poll"  # on every states answer: this server holds requests (max seconds)
WAIT_HELP = (
    "Seconds to hold the request while every try asked about still waits (0: answer at once). It is "
    "answered as soon as one of them ends, is superseded or is unknown."
)
REGISTER_WAIT_HELP = (
    "Seconds to hold the answer while the registered try still waits (0: answer at once), as a states request "
    "with `wait` would: one request registers a try and hears a partition that is already there. The try is "
    "registered either way; `state`, `error` and `reason` are then the try's when the answer is sent."
)
# What validate_id takes, as a pattern the schema can state: no control characters, not only spaces.
ID_PATTERN = r"^[^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f][^\x00-\x1f\x7f]*$"
INSTANCE_HELP = (
    "The Airflow deployment the key belongs to (the `instance` extra of the provider's connection), empty when it "
    "names none: two deployments sharing a service have the same run ids, and must not share keys."
)
HASHCODE_HELP = (
    "The hashcode the registration of this try answered with. Given, the answer is `superseded` when the try was "
    "registered again with another check, never that check's state."
)


def _valid_id(value: str, info: ValidationInfo) -> str:
    return validate_id(info.field_name or "id", value)  # also refuses lone surrogates, which no pattern states


def _rfc3339_text(value: Any) -> Any:
    """A date-time as the schema states it: a string (pydantic alone would also take a number of seconds)."""
    if not isinstance(value, str):
        raise ValueError("logical_date must be an RFC 3339 date-time string")
    return value


def _aware_utc(value: datetime) -> datetime:
    """Aware UTC, as every time here (a naive one is read as UTC); a date that leaves the calendar in UTC is
    refused."""
    try:
        return as_utc(value)
    except OverflowError:
        raise ValueError("logical_date falls outside years 1-9999 once converted to UTC") from None


Id = Annotated[str, Field(min_length=1, max_length=250, pattern=ID_PATTERN), AfterValidator(_valid_id)]
Instance = Annotated[str, Field(max_length=INSTANCE_MAX_LENGTH, pattern=INSTANCE_PATTERN)]
LogicalDate = Annotated[datetime, BeforeValidator(_rfc3339_text), AfterValidator(_aware_utc)]


class Key(BaseModel):
    """Airflow's key of one try of a task instance, in the deployment ``instance`` names."""

    model_config = ConfigDict(extra="forbid")
    dag_id: Id
    task_id: Id
    run_id: Id
    map_index: StrictInt = Field(default=-1, ge=-1, lt=2**31)
    try_number: StrictInt = Field(ge=0, lt=2**31)
    instance: Instance = Field(default="", description=INSTANCE_HELP)

    def external(self) -> ExternalKey:
        """The service's key of the task (``ExternalKey``: without the try)."""
        return ExternalKey(self.dag_id, self.task_id, self.run_id, self.map_index, self.instance)

    def wire(self) -> TryKey:
        """The key as it crosses HTTP (``smartsensor.wire.TryKey``)."""
        return TryKey(self.dag_id, self.task_id, self.run_id, self.map_index, self.try_number, self.instance)


class AskedKey(Key):
    """One try asked about in ``POST /tasks/states``, with the hashcode of the check it registered if known."""

    hashcode: StrictInt | None = Field(default=None, ge=-(2**63), lt=2**63, description=HASHCODE_HELP)

    def asked(self) -> Asked:
        return Asked(self.external(), self.try_number, self.hashcode)


class States(BaseModel):
    model_config = ConfigDict(extra="forbid")
    keys: list[AskedKey] = Field(max_length=MAX_KEYS)


# external/states.REASONS, as the schema states them (a unit test pins the two together).
Reason = Literal["landed", "timeout", "error", "skipped", "superseded", "unknown"]
REASON_HELP = (
    "Why the try ended, as data: landed (success), timeout (its timeout: failed, or skipped with soft_fail), error "
    "(failed for another reason; `error` says which), skipped (for another reason: by hand), superseded, unknown; "
    "null while it waits. Services before 0.3.0 send no reason: only `error`, a timeout's starting 'timed out waiting'."
)


class TryState(BaseModel):
    """The state of one try, as ``POST /tasks/states`` answers it (a documented answer: not validated)."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int
    try_number: int
    state: str = Field(description="The task instance's state, or superseded, or unknown.")
    error: str | None = Field(description="Why it ended, as text (a timeout's starts 'timed out waiting').")
    reason: Reason | None = Field(description=REASON_HELP)
    hashcode: int | None


class StatesAnswer(BaseModel):
    """The answer of ``POST /tasks/states``: one state per key asked about, in order."""

    states: list[TryState]


class TaskInstanceRef(BaseModel):
    """The task instance a try is, here."""

    dag_id: str
    task_id: str
    execution_date: str


class Registered(BaseModel):
    """The answer of ``POST /tasks`` (``wire.Registered``), its route's response model."""

    key: Key
    state: str
    error: str | None
    reason: Reason | None = Field(description=REASON_HELP)
    hashcode: int
    created: bool
    task_instance: TaskInstanceRef


class Refused(BaseModel):
    """A try that ``POST /tasks/batch`` did not register: its status as ``POST /tasks`` would answer it (409, 422,
    503) and why."""

    key: Key
    status: int
    detail: str


class RegisteredMany(BaseModel):
    """The answer of ``POST /tasks/batch``: one per try, in order."""

    tries: list[Registered | Refused]


def register_model(class_names: list[str]) -> type[BaseModel]:
    """The registration body's model, whose sensor ``class`` is one of ``class_names`` (``[smart_sensor]
    sensors_enabled``)."""
    names = tuple(class_names) or ("(none enabled)",)
    sensor = create_model(
        "Sensor",
        __config__=ConfigDict(extra="forbid", populate_by_name=True),
        __doc__="One sensor, by class name (an enabled @smart_eligible class) and its field values.",
        class_name=(Literal[names], Field(alias="class")),  # type: ignore[arg-type]  # a Literal built from the config
        persist=(dict[str, Any], Field(default_factory=dict)),
        exec=(dict[str, Any], Field(default_factory=dict)),
    )
    register = create_model(
        "Register",
        __config__=ConfigDict(extra="forbid"),
        key=(Key, ...),
        sensor=(sensor, ...),
        logical_date=(LogicalDate | None, None),
    )
    return register


def refusal_status(exc: Exception) -> int:
    """The status a refused registration answers: 409 for an older try or one that kept meeting concurrent
    registrations, 503 for a sensor module this host cannot import now, 422 for a check the service cannot take."""
    if isinstance(exc, ExternalConflict):
        return 409
    return 503 if isinstance(exc, SensorModuleUnavailable) else 422


def register_one(
    store: ExternalTryStore, cfg: Config, ended: TerminalAnswers, body: Any
) -> tuple[ExternalRegistered | None, int, str]:
    """Register one try (call from a worker thread): what was registered, else the status (``refusal_status``) and
    reason of a refusal."""
    try:
        done = register_external(
            store,
            cfg,
            body.key.external(),
            body.key.try_number,
            body.sensor.class_name,
            body.sensor.persist,
            body.sensor.exec,
            body.logical_date,
        )
    except (ExternalConflict, SensorModuleUnavailable, SensorDefinitionError) as exc:
        return None, refusal_status(exc), str(exc)
    if done.created:
        ended.forget(done.key, done.try_number)  # a new task instance for this try: what was kept is another's
    return done, 200, ""


def registered_answer(key: Key, done: ExternalRegistered, state: str, error: str | None) -> dict[str, Any]:
    """The ``Registered`` answer for a try registered as ``done``, in ``state`` with ``error`` when answered, as
    JSON (``wire.Registered``)."""
    ti_dag, ti_task, ti_date = done.task_instance
    answer = WireRegistered(
        key.wire(),
        state,
        error,
        end_reason(state, error),
        done.hashcode,
        done.created,
        WireTaskInstance(ti_dag, ti_task, iso(ti_date)),
    )
    return answer.to_json()


def refused_answer(key: Key, refusal: Exception) -> dict[str, Any]:
    """The ``Refused`` answer for a try a batch did not register, as JSON (``wire.Refused``)."""
    return WireRefused(key.wire(), refusal_status(refusal), str(refusal)).to_json()


def tasks_router(
    cfg: Config, store: ExternalTryStore, watch: EndedWatch, route_class: type[APIRoute], prefix: str
) -> APIRouter:
    """``POST {prefix}/tasks``, ``POST {prefix}/tasks/batch`` and ``POST {prefix}/tasks/states`` over one store;
    ``watch`` wakes held states requests; ``route_class`` asks for the token (``auth.token_route``). The routes
    carry the prefix themselves, so that the route a request matched names its full path
    (``request_counts.matched_route``)."""
    router = APIRouter(prefix=prefix, route_class=route_class)
    Register: Any = register_model(cfg.sensors_enabled)  # a model class, built per config
    ended = TerminalAnswers()

    async def held_answers(asked: list[Asked], wait: float, request: Request | None = None) -> list[dict[str, Any]]:
        """The answers for ``asked`` once one of the tries no longer waits, or after ``wait`` seconds; none once
        the client of ``request`` has gone."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            seen = watch.generation  # read before the query: a change during it is not missed
            answers = await run_in_threadpool(external_states, store, asked, ended)
            left = deadline - loop.time()
            # answered when the wait is over, when there is nothing to wait on, or when a try no longer waits
            if left <= 0 or not answers or not all(still_waiting(a["state"]) for a in answers):
                return answers
            await watch.changed(seen, left, {a["hashcode"] for a in answers})  # only ends of these wake it
            if request is not None and await request.is_disconnected():
                return []  # its client asked again with other keys, or left: nothing more is read for it

    @router.post(
        "/tasks",
        response_model=Registered,
        responses={**error_responses(400, 401, 409, 413, 422, 503), 200: {"description": "The try"}},
    )
    async def register(
        body: Register, wait: float = Query(0, ge=0, le=MAX_WAIT, description=REGISTER_WAIT_HELP)
    ) -> dict[str, Any]:
        """Register one try (idempotent for the same try; a newer try starts afresh), and with ``wait`` hold the
        answer until it ends (or is superseded) or ``wait`` seconds pass. 409: an older try, or one that kept
        meeting concurrent registrations of the same task (ask again)."""
        done, status, reason = await run_in_threadpool(register_one, store, cfg, ended, body)
        if done is None:
            raise HTTPException(status, reason)
        state, error = done.state, done.error
        if wait > 0 and still_waiting(state):
            (held,) = await held_answers([Asked(body.key.external(), body.key.try_number, done.hashcode)], wait)
            state, error = held["state"], held["error"]
        return registered_answer(body.key, done, state, error)

    RegisterMany: Any = create_model(
        "RegisterMany",
        __config__=ConfigDict(extra="forbid"),
        __doc__=f"Tries to register in one request (at most {MAX_BATCH}).",
        tries=(list[Register], Field(max_length=MAX_BATCH)),
    )

    # The two routes below answer with a Response of their own (the JSON as json.dumps writes it, as they always
    # have): their response models are declared for the schema, and FastAPI does not serialize through them.
    @router.post(
        "/tasks/batch",
        response_model=RegisteredMany,
        responses={**error_responses(400, 401, 413, 422, 503), 200: {"description": "One answer per try, in order"}},
    )
    async def register_many(body: RegisterMany) -> Response:
        """Register many tries in one request, each as ``POST /tasks`` registers one (without ``wait``): one
        answer per try, in order, a refused try answered with its status and reason, never failing the others.
        New tries share one transaction (``register_externals``)."""

        def all_of_them() -> list[dict[str, Any]]:
            tries = [
                ExternalTry(
                    one.key.external(),
                    one.key.try_number,
                    one.sensor.class_name,
                    one.sensor.persist,
                    one.sensor.exec,
                    one.logical_date,
                )
                for one in body.tries
            ]
            answers = []
            for one, done in zip(body.tries, register_externals(store, cfg, tries), strict=True):
                if isinstance(done, ExternalRegistered):
                    if done.created:
                        ended.forget(done.key, done.try_number)
                    answers.append(registered_answer(one.key, done, done.state, done.error))
                else:
                    answers.append(refused_answer(one.key, done))
            return answers

        return Response(json.dumps({"tries": await run_in_threadpool(all_of_them)}), media_type="application/json")

    @router.post(
        "/tasks/states",
        response_model=StatesAnswer,
        responses={**error_responses(400, 401, 413, 422, 503), 200: {"description": "The states"}},
    )
    async def states(
        body: States, request: Request, wait: float = Query(0, ge=0, le=MAX_WAIT, description=WAIT_HELP)
    ) -> Response:
        """The state of each try asked about, in order, in one request; with ``wait``, held until one of them
        has ended (or is superseded or unknown) or ``wait`` seconds pass."""
        answers = await held_answers([k.asked() for k in body.keys], wait, request)
        return Response(
            json.dumps({"states": answers}), media_type="application/json", headers={LONG_POLL_HEADER: f"{MAX_WAIT:g}"}
        )

    return router
