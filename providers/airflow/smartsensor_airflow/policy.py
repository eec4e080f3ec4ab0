"""The cluster policy: switch smartsensor on for every DAG from Airflow's configuration, without touching a DAG.

A platform team re-exports the policy from ``airflow_local_settings.py`` (``$AIRFLOW_HOME/config/``)::

    from smartsensor_airflow.policy import task_policy

and enables it in ``airflow.cfg`` (or with ``AIRFLOW__SMARTSENSOR__…`` variables), on every host that parses DAG
files: the scheduler or dag-processor, and the workers (Airflow runs the policy wherever it loads a DAG file)::

    [smartsensor]
    use_smart_sensor = True
    sensors_enabled = NamedHivePartitionSensor, HivePartitionSensor, MetastorePartitionSensor
    conn_id = smartsensor_default
    poll_interval = 10
    execute_wait = 2
    fallback_grace = 120
    start_from_trigger = True

Each task of an enabled class of Airflow's Hive provider (the class itself, not a subclass) then behaves as its
drop-in (``smartsensor_airflow.sensors``) with its own arguments, as rendered: it keeps its class, attributes,
``template_fields`` and methods (``parse_partition_name``, ``poke``), and gains the drop-in's ``execute``. Its
operator shows as ``NamedHivePartitionSensor via smartsensor`` in the UI, and its log says so. A
``HivePartitionSensor`` whose filter smartsensor cannot check (OR, ranges) runs as Airflow's own, with a log line.

Opting out: a DAG tagged ``smartsensor:off``, or a task (or DAG) with the param ``smartsensor`` set to false.
Disabled (the default), or with a setting it cannot read (logged as an error), the policy changes nothing. Nor
does it change a task whose smartsensor arguments cannot be computed (a ``poke_interval`` that is not a number,
say): every value is computed before the task's class is swapped, and the swap is undone if setting them fails, so
no task is ever left half-configured (logged; the task runs as Airflow's own).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from smartsensor_airflow._compat import HIVE_SENSOR_MODULES, airflow_conf
from smartsensor_airflow.fallback import DEFAULT_GRACE
from smartsensor_airflow.sensors import (
    DEFAULT_CONN_ID,
    DEFAULT_EXECUTE_WAIT,
    DEFAULT_POLL_INTERVAL,
    SmartSensorMixin,
)
from smartsensor_airflow.triggers import RESUME_SETTLE

log = logging.getLogger(__name__)

SECTION = "smartsensor"
OPT_OUT_TAG = "smartsensor:off"
OPT_OUT_PARAM = "smartsensor"
ROUTABLE = tuple(HIVE_SENSOR_MODULES)
_FALSE = {"false", "off", "no", "0", ""}


class PolicySettingError(ValueError):
    """A ``[smartsensor]`` setting the policy cannot use; the message names it."""


@dataclass(frozen=True)
class PolicySettings:
    """The ``[smartsensor]`` section of Airflow's configuration."""

    enabled: bool = False
    sensors_enabled: frozenset[str] = frozenset(ROUTABLE)
    conn_id: str = DEFAULT_CONN_ID
    poll_interval: float = DEFAULT_POLL_INTERVAL
    execute_wait: float = DEFAULT_EXECUTE_WAIT
    fallback_grace: float = DEFAULT_GRACE
    resume_settle: float = RESUME_SETTLE
    start_from_trigger: bool = True

    @classmethod
    def read(cls, conf: Any = None) -> PolicySettings:
        """The settings from ``conf`` (Airflow's); PolicySettingError naming the bad one."""
        conf = airflow_conf if conf is None else conf

        def get(name: str, default: Any) -> str:
            value = conf.get(SECTION, name, fallback=None)
            return str(default) if value is None else str(value).strip()

        def flag(name: str, default: bool) -> bool:
            value = get(name, default).lower()
            if value not in _FALSE | {"true", "on", "yes", "1"}:
                raise PolicySettingError(f"[{SECTION}] {name} = {value!r}: expected True or False")
            return value not in _FALSE

        enabled = flag("use_smart_sensor", False)
        names = frozenset(n.strip() for n in get("sensors_enabled", ", ".join(ROUTABLE)).split(",") if n.strip())
        unknown = sorted(names - set(ROUTABLE))
        if unknown:
            raise PolicySettingError(
                f"[{SECTION}] sensors_enabled names {', '.join(unknown)}: the policy routes {', '.join(ROUTABLE)}"
            )
        numbers = {}
        for name, default in (
            ("poll_interval", DEFAULT_POLL_INTERVAL),
            ("execute_wait", DEFAULT_EXECUTE_WAIT),
            ("fallback_grace", DEFAULT_GRACE),
            ("resume_settle", RESUME_SETTLE),
        ):
            text = get(name, default)
            try:
                numbers[name] = float(text)
            except ValueError:
                raise PolicySettingError(f"[{SECTION}] {name} = {text!r}: expected a number of seconds") from None
        if numbers["poll_interval"] <= 0:
            raise PolicySettingError(f"[{SECTION}] poll_interval must be above 0 seconds")
        return cls(
            enabled=enabled,
            sensors_enabled=names,
            conn_id=get("conn_id", DEFAULT_CONN_ID) or DEFAULT_CONN_ID,
            start_from_trigger=flag("start_from_trigger", True),
            **numbers,
        )


