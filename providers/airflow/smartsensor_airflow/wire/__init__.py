"""What crosses HTTP between the Airflow provider and smartsensor's task API: the one definition of each shape and of
each field name in it.

Two distributions ship this one file, as they do ``hive_filter``: the provider, as ``smartsensor_airflow.wire``, and
smartsensor itself, as ``smartsensor.wire`` (``package_dir`` in setup.cfg). The service's pydantic models
(``smartsensor.api.tasks``: the schema's constraints) convert through these shapes and the provider builds its
requests and reads the answers with them, so the two cannot name a field differently. It imports nothing but the
standard library (the provider runs on Python 3.9, in Airflow's environment).

- ``TryKey``: Airflow's key of one try of a task instance, in the deployment ``instance`` names.
- ``AskedTry``: one try a states request asks about, with the hashcode of the check it registered when known.
- ``Registration``: the body of ``POST /api/v1/tasks`` (one entry of ``POST /api/v1/tasks/batch``).
- ``Registered`` and ``Refused``: the answer for one registered try, and a try the batch did not register.
- ``TryState``: one answer of ``POST /api/v1/tasks/states``.

``to_json`` gives each shape's JSON object as it travels; ``from_json`` reads one back and raises ``WireError``
(naming the field and what was wrong) for anything else. The JSON stays as older versions send and read it: a key
carries ``instance`` and an asked try ``hashcode`` only when set (a service before them refuses fields it does not
know), and an answer from a service before ``reason`` (0.3.0) or ``instance`` reads with ``reason`` None and
``asks_by_hashcode`` False.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Dict, Iterable, List, Mapping, Optional, Protocol, Union

# The fields of a key that every request and answer carries (``instance`` only when set).
KEY_FIELDS = ("dag_id", "task_id", "run_id", "map_index", "try_number")
# An Airflow deployment's name in a key (the provider connection's ``instance`` extra): the service's schema states
# it, the provider checks a connection's against it before any request.
INSTANCE_PATTERN = r"^[A-Za-z0-9._-]*$"
INSTANCE_MAX_LENGTH = 64

Json = Dict[str, Any]


class WireError(ValueError):
    """A JSON document that is not the shape it should be: the message names the field and what was wrong."""


def _object(doc: object, where: str) -> Mapping[str, Any]:
    if not isinstance(doc, Mapping):
        raise WireError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    return doc


def _field(doc: Mapping[str, Any], name: str, kind: type, where: str, optional: bool = False) -> Any:
    """``doc[name]`` when it is a ``kind`` (an int is never a bool), None when ``optional`` and absent or null."""
    value = doc.get(name)
    if value is None:
        if optional:
            return None
        raise WireError(f"{where}: {name!r} is missing" if name not in doc else f"{where}: {name!r} is null")
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise WireError(f"{where}: {name!r} must be {kind.__name__}, got {type(value).__name__} {value!r}")
    return value


@dataclass(frozen=True)
class TryKey:
    """Airflow's key of one try of a task instance (``map_index`` -1 when the task is not mapped), in the deployment
    ``instance`` names ("" when its connection names none). Hashable: a poller waits on it."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int
    try_number: int
    instance: str = ""

    def in_instance(self, instance: str) -> TryKey:
        """This key in the deployment ``instance`` names (the provider's connection's, added as a request is sent)."""
        return self if instance == self.instance else replace(self, instance=instance)

    def to_json(self, with_instance: bool = False) -> Json:
        """The key's JSON object: ``instance`` only when set, or always ``with_instance`` (the service's answers)."""
        doc: Json = {
            "dag_id": self.dag_id,
            "task_id": self.task_id,
            "run_id": self.run_id,
            "map_index": self.map_index,
            "try_number": self.try_number,
        }
        if self.instance or with_instance:
            doc["instance"] = self.instance
        return doc

    @classmethod
    def from_json(cls, doc: object, where: str = "key") -> TryKey:
        """A key from its JSON object (``instance`` "" when absent; other fields are ignored)."""
        doc = _object(doc, where)
        return cls(
            _field(doc, "dag_id", str, where),
            _field(doc, "task_id", str, where),
            _field(doc, "run_id", str, where),
            _field(doc, "map_index", int, where),
            _field(doc, "try_number", int, where),
            _field(doc, "instance", str, where, optional=True) or "",
        )


