"""Registration and routing: a sensor task becomes a task_instance row with attr_dict, exec_dict,
hashcode and shardcode, in state smart_pending (shard workers) or scheduled (classic mode)."""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable

from sqlalchemy import Engine

from schema.models import State
from sensors.base import BUILTIN_MODULES, BaseSensor, classpath_of, is_smart_eligible
from sensors.errors import SensorDefinitionError
from smartsensor import queries
from smartsensor.config import Config
from smartsensor.hashing import canonical_json, check_hashcode, shardcode_for

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Registered:
    """Outcome of registering one task instance."""

    dag_id: str
    task_id: str
    execution_date: datetime
    state: str
    hashcode: int
    shardcode: int
    created: bool
    reason: str


def _json_field(owner: str, field: str, value: Any) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SensorDefinitionError(
            f"{owner}: field {field!r} is not JSON serialisable ({type(value).__name__}): {exc}") from None


def serialise(sensor: BaseSensor) -> tuple[str, str]:
    """Canonical (attr_dict, exec_dict) JSON of a rendered sensor; errors name the field."""
    owner = f"task {sensor.task_id!r}"
    persist = sensor.persist_values()
    for field, value in persist.items():
        _json_field(owner, field, value)
    exec_values = sensor.exec_values()
    for field, value in exec_values.items():
        _json_field(owner, field, value)
        if isinstance(value, float) and math.isinf(value):
            raise SensorDefinitionError(f"{owner}: field {field!r} must be finite")
    return canonical_json(persist), canonical_json(exec_values)


def worker_can_load(cls: type, cfg: Config) -> bool:
    """True if shard workers can find this class without importing a DAG file."""
    module = cls.__module__
    return module in BUILTIN_MODULES or module in cfg.sensor_modules


def route(sensor: BaseSensor, cfg: Config) -> tuple[str, str]:
    """(state, reason): smart_pending only if enabled globally, marked in code, enabled in config,
    loadable by workers, and the instance's own check passes; otherwise scheduled."""
    cls = type(sensor)
    if not cfg.use_smart_sensor:
        return State.SCHEDULED, "use_smart_sensor is off"
    if not is_smart_eligible(cls):
        return State.SCHEDULED, f"{cls.__name__} is not marked @smart_eligible"
    if cls.__name__ not in cfg.sensors_enabled:
        return State.SCHEDULED, f"{cls.__name__} is not in [smart_sensor] sensors_enabled"
    if not worker_can_load(cls, cfg):
        return State.SCHEDULED, (f"module {cls.__module__} of {cls.__name__} is not in "
                                 f"[smart_sensor] sensor_modules")
    try:
        if not sensor.is_smart_sensor_compatible():
            return State.SCHEDULED, "the sensor's is_smart_sensor_compatible() returned False"
    except Exception as exc:  # noqa: BLE001 - any failure here means "run it the classic way"
        log.warning("task %s: smart registration failed, falling back to classic mode: %s", sensor.task_id, exc)
        return State.SCHEDULED, f"smart registration failed: {exc}"
    return State.SMART_PENDING, "smart"


def build_row(sensor: BaseSensor, dag_id: str, execution_date: datetime, cfg: Config,
              fileloc: str | None = None) -> tuple[dict[str, Any], str]:
    """The task_instance row for ``sensor`` on ``execution_date`` and the routing reason."""
    rendered = sensor.rendered(execution_date)
    attr_dict, exec_dict = serialise(rendered)
    classpath = classpath_of(type(sensor))
    hashcode = check_hashcode(classpath, attr_dict)
    state, reason = route(rendered, cfg)
    now = datetime.utcnow()
    row = {
        "dag_id": dag_id, "task_id": sensor.task_id, "execution_date": execution_date,
        "state": state, "try_number": 1, "max_tries": sensor.retries,
        "start_date": None, "end_date": None, "updated_at": now,
        "operator": type(sensor).__name__, "classpath": classpath, "fileloc": fileloc,
        "hostname": None, "error": None,
        "attr_dict": attr_dict, "exec_dict": exec_dict,
        "hashcode": hashcode, "shardcode": shardcode_for(hashcode, cfg.shard_code_upper_limit),
    }
    return row, reason


def register(engine: Engine, sensors: Iterable[tuple[str, BaseSensor]], execution_date: datetime, cfg: Config,
             clear: bool = False, fileloc: str | None = None) -> list[Registered]:
    """Register (dag_id, sensor) pairs for one execution date, idempotently, in one transaction.

    An existing row is left as it is (a waiting or finished task is never reset) unless ``clear``.
    """
    built = [(build_row(sensor, dag_id, execution_date, cfg, fileloc)) for dag_id, sensor in sensors]
    out: list[Registered] = []
    with engine.begin() as conn:
        for row, reason in built:
            created = queries.insert_task(conn, row)
            state = row["state"]
            if not created:
                if clear:
                    queries.reset_task(conn, row)
                    reason = f"cleared; {reason}"
                else:
                    existing = queries.get_task(conn, row["dag_id"], row["task_id"], execution_date)
                    state = existing["state"] if existing else state
                    reason = "already registered"
            out.append(Registered(row["dag_id"], row["task_id"], execution_date, state, row["hashcode"],
                                  row["shardcode"], created, reason))
    return out
