"""Drop-in sensors: the constructor arguments of Airflow's Hive provider sensors, but each task registers its
wait with smartsensor and defers, so identical waits are checked once per partition by the service.

Change the import line and nothing else (or change nothing: the cluster policy, ``smartsensor_airflow.policy``,
makes Airflow's own Hive sensors behave as these)::

    from smartsensor_airflow.sensors import (
        HivePartitionSensor, MetastorePartitionSensor, NamedHivePartitionSensor, SuccessFileSensor,
    )

Extra arguments:

- ``smartsensor_conn_id``: an Airflow connection whose host is the service's URL and whose password is its token.
- ``smartsensor_poll_interval``: how often the triggerer asks the service (default the shorter of
  ``poke_interval`` and 10 s).
- ``smartsensor_execute_wait``: seconds ``execute`` waits for the service's answer before deferring (default 2;
  0 defers at once). A partition that is already there ends the task in ``execute``: it never defers.
- ``end_from_trigger``: end the task from the triggerer on success or skip (default: yes, unless the process has
  listener plugins, which Airflow does not let hear such an end, or the task has an ``on_success_callback``, which
  Airflow does not run for such an end: the task then resumes on a worker to end, and the callback runs there).
- ``smartsensor_resume_settle``: seconds a task resumed on a worker waits after its trigger started (default 5;
  the guard against Airflow's deferral race where the task does not end from the triggerer).
- ``smartsensor_fallback_grace``: seconds the service may be out of reach (no answer, or 502/503/504) before the
  try checks on its own, as Airflow's sensor would (default 120; below 0: never, the try fails instead).
- ``smartsensor_start_from_trigger``: start each try in the triggerer where Airflow can (default: yes; see
  ``start.py`` for when it cannot), so that no worker runs the task; False keeps every try on the ``execute``
  path below.
- ``smartsensor_park``: park each try in the parking pool for the parking attendant (``start.py``), no trigger
  and no worker; default None: as ``[smartsensor] park`` says (``auto``, its default: while an attendant runs). A
  task whose check the attendant cannot render starts in the triggerer instead.

The service checks with its own metastore: ``metastore_conn_id`` (and ``mysql_conn_id``) are accepted, templated
as Airflow's, and used only by the safety valve, which checks through Airflow's own sensor of the same class.
``mode`` and ``deferrable`` are accepted and ignored: these sensors always defer. Sensor semantics are Airflow's:
``timeout`` fails the task for good (``AirflowSensorTimeout``, no retries), ``soft_fail`` skips it,
``execution_timeout`` and errors leave it to Airflow's retries.
"""

from __future__ import annotations

import sys
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
    hive_sensor_class,
)
from smartsensor_airflow.checks import check_of
from smartsensor_airflow.client import (
    REGISTER_PATIENCE,
    TERMINAL,
    TIMEOUT,
    ApiError,
    endpoint_from_connection,
    is_timeout,
    outcome,
    register_try,
)
from smartsensor_airflow.fallback import DEFAULT_GRACE, seconds_left, try_start, wait_classically
from smartsensor_airflow.hive_filter import UnsupportedPartitionFilter
from smartsensor_airflow.start import PARKED_FIELD, ParkedCheck, ParkingPool, StartsInTriggerer
from smartsensor_airflow.triggers import EXECUTE_ON_WORKER, RESUME_SETTLE, UNREACHABLE, SmartSensorTrigger
from smartsensor_airflow.wire import TryKey

DEFAULT_CONN_ID = "smartsensor_default"
DEFAULT_POLL_INTERVAL = 10.0
DEFAULT_EXECUTE_WAIT = 2.0
# Airflow resumes a deferred task with this method when its scheduler timed the trigger out, with one of these errors
# (3.x; 2.10). Either the try's execution_timeout or the trigger's own timeout (``smartsensor_backstop``) passed.
TRIGGER_FAILED = "__fail__"
TRIGGER_TIMEOUT_ERRORS = ("Trigger timeout", "Trigger/execution timeout")


# The drop-ins' own constructor arguments, as smartsensor_setup takes them.
SMARTSENSOR_ARGUMENTS = (
    "smartsensor_conn_id",
    "smartsensor_poll_interval",
    "smartsensor_execute_wait",
    "end_from_trigger",
    "smartsensor_resume_settle",
    "smartsensor_fallback_grace",
    "smartsensor_start_from_trigger",
    "smartsensor_park",
)