@dataclass(frozen=True)
class AskedTry:
    """One try a states request asks about (a key's fields, flat), by the hashcode of the check its registration
    answered when known: the service then answers that check's state or ``superseded``, never another check's."""

    key: TryKey
    hashcode: Optional[int] = None

    def to_json(self) -> Json:
        """The asked key's JSON object: the key's, and ``hashcode`` only when known."""
        doc = self.key.to_json()
        if self.hashcode is not None:
            doc["hashcode"] = self.hashcode
        return doc

    @classmethod
    def from_json(cls, doc: object, where: str = "key") -> AskedTry:
        """An asked try from its JSON object (what ``to_json`` gives; a trigger's serialized key)."""
        return cls(TryKey.from_json(doc, where), _field(_object(doc, where), "hashcode", int, where, optional=True))


def states_request(asked: Iterable[AskedTry]) -> Json:
    """The body of ``POST /api/v1/tasks/states``: the tries asked about, in order."""
    return {"keys": [a.to_json() for a in asked]}


@dataclass(frozen=True)
class Registration:
    """One try to register (``POST /api/v1/tasks``): its key, the sensor class and field values of its check, and
    the run's logical date if it has one."""

    key: TryKey
    sensor_class: str
    persist: Json
    exec_values: Json
    logical_date: Optional[datetime] = None

    def to_json(self) -> Json:
        """The request body (the logical date as ISO 8601 text)."""
        return {
            "key": self.key.to_json(),
            "sensor": {"class": self.sensor_class, "persist": self.persist, "exec": self.exec_values},
            "logical_date": None if self.logical_date is None else self.logical_date.isoformat(),
        }

    @classmethod
    def from_json(cls, doc: object, where: str = "registration") -> Registration:
        """A registration from its body (what ``to_json`` gives)."""
        doc = _object(doc, where)
        sensor = _object(doc.get("sensor"), f"{where}: sensor")
        logical = _field(doc, "logical_date", str, where, optional=True)
        try:
            logical_date = None if logical is None else datetime.fromisoformat(logical)
        except ValueError:
            raise WireError(f"{where}: 'logical_date' is not an ISO 8601 date-time: {logical!r}") from None
        return cls(
            TryKey.from_json(doc.get("key"), f"{where}: key"),
            _field(sensor, "class", str, f"{where}: sensor"),
            dict(_field(sensor, "persist", dict, f"{where}: sensor", optional=True) or {}),
            dict(_field(sensor, "exec", dict, f"{where}: sensor", optional=True) or {}),
            logical_date,
        )


@dataclass(frozen=True)
class TaskInstanceRef:
    """The task instance a try is, in the service (``execution_date``: its ISO 8601 text)."""

    dag_id: str
    task_id: str
    execution_date: str

    def to_json(self) -> Json:
        return {"dag_id": self.dag_id, "task_id": self.task_id, "execution_date": self.execution_date}

    @classmethod
    def from_json(cls, doc: object, where: str = "task_instance") -> TaskInstanceRef:
        doc = _object(doc, where)
        return cls(
            _field(doc, "dag_id", str, where),
            _field(doc, "task_id", str, where),
            _field(doc, "execution_date", str, where),
        )


@dataclass(frozen=True)
class Registered:
    """The service's answer for one registered try: the key it registered, the try's state, ``error`` (text) and
    ``reason`` (why it ended, as data; None while it waits, and from a service before 0.3.0), the hashcode of its
    check, whether this registration made its task instance, and that task instance.

    ``asks_by_hashcode``: the service reads a states request's ``hashcode`` (its answer's key carries ``instance``;
    a service before instance names answers without, and refuses a hashcode)."""

    key: TryKey
    state: str
    error: Optional[str]
    reason: Optional[str]
    hashcode: int
    created: bool
    task_instance: TaskInstanceRef
    asks_by_hashcode: bool = True

    def to_json(self) -> Json:
        """The answer's JSON object (its key with ``instance`` when ``asks_by_hashcode``)."""
        return {
            "key": self.key.to_json(with_instance=self.asks_by_hashcode),
            "state": self.state,
            "error": self.error,
            "reason": self.reason,
            "hashcode": self.hashcode,
            "created": self.created,
            "task_instance": self.task_instance.to_json(),
        }

    @classmethod
    def from_json(cls, doc: object, where: str = "registration answer") -> Registered:
        """The answer from its JSON object; WireError for a body that is not one (a proxy's page, a truncated body)."""
        doc = _object(doc, where)
        key = _object(doc.get("key"), f"{where}: key")
        return cls(
            TryKey.from_json(key, f"{where}: key"),
            _field(doc, "state", str, where),
            _field(doc, "error", str, where, optional=True),
            _field(doc, "reason", str, where, optional=True),
            _field(doc, "hashcode", int, where),
            _field(doc, "created", bool, where),
            TaskInstanceRef.from_json(doc.get("task_instance"), f"{where}: task_instance"),
            "instance" in key,
        )

    def asked(self, key: TryKey) -> AskedTry:
        """How a states request asks about ``key`` once registered with this answer: by this check's hashcode when
        the service reads it."""
        return AskedTry(key, self.hashcode if self.asks_by_hashcode else None)


