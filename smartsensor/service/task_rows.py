"""A sensor's task_instance row, as both doors build it (standalone `submit` and another scheduler's tries): its
persist and exec fields as canonical JSON (``attr_dict``, ``exec_dict``), the hashcode of its check and the
shardcode that places it in a range; and whether the shard workers here serve it at all."""

from __future__ import annotations

import json
import logging
import math
from datetime import datetime
from typing import Any

from smartsensor.config import Config
from smartsensor.domain import clock
from smartsensor.domain.hashing import canonical_json, check_hashcode, shardcode_for
from smartsensor.domain.routing import class_route
from smartsensor.domain.rows import TaskRow
from smartsensor.domain.states import State
from smartsensor.sensors.base import BaseSensor, classpath_of
from smartsensor.sensors.errors import SensorDefinitionError

log = logging.getLogger(__name__)

SERVED = "smart"  # the reason given when the shard workers serve a sensor


def _json_field(owner: str, field: str, value: Any) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SensorDefinitionError(
            f"{owner}: field {field!r} is not JSON serialisable ({type(value).__name__}): {exc}"
        ) from None


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


def served_here(sensor: BaseSensor, cfg: Config) -> tuple[bool, str]:
    """(True, "smart") when the shard workers here serve ``sensor``, else (False, why): its class's route
    (``domain/routing.class_route``: smart sensors on, @smart_eligible, enabled, loadable by the workers), then the
    instance's own ``is_smart_sensor_compatible()`` (one that raises is a no, logged)."""
    state, reason = class_route(type(sensor), cfg)
    if state != State.SMART_PENDING:
        return False, reason
    try:
        if not sensor.is_smart_sensor_compatible():
            return False, "the sensor's is_smart_sensor_compatible() returned False"
    except Exception as exc:  # noqa: BLE001 - any failure here means "not served here: run it the classic way"
        log.warning("task %s: smart registration failed, falling back to classic mode: %s", sensor.task_id, exc)
        return False, f"smart registration failed: {exc}"
    return True, SERVED


def task_row(
    sensor: BaseSensor,
    dag_id: str,
    execution_date: datetime,
    state: State,
    cfg: Config,
    fileloc: str | None = None,
) -> TaskRow:
    """The first try's task_instance row of ``sensor`` (its persist fields final: rendered and validated) in DAG
    ``dag_id`` on ``execution_date``, in ``state``. Raises SensorDefinitionError, naming the field, for a field
    that is not JSON."""
    attr_dict, exec_dict = serialise(sensor)
    classpath = classpath_of(type(sensor))
    hashcode = check_hashcode(classpath, attr_dict)
    return TaskRow(
        dag_id=dag_id,
        task_id=sensor.task_id,
        execution_date=execution_date,
        state=state,
        try_number=1,
        max_tries=sensor.retries,
        start_date=None,
        end_date=None,
        updated_at=clock.now(),
        operator=type(sensor).__name__,
        classpath=classpath,
        fileloc=fileloc,
        hostname=None,
        error=None,
        attr_dict=attr_dict,
        exec_dict=exec_dict,
        hashcode=hashcode,
        shardcode=shardcode_for(hashcode, cfg.shard_code_upper_limit),
    )