class SmartSensorMixin:
    """The smartsensor behaviour of a sensor task: ``execute`` registers this try with the service and ends or
    defers; ``execute_complete`` ends the task as Airflow's own sensor would. Mixed into the drop-ins below and
    into the classes the cluster policy routes (``smartsensor_airflow.policy``); both read the check from the
    task's own attributes (``checks.check_of``).

    Airflow owns retries (the service registers each try with retries=0) and its own timeout is passed to
    ``defer`` as a backstop, a little after the service's timeout, so the service's verdict (failed, or
    skipped with soft_fail) normally arrives first with its reason. ``execute`` asks the service to hold the
    answer to its registration for up to ``smartsensor_execute_wait`` seconds: a check that is already answered
    ends the task there, without a deferral (the commonest case: reruns, backfills, late DAGs). When the service
    is out of reach for longer than ``smartsensor_fallback_grace``, the try checks on its own (``poke``, the
    safety valve).
    """

    smartsensor_class: ClassVar[str]  # Airflow's sensor class whose check this is (a key of checks.CHECKS)
    # How the task came to run through smartsensor: "drop-in" (its DAG imports it) or "cluster policy".
    smartsensor_route: ClassVar[str] = "drop-in"

    # Set by smartsensor_setup (annotated for type checkers; BaseSensorOperator provides the rest).
    smartsensor_conn_id: str
    smartsensor_poll_interval: float
    smartsensor_execute_wait: float
    end_from_trigger: bool
    smartsensor_resume_settle: float
    smartsensor_fallback_grace: float
    smartsensor_start_from_trigger: bool
    smartsensor_park: bool | None
    # What Airflow reads to start a try in the triggerer (start.py), computed from the task when read.
    start_from_trigger = StartsInTriggerer()
    start_trigger_args = StartsInTriggerer()
    pool = ParkingPool()  # the parking pool when its tries park ([smartsensor] park), else the task's own
    smartsensor_parked = ParkedCheck()  # a parked task's check, for the attendant (start.PARKED_FIELD)
    poke_interval: Any
    timeout: Any
    soft_fail: bool
    exponential_backoff: bool
    execution_timeout: timedelta | None
    log: Any

    def smartsensor_values(
        self,
        *,
        smartsensor_conn_id: str = DEFAULT_CONN_ID,
        smartsensor_poll_interval: float | None = None,
        smartsensor_execute_wait: float = DEFAULT_EXECUTE_WAIT,
        end_from_trigger: bool | None = None,
        smartsensor_resume_settle: float = RESUME_SETTLE,
        smartsensor_fallback_grace: float = DEFAULT_GRACE,
        smartsensor_start_from_trigger: bool = True,
        smartsensor_park: bool | None = None,
    ) -> dict[str, Any]:
        """The attributes ``smartsensor_setup`` sets, computed from the task without changing it: whatever raises
        here (a ``poke_interval`` that is not a number, Airflow's listener look-up) raises before any change."""
        interval = DEFAULT_POLL_INTERVAL if smartsensor_poll_interval is None else smartsensor_poll_interval
        if end_from_trigger is None:  # Airflow runs neither listeners nor on_success_callback for such an end
            end_from_trigger = not has_listeners() and not getattr(self, "on_success_callback", None)
        return {
            "smartsensor_conn_id": smartsensor_conn_id,
            "smartsensor_poll_interval": float(min(float(interval), float(self.poke_interval))),
            "smartsensor_execute_wait": max(0.0, float(smartsensor_execute_wait)),
            "end_from_trigger": bool(end_from_trigger),
            "smartsensor_resume_settle": max(0.0, float(smartsensor_resume_settle)),
            "smartsensor_fallback_grace": float(smartsensor_fallback_grace),
            "smartsensor_start_from_trigger": bool(smartsensor_start_from_trigger),
            "smartsensor_park": None if smartsensor_park is None else bool(smartsensor_park),
        }

    def smartsensor_setup(self, **arguments: Any) -> None:
        """Set the smartsensor arguments (the drop-ins' extra constructor arguments, ``SMARTSENSOR_ARGUMENTS``; the
        policy's settings), all computed first (``smartsensor_values``), so that a bad one changes nothing."""
        for name, value in self.smartsensor_values(**arguments).items():
            setattr(self, name, value)

    @classmethod
    def get_serialized_fields(cls) -> frozenset[str]:
        """Airflow's serialized fields of the task, and the check a parked task carries (``start.parked_check``)."""
        return super().get_serialized_fields() | {PARKED_FIELD}  # type: ignore[misc]

    def persist_values(self) -> dict[str, Any]:
        """The rendered arguments smartsensor's sensor class stores."""
        return check_of(self.smartsensor_class, self)[1]

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

    def execute(self, context: Any) -> Any:
        started = time.time()
        ti = context["ti"]
        key = TryKey(ti.dag_id, ti.task_id, ti.run_id, ti.map_index if ti.map_index is not None else -1, ti.try_number)
        try:
            registered_as, persist = check_of(self.smartsensor_class, self)
        except (UnsupportedPartitionFilter, TypeError) as exc:
            return self.cannot_check(context, exc)
        self.log.info(
            "smartsensor: this %s runs through smartsensor (%s; connection %r)",
            self.smartsensor_class,
            self.smartsensor_route,
            self.smartsensor_conn_id,
        )
        try:
            endpoint = endpoint_from_connection(
                BaseHook.get_connection(self.smartsensor_conn_id), self.smartsensor_conn_id
            )
            answer = register_try(
                endpoint,
                key,
                registered_as,
                persist,
                self.exec_values(),
                context.get("logical_date"),
                patience=max(REGISTER_PATIENCE, self.smartsensor_fallback_grace),
                wait=self.smartsensor_execute_wait,
            )
        except ApiError as exc:
            if exc.transient and self.smartsensor_fallback_grace >= 0:
                return self.fall_back(context, str(exc))
            raise AirflowException(str(exc)) from None
        self.log.info(
            "smartsensor: registered %s try %s as hash %s (%s)",
            registered_as,
            key.try_number,
            answer.hashcode,
            answer.state,
        )
        if answer.state in TERMINAL:
            return self.execute_complete(
                context,
                {**outcome(answer), "hashcode": answer.hashcode, "key": key.to_json()},
            )
        backstop = self.smartsensor_backstop()
        self.defer(  # type: ignore[attr-defined]
            trigger=SmartSensorTrigger(
                answer.asked(key),
                self.smartsensor_conn_id,
                self.smartsensor_poll_interval,
                end_from_trigger=self.end_from_trigger,
                settle=self.smartsensor_resume_settle,
                deadline=None if self.execution_timeout is None else started + self.execution_timeout.total_seconds(),
                fallback_grace=self.smartsensor_fallback_grace,
                try_started=_try_started(ti, started),
            ),
            method_name="execute_complete",
            timeout=backstop,
        )

    def smartsensor_backstop(self) -> timedelta:
        """The timeout Airflow gives the trigger: a little after the service's own verdict (the task's ``timeout``),
        which carries the reason; Airflow applies it only if the service never answered."""
        return timedelta(seconds=float(self.timeout) + max(60.0, 3 * self.smartsensor_poll_interval))

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Any) -> Any:
        """As Airflow's, but for a trigger that Airflow's scheduler timed out. It does so at the try's
        ``execution_timeout`` (when the task started in the triggerer, or on 2.10), racing the trigger's own event
        for it; Airflow 3's sensors would then fail the task for good (``AirflowSensorTimeout``). Whichever comes
        first, the try ends as ``execution_timeout`` does (``AirflowTaskTimeout``: retries apply), and a backstop
        that passed as the sensor's ``timeout`` does (no retries); ``soft_fail`` skips in both cases."""
        if next_method == TRIGGER_FAILED and (next_kwargs or {}).get("error") in TRIGGER_TIMEOUT_ERRORS:
            event = self.trigger_timed_out()
            self.log.info("smartsensor: Airflow timed the trigger out: %s", event["error"])
            next_method, next_kwargs = "execute_complete", {"event": event}
        return super().resume_execution(next_method, next_kwargs, context)  # type: ignore[misc]

    def trigger_timed_out(self) -> dict[str, Any]:
        """The event a trigger timed out by Airflow stands for: the try's ``execution_timeout`` when it is the
        shorter of the two timeouts Airflow applies, else the backstop, a timeout of the sensor."""
        limit, backstop = self.execution_timeout, self.smartsensor_backstop()
        if limit is not None and limit <= backstop:
            return {"state": "execution_timeout", "error": f"the try reached its execution_timeout ({limit})"}
        return {
            "state": "failed",
            "reason": TIMEOUT,
            "error": f"no answer from the service within the sensor's timeout ({backstop})",
        }

    def cannot_check(self, context: Any, exc: Exception) -> Any:
        """Rendered arguments smartsensor cannot check (a filter with OR or ranges, a string for a list): a
        drop-in fails the try (Airflow's retries apply, as an error in the poke of Airflow's own sensor does)."""
        raise AirflowException(str(exc))

    def fall_back(self, context: Any, why: str, try_started: float | None = None) -> None:
        """The safety valve: check on our own (``poke``) until the partition is there or the timeout passes,
        counted from the try's start (``try_started``: epoch seconds a resuming trigger carried, see
        ``fallback.try_start``)."""
        wait_classically(
            lambda: bool(self.poke(context)),  # type: ignore[attr-defined]
            poke_interval=float(self.poke_interval),
            left=self.valve_seconds_left(context, try_started),
            soft_fail=bool(self.soft_fail),
            why=why,
            task=f"{context['ti'].task_id} ({self.smartsensor_class})",
            logger=self.log,
        )

    def valve_seconds_left(self, context: Any, try_started: float | None = None) -> float:
        """What the safety valve has left of the sensor's ``timeout``, counted from the try's first start."""
        return seconds_left(float(self.timeout), try_start(getattr(context["ti"], "start_date", None), try_started))

    def execute_complete(self, context: Any, event: dict[str, Any] | str) -> None:
        """Success ends the task; skipped raises AirflowSkipException; a timeout AirflowSensorTimeout (no retries,
        as Airflow's sensors); an unreachable service the safety valve; anything else AirflowException with the
        reason (Airflow's retries apply)."""
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
            if self.soft_fail:  # as Airflow's sensor skips a poke that its execution_timeout interrupted
                raise AirflowSkipException("smartsensor: the try reached its execution_timeout; soft_fail skips it")
            raise AirflowTaskTimeout(f"smartsensor: the try reached its execution_timeout ({self.execution_timeout})")
        if state == UNREACHABLE:
            return self.fall_back(context, str(error), event.get("try_started"))
        if state == EXECUTE_ON_WORKER:  # started in the triggerer, which could not read the check
            self.log.info("smartsensor: %s; this try runs its execute on the worker", error)
            return SmartSensorMixin.execute(self, context)
        reasons = {
            "superseded": "a newer try of this task was registered",
            "unknown": "the service has no record of this try (was its database reset?)",
        }
        raise AirflowException(f"smartsensor: the wait ended {state}: {error or reasons.get(state, 'no reason given')}")