@dataclass(frozen=True)
class Refused:
    """A try ``POST /api/v1/tasks/batch`` did not register: the status ``POST /api/v1/tasks`` would have answered
    (409, 422, 503) and why."""

    key: TryKey
    status: int
    detail: str

    def to_json(self) -> Json:
        return {"key": self.key.to_json(with_instance=True), "status": self.status, "detail": self.detail}

    @classmethod
    def from_json(cls, doc: object, where: str = "refusal") -> Refused:
        doc = _object(doc, where)
        return cls(
            TryKey.from_json(doc.get("key"), f"{where}: key"),
            _field(doc, "status", int, where),
            _field(doc, "detail", str, where),
        )


def batch_answer(doc: object) -> List[Union[Registered, Refused]]:
    """The answers of ``POST /api/v1/tasks/batch``, one per try in order (a refusal is the one with a ``status``)."""
    tries = _object(doc, "batch answer").get("tries")
    if not isinstance(tries, list):
        raise WireError(f"batch answer: 'tries' must be a list, got {type(tries).__name__}")
    return [
        Refused.from_json(one, f"batch answer: tries[{i}]")
        if isinstance(one, Mapping) and "status" in one
        else Registered.from_json(one, f"batch answer: tries[{i}]")
        for i, one in enumerate(tries)
    ]


class TaskKey(Protocol):
    """A task's key without the try: a ``TryKey``, or the service's own (``smartsensor.domain.keys.ExternalKey``)."""

    @property
    def dag_id(self) -> str: ...
    @property
    def task_id(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def map_index(self) -> int: ...


def try_state_json(
    key: TaskKey, try_number: int, state: str, error: Optional[str], reason: Optional[str], hashcode: Optional[int]
) -> Json:
    """One answer of ``POST /api/v1/tasks/states`` as JSON (the key's fields flat, without ``instance``): what
    ``TryState.to_json`` gives, for the service, which answers thousands at once without making the objects."""
    return {
        "dag_id": key.dag_id,
        "task_id": key.task_id,
        "run_id": key.run_id,
        "map_index": key.map_index,
        "try_number": try_number,
        "state": state,
        "error": error,
        "reason": reason,
        "hashcode": hashcode,
    }


@dataclass(frozen=True)
class TryState:
    """One answer of ``POST /api/v1/tasks/states``: the try asked about (its key without ``instance``), its state
    (the task instance's, or ``superseded`` / ``unknown``), ``error`` (text), ``reason`` (why it ended, as data; None
    while it waits, and from a service before 0.3.0) and the hashcode of the check it stands for, if any."""

    key: TryKey
    state: str
    error: Optional[str] = None
    reason: Optional[str] = None
    hashcode: Optional[int] = None

    def to_json(self) -> Json:
        return try_state_json(self.key, self.key.try_number, self.state, self.error, self.reason, self.hashcode)

    @classmethod
    def from_json(cls, doc: object, where: str = "state") -> TryState:
        doc = _object(doc, where)
        return cls(
            TryKey.from_json(doc, where).in_instance(""),
            _field(doc, "state", str, where),
            _field(doc, "error", str, where, optional=True),
            _field(doc, "reason", str, where, optional=True),
            _field(doc, "hashcode", int, where, optional=True),
        )


def states_answer(doc: object) -> List[TryState]:
    """The answers of ``POST /api/v1/tasks/states``, one per try asked about, in order; WireError for a body that is
    not the service's answer."""
    states = _object(doc, "states answer").get("states")
    if not isinstance(states, list):
        raise WireError(f"states answer: 'states' must be a list, got {type(states).__name__}")
    return [TryState.from_json(one, f"states answer: states[{i}]") for i, one in enumerate(states)]
