"""Task endpoints for another scheduler (the Airflow provider): register one try, read many tries' states."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Callable

from fastapi import APIRouter, Depends, HTTPException
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Engine

from smartsensor.config import Config
from smartsensor.domain.keys import ExternalKey
from smartsensor.sensors.errors import SensorDefinitionError, SensorModuleUnavailable
from smartsensor.service.external import ExternalConflict, external_states, register_external

MAX_KEYS = 10_000  # keys per states request: one triggerer's deferred tasks, with room to spare


class Key(BaseModel):
    """Airflow's key of one try of a task instance."""

    model_config = ConfigDict(extra="forbid")
    dag_id: str = Field(min_length=1, max_length=250)
    task_id: str = Field(min_length=1, max_length=250)
    run_id: str = Field(min_length=1, max_length=250)
    map_index: int = Field(default=-1, ge=-1, lt=2**31)
    try_number: int = Field(ge=0, lt=2**31)

    def external(self) -> ExternalKey:
        return ExternalKey(self.dag_id, self.task_id, self.run_id, self.map_index)


class Sensor(BaseModel):
    """One sensor, by class name (an enabled @smart_eligible class) and its field values."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    class_name: str = Field(alias="class", min_length=1, max_length=250)
    persist: dict[str, Any] = Field(default_factory=dict)
    exec: dict[str, Any] = Field(default_factory=dict)


class Register(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: Key
    sensor: Sensor
    logical_date: datetime | None = None


class States(BaseModel):
    model_config = ConfigDict(extra="forbid")
    keys: list[Key] = Field(max_length=MAX_KEYS)


def tasks_router(cfg: Config, engine: Engine, authorised: Callable[..., None]) -> APIRouter:
    """``POST /tasks`` and ``POST /tasks/states`` over one engine."""
    router = APIRouter(dependencies=[Depends(authorised)])

    @router.post("/tasks")
    def register(body: Register) -> dict[str, Any]:
        """Register one try (idempotent for the same try; a newer try starts afresh). 409: an older try."""
        logical = body.logical_date
        if logical is not None and logical.tzinfo is not None:  # stored naive UTC, as every time here
            logical = logical.astimezone(timezone.utc).replace(tzinfo=None)
        try:
            done = register_external(engine, cfg, body.key.external(), body.key.try_number, body.sensor.class_name,
                                     body.sensor.persist, body.sensor.exec, logical)
        except ExternalConflict as exc:
            raise HTTPException(409, str(exc)) from None
        except SensorModuleUnavailable as exc:
            raise HTTPException(503, str(exc)) from None
        except SensorDefinitionError as exc:
            raise HTTPException(422, str(exc)) from None
        ti_dag, ti_task, ti_date = done.task_instance
        return {"key": body.key.model_dump(), "state": done.state, "error": done.error, "hashcode": done.hashcode,
                "created": done.created,
                "task_instance": {"dag_id": ti_dag, "task_id": ti_task, "execution_date": ti_date.isoformat()}}

    @router.post("/tasks/states")
    def states(body: States) -> dict[str, Any]:
        """The state of each try asked about, in order, in one request."""
        return {"states": external_states(engine, [(k.external(), k.try_number) for k in body.keys])}

    return router