class SmartSensorOperator(SmartSensorMixin, BaseSensorOperator):
    """A drop-in: Airflow's constructor arguments plus smartsensor's own (see the module's docstring)."""

    # In the class's own namespace, so that Airflow's operator metaclass wraps it as every operator's execute
    # (Airflow 2.10 passes the wrapper a `<Class>__sentinel` argument that only the wrapper accepts).
    execute = SmartSensorMixin.execute

    def __init__(self, *, deferrable: bool = True, **kwargs: Any) -> None:
        """Airflow's arguments, and smartsensor's own (``SMARTSENSOR_ARGUMENTS``: see ``smartsensor_setup``)."""
        ours = {name: kwargs.pop(name) for name in SMARTSENSOR_ARGUMENTS if name in kwargs}
        super().__init__(**kwargs)
        self.smartsensor_setup(**ours)

    def poke(self, context: Any) -> bool:
        """One check the way Airflow's own sensor of this class does it (the safety valve's): needs Airflow's Hive
        provider installed where the task runs."""
        return bool(airflows_sensor(self).poke(context))

    def airflow_extra_args(self, cls: type) -> dict[str, Any]:
        """Arguments Airflow's class ``cls`` needs beyond the drop-in's own (none but for one provider's bug)."""
        return {}


def airflows_sensor(task: Any) -> Any:
    """Airflow's own Hive sensor with a drop-in's arguments (built once per task, on the first fallback poke)."""
    built = getattr(task, "_airflows_sensor", None)
    if built is None:
        cls = hive_sensor_class(task.smartsensor_class)
        args = {name: getattr(task, name) for name in task.airflow_args}
        built = cls(task_id=task.task_id, poke_interval=task.poke_interval, **args, **task.airflow_extra_args(cls))
        task._airflows_sensor = built
    return built


