"""Tasks of another scheduler (Airflow) waiting through smartsensor, registered by their own key (read back by it
in batches: ``external/states``).

Each try there is one task instance here. The same try registering again with the same check (a retried request,
a restarted triggerer) gets the same task instance back; a new try (a retry or a clear in Airflow) starts a fresh
one and ends the previous one if it still waits, so a new try never inherits an old try's outcome. So does the same
try registered again with another check (the run deleted and created again, an Airflow whose database was reset,
two deployments under one key): a check's verdict only ever answers that check. A key includes the deployment's
``instance`` name (the provider's connection sets it), so that deployments sharing a service never share a key.
Airflow owns retries: tasks are registered with retries=0.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, Sequence

from smartsensor.config import Config
from smartsensor.domain import clock
from smartsensor.domain.keys import ExternalKey, TaskKey
from smartsensor.domain.rows import NewTry, Superseded, TaskRow
from smartsensor.domain.states import State
from smartsensor.external.states import OTHER_CHECK
from smartsensor.ports import ExternalTryStore, InsertConflict
from smartsensor.sensors.base import BaseSensor, import_sensor_modules, smart_classes_named
from smartsensor.sensors.errors import SensorDefinitionError, SensorModuleUnavailable
from smartsensor.sensors.validation import validate_id
from smartsensor.service.task_rows import served_here, task_row

log = logging.getLogger(__name__)

RACE_ATTEMPTS = 20  # reads of a key that concurrent registrations keep moving, before answering "ask again"


class ExternalConflict(Exception):
    """A request about an older try than the one registered (a stale caller)."""


@dataclass(frozen=True)
class ExternalRegistered:
    """Outcome of registering one try of an external task."""

    key: ExternalKey
    try_number: int
    state: str
    error: str | None
    hashcode: int
    created: bool
    task_instance: TaskKey  # the task instance here


def smart_class(name: Any, cfg: Config) -> type[BaseSensor]:
    """The @smart_eligible class called ``name`` that ``[smart_sensor] sensors_enabled`` allows."""
    if not isinstance(name, str) or not name:
        raise SensorDefinitionError("sensor class must be a class name, e.g. NamedHivePartitionSensor")
    if name not in cfg.sensors_enabled:
        raise SensorDefinitionError(f"sensor class {name!r} is not in [smart_sensor] sensors_enabled")
    failures = import_sensor_modules(cfg.sensor_modules)
    found = smart_classes_named(name)
    if not found and failures:  # perhaps defined by a module this host cannot import now: a deploy skew
        module, why = next(iter(failures.items()))
        raise SensorModuleUnavailable(
            module,
            f"no @smart_eligible sensor class {name!r} is loaded, and sensor "
            f"module {module!r} cannot be imported on this host ({why})",
        )
    if not found:
        raise SensorDefinitionError(
            f"no @smart_eligible sensor class {name!r} is defined by the built-in or configured sensor modules"
        )
    return found[0]


def ti_task_id(key: ExternalKey) -> str:
    """The task_id of a key's task instance here: Airflow's, with ``[map_index]`` for a mapped task
    (Airflow task ids never contain brackets)."""
    return key.task_id if key.map_index < 0 else f"{key.task_id}[{key.map_index}]"


def validate_key(key: ExternalKey, try_number: Any) -> None:
    """Ids as registration takes them; map_index -1 or more; try_number a non-negative integer."""
    for field in ("dag_id", "task_id", "run_id"):
        validate_id(field, getattr(key, field))
    for field, value, lowest in (("map_index", key.map_index, -1), ("try_number", try_number, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or not lowest <= value < 2**31:
            raise SensorDefinitionError(f"{field} must be an integer from {lowest}, got {value!r}")
    validate_id("task_id", ti_task_id(key))


def register_external(
    store: ExternalTryStore,
    cfg: Config,
    key: ExternalKey,
    try_number: int,
    class_name: str,
    persist: dict[str, Any],
    exec_values: dict[str, Any],
    logical_date: datetime | None = None,
) -> ExternalRegistered:
    """Register one try of an external task: validated and hashed as `submit` does (persist fields already
    rendered by the caller). Only sensors the shard workers here serve (``served_here``): the caller runs any
    other itself."""
    row = _task_row(cfg, key, try_number, class_name, persist, exec_values)
    return _register_row(store, key, try_number, row, logical_date)


class ExternalTry(NamedTuple):
    """One try to register (``register_externals``), as ``register_external`` takes it."""

    key: ExternalKey
    try_number: int
    class_name: str
    persist: dict[str, Any]
    exec_values: dict[str, Any]
    logical_date: datetime | None = None


def register_externals(
    store: ExternalTryStore, cfg: Config, tries: Sequence[ExternalTry]
) -> list[ExternalRegistered | ExternalConflict | SensorDefinitionError | SensorModuleUnavailable]:
    """Register many tries, each as ``register_external`` registers it: what each registration gave, or why it was
    refused, in order. The first registrations of keys with no mapping yet (a scheduler's new tries: the common
    case) share one transaction (``ExternalTryStore.register_new_tries``); the others, and all of them if a concurrent
    registration meets that transaction, go one by one."""
    out: dict[int, ExternalRegistered | ExternalConflict | SensorDefinitionError | SensorModuleUnavailable] = {}
    rows: dict[int, TaskRow] = {}  # place → the row of each try that is valid, validated and hashed once
    first_of: dict[ExternalKey, int] = {}  # key → the place of its first try: only those may go together
    for place, t in enumerate(tries):
        try:
            rows[place] = _task_row(cfg, t.key, t.try_number, t.class_name, t.persist, t.exec_values)
        except (SensorDefinitionError, SensorModuleUnavailable) as exc:
            out[place] = exc
            continue
        first_of.setdefault(t.key, place)
    new = [NewTry(tries[p].key, tries[p].try_number, rows[p], tries[p].logical_date) for p in first_of.values()]
    try:
        together = store.register_new_tries(new)
    except InsertConflict:
        together = set()  # nothing written: each is registered on its own below
    for place, row in rows.items():
        t = tries[place]
        if first_of[t.key] == place and t.key in together:
            out[place] = ExternalRegistered(t.key, t.try_number, row.state, None, row.hashcode, True, row.key)
            continue
        try:
            out[place] = _register_row(store, t.key, t.try_number, row, t.logical_date)
        except ExternalConflict as exc:
            out[place] = exc
    return [out[place] for place in range(len(tries))]


def _task_row(
    cfg: Config, key: ExternalKey, try_number: int, class_name: str, persist: Any, exec_values: Any
) -> TaskRow:
    """The task instance row a try registers: its sensor validated and hashed as `submit` does."""
    validate_key(key, try_number)
    cls = smart_class(class_name, cfg)
    for name, values, allowed in (("persist", persist, cls.persist_fields), ("exec", exec_values, cls.exec_fields)):
        if not isinstance(values, dict):
            raise SensorDefinitionError(f"{name} fields must be an object")
        unknown = sorted(set(values) - set(allowed))
        if unknown:
            raise SensorDefinitionError(f"{cls.__name__} has no {name} field(s) {unknown}; it takes {sorted(allowed)}")
    sensor = cls.rebuild(persist, {**exec_values, "retries": 0}, task_id=ti_task_id(key), dag_id=key.dag_id)
    served, reason = served_here(sensor, cfg)
    if not served:
        raise SensorDefinitionError(
            f"{cls.__name__} is not served by smartsensor here ({reason}): run it as a plain sensor"
        )
    # A try's task instance here is keyed by its registration time: that is its execution_date. The persist
    # fields were rendered by the caller and are stored as they are.
    return task_row(sensor, key.dag_id, clock.now(), State.SMART_PENDING, cfg)


def _register_row(
    store: ExternalTryStore, key: ExternalKey, try_number: int, row: TaskRow, logical_date: datetime | None
) -> ExternalRegistered:
    """Register ``row`` as ``key``'s try ``try_number``, reading the key again while concurrent registrations move
    it (on SQLite, whose reads take no lock, that is how concurrent tries meet): each lost race means another
    request committed, so this ends; past RACE_ATTEMPTS the caller is told to ask again, as for a stale try."""
    for _ in range(RACE_ATTEMPTS):
        try:
            return _register(store, key, try_number, row, logical_date)
        except InsertConflict:
            row = row._replace(execution_date=clock.now())
    raise ExternalConflict(
        f"try {try_number} of {key.dag_id}.{key.task_id} ({key.run_id}) met {RACE_ATTEMPTS} "
        f"concurrent registrations of the same task: ask again"
    )


def _register(
    store: ExternalTryStore, key: ExternalKey, try_number: int, row: TaskRow, logical_date: datetime | None
) -> ExternalRegistered:
    """One transaction (``ExternalTryStore.register_try``): the same try gets its task instance back; a first or
    newer try inserts ``row``."""
    superseded = Superseded(
        newer_try=f"superseded by try {try_number} of the Airflow task",
        other_check=f"{OTHER_CHECK}: try {try_number} of the Airflow task was registered again with another check",
    )
    registered_try, ti = store.register_try(key, try_number, row, logical_date, superseded)
    if registered_try is not None and registered_try > try_number:
        raise ExternalConflict(
            f"try {try_number} of {key.dag_id}.{key.task_id} ({key.run_id}) is older than "
            f"the registered try {registered_try}"
        )
    if ti is not None:
        return ExternalRegistered(
            key,
            try_number,
            ti.state,
            ti.error,
            ti.hashcode,
            False,
            ti.key,
        )
    return ExternalRegistered(key, try_number, row.state, None, row.hashcode, True, row.key)
