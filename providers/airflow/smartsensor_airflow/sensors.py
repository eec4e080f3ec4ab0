"""Drop-in sensors: the constructor arguments of Airflow's Hive provider sensors, but each task registers its
wait with smartsensor and defers, so identical waits are checked once per partition by the service.

Change the import line and nothing else::

    from smartsensor_airflow.sensors import NamedHivePartitionSensor, HivePartitionSensor, SuccessFileSensor

Extra arguments:

- ``smartsensor_conn_id``: an Airflow connection whose host is the service's URL and whose password is its token.
- ``smartsensor_poll_interval``: how often the triggerer asks the service (default the shorter of
  ``poke_interval`` and 10 s).
- ``smartsensor_execute_wait``: seconds ``execute`` waits for the service's answer before deferring (default 2;
  0 defers at once). A partition that is already there ends the task in ``execute``: it never defers.
- ``end_from_trigger``: end the task from the triggerer on success or skip (default: yes, unless the process has
  listener plugins, which Airflow does not let hear such an end).
- ``smartsensor_resume_settle``: seconds a task resumed on a worker waits after its trigger started (default 5;
  the guard against Airflow's deferral race where the task does not end from the triggerer).

The service checks with its own metastore: ``metastore_conn_id`` is accepted (and templated) for compatibility
and not used. ``mode`` and ``deferrable`` are accepted and ignored: these sensors always defer. Sensor semantics
are Airflow's: ``timeout`` fails the task for good (``AirflowSensorTimeout``, no retries), ``soft_fail`` skips it,
``execution_timeout`` and errors leave it to Airflow's retries.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any, ClassVar, Sequence

from smartsensor_airflow._compat import (
    AirflowException,
    AirflowSensorTimeout,
    AirflowSkipException,
    AirflowTaskTimeout,
    BaseHook,
    BaseSensorOperator,
    has_listeners,
)
from smartsensor_airflow.client import (
    TERMINAL,
    ApiError,
    endpoint_from_connection,
    held_state,
    is_timeout,
    register_try,
)
from smartsensor_airflow.hive_filter import UnsupportedPartitionFilter, parse_partition_filter
from smartsensor_airflow.triggers import RESUME_SETTLE, SmartSensorTrigger

DEFAULT_CONN_ID = "smartsensor_default"
DEFAULT_POLL_INTERVAL = 10.0
DEFAULT_EXECUTE_WAIT = 2.0


class SmartSensorOperator(BaseSensorOperator):
    """Registers this try with smartsensor, then defers until the service reports a terminal state.

    Airflow owns retries (the service registers each try with retries=0) and its own timeout is passed to
    ``defer`` as a backstop, a little after the service's timeout, so the service's verdict (failed, or
    skipped with soft_fail) normally arrives first with its reason. Before deferring, ``execute`` holds one
    states request for up to ``smartsensor_execute_wait`` seconds: a check that is already answered ends the task
    there, without a deferral (the commonest case: reruns, backfills, late DAGs).
    """

    smartsensor_class: ClassVar[str]  # the class name smartsensor knows this check by

    def __init__(
        self,
        *,
        smartsensor_conn_id: str = DEFAULT_CONN_ID,
        smartsensor_poll_interval: float | None = None,
        smartsensor_execute_wait: float = DEFAULT_EXECUTE_WAIT,
        end_from_trigger: bool | None = None,
        smartsensor_resume_settle: float = RESUME_SETTLE,
        deferrable: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.smartsensor_conn_id = smartsensor_conn_id
        interval = DEFAULT_POLL_INTERVAL if smartsensor_poll_interval is None else smartsensor_poll_interval
        self.smartsensor_poll_interval = float(min(interval, float(self.poke_interval)))
        self.smartsensor_execute_wait = max(0.0, float(smartsensor_execute_wait))
        self.end_from_trigger = (not has_listeners()) if end_from_trigger is None else bool(end_from_trigger)
        self.smartsensor_resume_settle = max(0.0, float(smartsensor_resume_settle))

    def persist_values(self) -> dict[str, Any]:
        """The rendered arguments smartsensor's sensor class of the same name stores."""
        raise NotImplementedError

    def exec_values(self) -> dict[str, Any]:
        """How the service runs the wait (its exec fields)."""
        values: dict[str, Any] = {
            "poke_interval": float(self.poke_interval),
            "timeout": float(self.timeout),
            "soft_fail": bool(self.soft_fail),
            "exponential_backoff": bool(self.exponential_backoff),
        }
        max_wait = getattr(self, "max_wait", None)
        if max_wait is not None:
            values["max_wait"] = max_wait.total_seconds() if isinstance(max_wait, timedelta) else float(max_wait)
        return values

    def poke(self, context: Any) -> bool:
        raise AirflowException(f"{type(self).__name__} does not poke: it defers to smartsensor (execute)")

    def execute(self, context: Any) -> Any:
        started = time.time()
        ti = context["ti"]
        key = {
            "dag_id": ti.dag_id,
            "task_id": ti.task_id,
            "run_id": ti.run_id,
            "map_index": ti.map_index if ti.map_index is not None else -1,
            "try_number": ti.try_number,
        }
        # Errors leave the task to Airflow's retries, as an error in the poke of Airflow's own sensor does (a bad
        # partition name there is a ValueError at each try).
        try:
            persist = self.persist_values()
        except (UnsupportedPartitionFilter, TypeError) as exc:
            raise AirflowException(str(exc)) from None
        try:
            endpoint = endpoint_from_connection(
                BaseHook.get_connection(self.smartsensor_conn_id), self.smartsensor_conn_id
            )
            answer = register_try(
                endpoint, key, self.smartsensor_class, persist, self.exec_values(), context.get("logical_date")
            )
            if answer["state"] not in TERMINAL and self.smartsensor_execute_wait > 0:
                held = held_state(endpoint, key, self.smartsensor_execute_wait)
                if held is not None:
                    answer = {**answer, "state": held["state"], "error": held.get("error")}
        except ApiError as exc:
            raise AirflowException(str(exc)) from None
        self.log.info(
            "smartsensor: registered %s try %s as hash %s (%s)",
            self.smartsensor_class,
            key["try_number"],
            answer["hashcode"],
            answer["state"],
        )
        if answer["state"] in TERMINAL:
            return self.execute_complete(
                context,
                {"state": answer["state"], "error": answer["error"], "hashcode": answer["hashcode"], "key": key},
            )
        backstop = timedelta(seconds=float(self.timeout) + max(60.0, 3 * self.smartsensor_poll_interval))
        self.defer(
            trigger=SmartSensorTrigger(
                key,
                self.smartsensor_conn_id,
                self.smartsensor_poll_interval,
                end_from_trigger=self.end_from_trigger,
                settle=self.smartsensor_resume_settle,
                deadline=None if self.execution_timeout is None else started + self.execution_timeout.total_seconds(),
            ),
            method_name="execute_complete",
            timeout=backstop,
        )

    def execute_complete(self, context: Any, event: dict[str, Any] | str) -> None:
        """Success ends the task; skipped raises AirflowSkipException; a timeout AirflowSensorTimeout (no retries,
        as Airflow's sensors); anything else AirflowException with the reason (Airflow's retries apply)."""
        if isinstance(event, str):  # `airflow dags test` resumes a task-end event with its state instead of ending
            event = {"state": str(getattr(event, "value", event))}
        state, error = event["state"], event.get("error")
        if state == "success":
            self.log.info("smartsensor: landed (hash %s)", event.get("hashcode"))
            return None
        if state == "skipped":
            raise AirflowSkipException(f"smartsensor: skipped: {error or 'no reason given'}")
        if is_timeout(event):
            raise AirflowSensorTimeout(f"smartsensor: {error}")
        if state == "execution_timeout":
            raise AirflowTaskTimeout(f"smartsensor: the try reached its execution_timeout ({self.execution_timeout})")
        reasons = {
            "superseded": "a newer try of this task was registered",
            "unknown": "the service has no record of this try (was its database reset?)",
        }
        raise AirflowException(f"smartsensor: the wait ended {state}: {error or reasons.get(state, 'no reason given')}")