class NamedHivePartitionSensor(SmartSensorOperator):
    """Waits for every partition in ``partition_names`` (``"db.table/ds=2026-11-22"``; no ``db.`` means
    ``default``), like ``airflow.providers.apache.hive.sensors.named_hive_partition.NamedHivePartitionSensor``."""

    smartsensor_class = "NamedHivePartitionSensor"
    airflow_args: ClassVar[tuple[str, ...]] = ("partition_names", "metastore_conn_id", "hook")
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
        self.next_index_to_poke = 0
        self.hook = hook

    @staticmethod
    def parse_partition_name(partition: str) -> tuple[str, str, str]:
        """``"db.table/ds=1"`` → ``("db", "table", "ds=1")`` (no ``db.``: ``default``), as the Hive provider's."""
        first = partition.split(".", 1)
        schema, table_partition = ("default", first[0]) if len(first) == 1 else (first[0], first[1])
        table, sep, spec = table_partition.partition("/")
        if not sep:  # Airflow's message, its missing space included (the Hive provider's tests match it)
            raise ValueError(f"Could not parse {partition}into table, partition")
        return schema, table, spec

    def poke_partition(self, partition: str) -> Any:
        """Whether one named partition is there, asked the way the Hive provider's sensor asks (its hook)."""
        return airflows_sensor(self).poke_partition(partition)