class PolicyRouted(SmartSensorMixin):
    """What the policy mixes into Airflow's Hive sensor classes."""

    smartsensor_route = "cluster policy"

    def cannot_check(self, context: Any, exc: Exception) -> Any:
        """Arguments smartsensor cannot check: the task runs as Airflow's own sensor, as it did before."""
        self.log.warning("smartsensor: %s; this task runs as Airflow's own sensor", exc)
        return super(SmartSensorMixin, self).execute(context)  # type: ignore[misc]


_ROUTED: dict[type, type] = {}


def routed_class(cls: type) -> type:
    """``cls`` with smartsensor's execute: same name and module (the serialized task type, the report's operator
    and plugins' extra links stay Airflow's), ``via smartsensor`` in the operator name the UI shows."""
    routed = _ROUTED.get(cls)
    if routed is None:
        routed = type(cls)(
            cls.__name__,
            (PolicyRouted, cls),
            {
                "__module__": cls.__module__,
                "__qualname__": cls.__qualname__,
                "__doc__": cls.__doc__,
                "smartsensor_class": cls.__name__,
                "execute": SmartSensorMixin.execute,  # in the namespace: wrapped by Airflow's metaclass (sensors.py)
                "custom_operator_name": f"{cls.__name__} via smartsensor",
            },
        )
        _ROUTED[cls] = routed
    return routed


def opted_out(task: Any) -> str | None:
    """Why ``task`` stays Airflow's own (its DAG's tag, its param), or None."""
    dag = getattr(task, "dag", None)
    if dag is not None and OPT_OUT_TAG in (getattr(dag, "tags", None) or ()):
        return f"its DAG is tagged {OPT_OUT_TAG}"
    params = getattr(task, "params", None) or {}
    if OPT_OUT_PARAM in params:
        param = params.get_param(OPT_OUT_PARAM) if hasattr(params, "get_param") else params[OPT_OUT_PARAM]
        value = getattr(param, "value", param)
        if value is False or str(value).strip().lower() in _FALSE:
            return f"its param {OPT_OUT_PARAM} is {value!r}"
    return None


def route(task: Any, settings: PolicySettings) -> bool:
    """Make ``task`` behave as its drop-in if the settings enable its class and it did not opt out."""
    cls = type(task)
    name = cls.__name__
    if (
        not settings.enabled
        or name not in settings.sensors_enabled
        or cls.__module__ != HIVE_SENSOR_MODULES.get(name)
        or isinstance(task, SmartSensorMixin)
    ):
        return False
    why = opted_out(task)
    if why is not None:
        log.info("smartsensor: %s.%s stays Airflow's own %s: %s", _dag_id(task), task.task_id, name, why)
        return False
    # Every value first, from the task as it is: a setup that raises leaves it Airflow's own, untouched.
    values = SmartSensorMixin.smartsensor_values(
        task,
        smartsensor_conn_id=settings.conn_id,
        smartsensor_poll_interval=settings.poll_interval,
        smartsensor_execute_wait=settings.execute_wait,
        smartsensor_resume_settle=settings.resume_settle,
        smartsensor_fallback_grace=settings.fallback_grace,
        smartsensor_start_from_trigger=settings.start_from_trigger,
    )
    before = {name: task.__dict__[name] for name in values if name in task.__dict__}
    task.__class__ = routed_class(cls)
    try:
        for name, value in values.items():
            setattr(task, name, value)
    except BaseException:  # put the task back as it was: its class, and only the attributes it had
        task.__class__ = cls
        for name in values:
            task.__dict__.pop(name, None)
        task.__dict__.update(before)
        raise
    return True


def task_policy(task: Any) -> None:
    """Airflow's ``task_policy`` hook (re-export it from ``airflow_local_settings.py``). Never raises: an error
    here would fail the import of the task's whole DAG file; a setting it cannot read is logged and leaves
    every task as Airflow's own."""
    if type(task).__name__ not in ROUTABLE:
        return
    try:
        route(task, PolicySettings.read())
    except PolicySettingError as exc:
        log.error("smartsensor policy off: %s", exc)
    except Exception:
        log.exception("smartsensor policy left %s.%s as Airflow's own", _dag_id(task), getattr(task, "task_id", "?"))


def _dag_id(task: Any) -> str:
    dag = getattr(task, "dag", None)
    return str(getattr(dag, "dag_id", "?"))
