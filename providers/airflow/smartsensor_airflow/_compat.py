"""Airflow names that moved between 2.10 and 3.x, imported from where the running Airflow has them."""

from __future__ import annotations

import functools
import importlib
from typing import Any

try:  # Airflow 3: the Task SDK
    from airflow.sdk import BaseHook, BaseSensorOperator
except ImportError:  # Airflow 2.10
    from airflow.hooks.base import BaseHook
    from airflow.sensors.base import BaseSensorOperator

from airflow.exceptions import (
    AirflowException,
    AirflowSensorTimeout,
    AirflowSkipException,
    AirflowTaskTimeout,
)
from airflow.triggers.base import BaseTrigger, StartTriggerArgs, TaskSkippedEvent, TaskSuccessEvent, TriggerEvent

try:  # Airflow 3: the Task SDK's template environments
    from airflow.sdk.definitions._internal.templater import NativeEnvironment, SandboxedEnvironment
except ImportError:  # Airflow 2.10
    from airflow.templates import NativeEnvironment, SandboxedEnvironment

try:  # Airflow 3.x: the Task SDK's view of airflow.cfg (workers may not have airflow-core's)
    from airflow.sdk.configuration import conf as airflow_conf
except ImportError:
    from airflow.configuration import conf as airflow_conf

# Where Airflow's Hive provider defines its sensors.
HIVE_SENSOR_MODULES = {
    "NamedHivePartitionSensor": "airflow.providers.apache.hive.sensors.named_hive_partition",
    "HivePartitionSensor": "airflow.providers.apache.hive.sensors.hive_partition",
    "MetastorePartitionSensor": "airflow.providers.apache.hive.sensors.metastore_partition",
}


def hive_sensor_class(name: str) -> Any:
    """Airflow's own Hive sensor class ``name``; AirflowException with the install hint when the Hive provider is
    not installed in this environment."""
    module = HIVE_SENSOR_MODULES.get(name)
    if module is None:
        raise AirflowException(f"{name} has no counterpart in Airflow's Hive provider")
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as exc:
        raise AirflowException(
            f"checking without smartsensor needs Airflow's Hive provider where the task runs "
            f"(pip install apache-airflow-providers-apache-hive): {exc}"
        ) from None


def airflow_version() -> tuple[int, int]:
    """The running Airflow's (major, minor)."""
    import airflow

    major, minor = (int(part) for part in airflow.__version__.split(".")[:2])
    return major, minor


def can_start_from_trigger() -> bool:
    """Whether this Airflow starts a task in the triggerer when it asks to (``start_from_trigger``): 2.10.x and 3.3+.
    3.0-3.2 ignore the flag (disabled by apache/airflow#54646; #55068 and #66307 brought it back in 3.3)."""
    version = airflow_version()
    return version[0] == 2 and version[1] >= 10 or version >= (3, 3)


@functools.lru_cache(maxsize=16)
def template_environment(native: bool, **options: Any) -> Any:
    """A Jinja environment of Airflow's kind: sandboxed, with Airflow's filters (``ds``, ``ts_nodash``…), native
    types when the DAG sets ``render_template_as_native_obj``; ``options`` as ``DAG.get_template_env`` passes them
    (``template_rules.environment_options``). One per process, kind and options: an environment holds no per-render
    state, and building one costs more than most renders."""
    return NativeEnvironment(**options) if native else SandboxedEnvironment(**options)


def dag_run_row(dag_id: str, run_id: str) -> tuple[Any, Any, Any, Any]:
    """Airflow 2.10 (a DB-connected triggerer): the run's logical date, data interval start and end, and conf."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        row = session.execute(
            select(DagRun.execution_date, DagRun.data_interval_start, DagRun.data_interval_end, DagRun.conf).where(
                DagRun.dag_id == dag_id, DagRun.run_id == run_id
            )
        ).one()
    return tuple(row)


def macros_module() -> Any:
    """Airflow's ``macros`` (``ds_add``, ``ds_format``…), as templates see them."""
    try:  # Airflow 3
        from airflow.sdk.execution_time import macros
    except ImportError:  # Airflow 2.10
        from airflow import macros
    return macros


class EndedSuccessEvent(TaskSuccessEvent):
    """The event a trigger ends its task with on success. On Airflow 2.10 it sends no success-callback request:
    2.10 writes one per task ended from a trigger, with no DAG folder, that no dag-processor ever fetches, so the
    rows pile up (a task with ``on_success_callback`` does not end from the trigger: it resumes on a worker, which
    runs the callback). Airflow 3 hands events to another process by their base type; this class is for 2.10."""

    def _submit_callback_if_necessary(self, *, task_instance: Any, session: Any) -> None:
        return None


def success_event() -> Any:
    """The event that ends a task with success from its trigger, on this Airflow."""
    return EndedSuccessEvent() if airflow_version()[0] == 2 else TaskSuccessEvent()