class HivePartitionSensor(SmartSensorOperator):
    """Waits for a partition of ``schema.table`` matching ``partition`` (equalities joined by AND, e.g.
    ``"ds='{{ ds }}'"``), like ``airflow.providers.apache.hive.sensors.hive_partition.HivePartitionSensor``."""

    smartsensor_class = "HivePartitionSensor"
    airflow_args: ClassVar[tuple[str, ...]] = ("table", "partition", "schema", "metastore_conn_id")
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


class MetastorePartitionSensor(SmartSensorOperator):
    """Waits for the partition named ``partition_name`` (its full name, ``"ds=2026-11-22"`` or
    ``"ds=2026-11-22/hr=00"``) of ``schema.table``, like
    ``airflow.providers.apache.hive.sensors.metastore_partition.MetastorePartitionSensor``. Airflow's reads the
    metastore's database through ``mysql_conn_id``; smartsensor checks through its own catalog, and registers the
    wait as a one-partition NamedHivePartitionSensor (the same wait of either class shares one check).
    Airflow's is a ``SqlSensor``: its ``conn_id`` (``mysql_conn_id`` unless given), ``sql``, ``parameters`` and
    ``hook_params`` are accepted and templated as there; ``conn_id`` and ``hook_params`` are kept for the safety
    valve, which checks the way Airflow's sensor does (with its own SQL)."""

    smartsensor_class = "MetastorePartitionSensor"
    airflow_args: ClassVar[tuple[str, ...]] = ("table", "partition_name", "schema", "conn_id", "hook_params")
    template_fields: Sequence[str] = (
        "sql",
        "hook_params",
        "parameters",
        "conn_id",
        "partition_name",
        "table",
        "schema",
    )
    ui_color = "#8da7be"

    def __init__(
        self,
        *,
        table: str,
        partition_name: str,
        schema: str = "default",
        mysql_conn_id: str = "metastore_mysql",
        conn_id: str | None = None,
        sql: str = "",
        parameters: Any = None,
        hook_params: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)  # poke_interval: BaseSensorOperator's default (60 s), as Airflow's
        self.table = table
        self.partition_name = partition_name
        self.schema = schema
        self.mysql_conn_id = mysql_conn_id
        self.conn_id = mysql_conn_id if conn_id is None else conn_id  # a given conn_id wins, as in the Hive provider
        self.sql = sql
        self.parameters = parameters
        self.hook_params = hook_params

    def airflow_extra_args(self, cls: type) -> dict[str, Any]:
        # Older Hive providers (9.1.4, what pip installs beside Airflow 2.10.5) do not pass its SqlSensor's
        # required sql on: the constructor fails without it, and the first poke sets the SQL.
        if hasattr(sys.modules[cls.__module__], "_METASTORE_PARTITION_SQL"):
            return {}
        return {"sql": "SELECT 1"}


class SuccessFileSensor(SmartSensorOperator):
    """Waits until ``path`` exists (``file://``, ``hdfs://``, ``s3a://``… as the service's Spark resolves it)."""

    smartsensor_class = "SuccessFileSensor"
    airflow_args: ClassVar[tuple[str, ...]] = ()
    template_fields: Sequence[str] = ("path",)
    ui_color = "#e0d6b8"

    def __init__(self, *, path: str, poke_interval: float = 60, **kwargs: Any) -> None:
        super().__init__(poke_interval=poke_interval, **kwargs)
        self.path = path

    def poke(self, context: Any) -> bool:
        raise AirflowException(
            "SuccessFileSensor has no Airflow counterpart to check on its own: it waits for smartsensor "
            "(set smartsensor_fallback_grace=-1 to make that explicit)"
        )


def _try_started(ti: Any, started: float) -> float:
    """Epoch seconds this try started: the earlier of ``ti.start_date`` and when ``execute`` began."""
    first = try_start(getattr(ti, "start_date", None), started)
    return started if first is None else first.timestamp()