class NamedHivePartitionSensor(SmartSensorOperator):
    """Waits for every partition in ``partition_names`` (``"db.table/ds=2026-11-22"``; no ``db.`` means
    ``default``), like ``airflow.providers.apache.hive.sensors.named_hive_partition.NamedHivePartitionSensor``."""

    smartsensor_class = "NamedHivePartitionSensor"
    template_fields: Sequence[str] = ("partition_names",)
    ui_color = "#8d99ae"

    def __init__(
        self,
        *,
        partition_names: list[str],
        metastore_conn_id: str = "metastore_default",
        poke_interval: float = 60 * 3,
        hook: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(poke_interval=poke_interval, **kwargs)
        # A string is checked once rendered: a whole-list template ("{{ params.parts }}" with
        # render_template_as_native_obj) is a string until then (Hive provider 9.6.1+).
        self.partition_names = partition_names
        self.metastore_conn_id = metastore_conn_id
        self.hook = hook

    @staticmethod
    def parse_partition_name(partition: str) -> tuple[str, str, str]:
        """``"db.table/ds=1"`` → ``("db", "table", "ds=1")`` (no ``db.``: ``default``), as the Hive provider's."""
        first = partition.split(".", 1)
        schema, table_partition = ("default", first[0]) if len(first) == 1 else (first[0], first[1])
        table, sep, spec = table_partition.partition("/")
        if not sep:
            raise ValueError(f"Could not parse {partition} into table, partition")
        return schema, table, spec

    def persist_values(self) -> dict[str, Any]:
        if isinstance(self.partition_names, str):
            raise TypeError("partition_names must be an array of strings")
        return {"partition_names": list(self.partition_names)}


class HivePartitionSensor(SmartSensorOperator):
    """Waits for a partition of ``schema.table`` matching ``partition`` (equalities joined by AND, e.g.
    ``"ds='{{ ds }}'"``), like ``airflow.providers.apache.hive.sensors.hive_partition.HivePartitionSensor``."""

    smartsensor_class = "HivePartitionSensor"
    template_fields: Sequence[str] = ("schema", "table", "partition", "metastore_conn_id")
    ui_color = "#C5CAE9"

    def __init__(
        self,
        *,
        table: str,
        partition: str | None = "ds='{{ ds }}'",
        metastore_conn_id: str = "metastore_default",
        schema: str = "default",
        poke_interval: float = 60 * 3,
        **kwargs: Any,
    ) -> None:
        super().__init__(poke_interval=poke_interval, **kwargs)
        self.table = table
        self.partition = partition or "ds='{{ ds }}'"  # as the Hive provider's: no partition means the run's day
        self.schema = schema
        self.metastore_conn_id = metastore_conn_id

    def persist_values(self) -> dict[str, Any]:
        table = self.table if "." in self.table else f"{self.schema}.{self.table}"
        return {"table": table, "partition": parse_partition_filter(self.partition)}


class SuccessFileSensor(SmartSensorOperator):
    """Waits until ``path`` exists (``file://``, ``hdfs://``, ``s3a://``… as the service's Spark resolves it)."""

    smartsensor_class = "SuccessFileSensor"
    template_fields: Sequence[str] = ("path",)
    ui_color = "#e0d6b8"

    def __init__(self, *, path: str, poke_interval: float = 60, **kwargs: Any) -> None:
        super().__init__(poke_interval=poke_interval, **kwargs)
        self.path = path

    def persist_values(self) -> dict[str, Any]:
        return {"path": self.path}