def server_connection(conn_id: str) -> Any:
    """Airflow's connection ``conn_id`` as a process of the deployment reads it (the attendant: not a task), from
    every secrets backend the deployment has, its metadata database included. Airflow 3's Task SDK reads only
    environment variables and configured backends outside a task, so its ``BaseHook`` does not see a connection
    stored in the database; airflow-core's model does, on 2.10 and 3.x alike."""
    from airflow.models.connection import Connection

    return Connection.get_connection_from_secrets(conn_id)


def sdk_serialize(value: Any) -> Any:
    """``value`` encoded with the Task SDK's serde (Airflow 3.3 stores a resumed try's ``next_kwargs`` so)."""
    from airflow.sdk.serde import serialize

    return serialize(value)


def read_variable(key: str) -> str | None:
    """Airflow Variable ``key`` as DAG-parsing code reads it (3.x: the Task SDK, through the dag-processor's
    supervisor; 2.10: the metadata database), None when it is not set."""
    try:
        from airflow.sdk import Variable
    except ImportError:
        from airflow.models import Variable

        value = Variable.get(key, default_var=None)
    else:
        value = Variable.get(key, default=None)
    return None if value is None else str(value)


def write_variable(key: str, value: str, session: Any) -> None:
    """Set Airflow Variable ``key`` as a process of the deployment (not a task) does: airflow-core's model, in
    ``session`` (encrypted with the deployment's Fernet key where it has one)."""
    from airflow.models.variable import Variable

    Variable.set(key, value, session=session)


def parsing_for_task_run() -> bool:
    """Whether this process parses DAG files to run one task (a worker: Airflow sets its parsing context, on 2.10
    and 3.x), rather than to serialize them (the dag-processor) or to test a DAG."""
    try:
        from airflow.sdk import get_parsing_context
    except ImportError:
        from airflow.utils.dag_parsing_context import get_parsing_context
    return get_parsing_context().task_id is not None


def has_listeners() -> bool:
    """Whether this process has listener plugins (OpenLineage…): Airflow refuses a DAG whose task ends from the
    triggerer then, because listeners would not hear of that end."""
    try:
        from airflow.listeners.listener import get_listener_manager
    except ImportError:
        return False
    return bool(get_listener_manager().has_listeners)


__all__ = [
    "AirflowException",
    "AirflowSensorTimeout",
    "AirflowSkipException",
    "AirflowTaskTimeout",
    "BaseHook",
    "BaseSensorOperator",
    "BaseTrigger",
    "StartTriggerArgs",
    "TaskSkippedEvent",
    "TaskSuccessEvent",
    "TriggerEvent",
    "airflow_conf",
    "airflow_version",
    "dag_run_row",
    "macros_module",
    "can_start_from_trigger",
    "template_environment",
    "has_listeners",
    "success_event",
    "hive_sensor_class",
]


def task_instance_model() -> Any:
    """Airflow's ``TaskInstance`` model (2.10 and 3.x: ``airflow.models.taskinstance``)."""
    from airflow.models.taskinstance import TaskInstance

    return TaskInstance


def serialize_value(value: Any) -> Any:
    """``value`` encoded by Airflow's serializer (``{"__type": …, "__var": …}``), as it keeps values in a serialized
    DAG."""
    from airflow.serialization.serialized_objects import BaseSerialization

    return BaseSerialization.serialize(value)


def deserialize_value(encoded: Any) -> Any:
    """A value Airflow's serializer encoded (``{"__type": …, "__var": …}``), decoded."""
    from airflow.serialization.serialized_objects import BaseSerialization

    return BaseSerialization.deserialize(encoded)


def load_note_models() -> None:
    """Airflow 2.10's task-instance note refers to the FAB auth manager's user table, whose model must be known
    before the first ORM query configures every mapper (Airflow's webserver has imported it; a scheduler or the
    attendant may not have). Airflow 3: a note's user is a plain string, nothing to load."""
    try:
        import airflow.providers.fab.auth_manager.models  # noqa: F401
    except ImportError:
        pass


def dag_run_model() -> Any:
    """Airflow's ``DagRun`` model."""
    from airflow.models.dagrun import DagRun

    return DagRun


def pool_model() -> Any:
    """Airflow's ``Pool`` model."""
    from airflow.models.pool import Pool

    return Pool


def airflow_session() -> Any:
    """Airflow's ``create_session`` (a context manager: commits on success, rolls back on error)."""
    from airflow.utils.session import create_session

    return create_session()


def serialized_dag_rows(session: Any, versions: set[Any]) -> list[tuple[Any, dict[str, Any]]]:
    """(version, the serialized DAG's JSON) for each of ``versions``: Airflow 3's DAG version ids (a try runs its
    DAG's version), or on 2.10, which keeps one version a DAG, DAG ids."""
    from airflow.models.serialized_dag import SerializedDagModel
    from sqlalchemy import select

    by_version = getattr(SerializedDagModel, "dag_version_id", None)
    column = by_version if by_version is not None else SerializedDagModel.dag_id
    rows = session.scalars(select(SerializedDagModel).where(column.in_(list(versions)))).all()
    return [(row.dag_version_id if by_version is not None else row.dag_id, row.data) for row in rows]
