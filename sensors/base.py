"""BaseSensor, the @smart_eligible marker, and the allow-list registry of sensor classes."""

from __future__ import annotations

import importlib
import math
from datetime import datetime, timedelta
from typing import Any, ClassVar, Iterable, TypeVar

from sensors.checks import Check
from sensors.errors import SensorDefinitionError, UnknownSensorClass
from sensors.templating import has_template, render_value, template_context

S = TypeVar("S", bound=type)

DEFAULT_EXEC_FIELDS: tuple[str, ...] = (
    "poke_interval", "timeout", "execution_timeout", "retries", "retry_delay",
    "soft_fail", "exponential_backoff", "max_wait",
)

# Every BaseSensor subclass by class path, and those marked @smart_eligible.
_ALL_CLASSES: dict[str, type["BaseSensor"]] = {}
_SMART_ELIGIBLE: dict[str, type["BaseSensor"]] = {}

BUILTIN_MODULES: tuple[str, ...] = ("sensors.hive", "sensors.filesystem")


def classpath_of(cls: type) -> str:
    """``module.QualName`` of a class: what is stored in task_instance.classpath."""
    return f"{cls.__module__}.{cls.__qualname__}"


def smart_eligible(cls: S) -> S:
    """Mark a sensor class as eligible for the shard workers (it must also be enabled in config).

    The mark is not inherited: a subclass must be marked itself.
    """
    if not (isinstance(cls, type) and issubclass(cls, BaseSensor)):
        raise TypeError("@smart_eligible applies to BaseSensor subclasses")
    cls._smart_eligible_mark = cls  # type: ignore[attr-defined]
    _SMART_ELIGIBLE[classpath_of(cls)] = cls
    return cls


def is_smart_eligible(cls: type) -> bool:
    """True when this exact class (not only a parent) carries @smart_eligible."""
    return getattr(cls, "_smart_eligible_mark", None) is cls


def _non_negative(name: str, value: Any, allow_none: bool = False) -> float | None:
    """A duration in seconds; a ``timedelta`` (as Airflow DAG files write them) is converted."""
    if value is None and allow_none:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value < 0:
        raise SensorDefinitionError(f"{name} must be a non-negative number of seconds or a timedelta, got {value!r}")
    return value


class BaseSensor:
    """A sensor task: waits until its check is true.

    Subclasses set ``persist_fields`` (constructor arguments the check needs; they are stored as
    attr_dict and must be JSON serialisable) and implement ``poke`` or ``checks``. String values of
    persist fields are jinja2 templates rendered at registration (``{{ ds }}``, ``{{ ds_nodash }}``).
    """

    persist_fields: ClassVar[tuple[str, ...]] = ()
    exec_fields: ClassVar[tuple[str, ...]] = DEFAULT_EXEC_FIELDS

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _ALL_CLASSES[classpath_of(cls)] = cls

    def __init__(
        self,
        task_id: str,
        dag_id: str | None = None,
        poke_interval: float | timedelta = 60,
        timeout: float | timedelta = 7 * 24 * 3600,
        execution_timeout: float | timedelta | None = None,
        retries: int = 0,
        retry_delay: float | timedelta = 300,
        soft_fail: bool = False,
        exponential_backoff: bool = False,
        max_wait: float | timedelta | None = None,
    ) -> None:
        if not isinstance(task_id, str) or not task_id.strip() or len(task_id) > 250:
            raise SensorDefinitionError(f"task_id must be a non-empty string of at most 250 characters, got {task_id!r}")
        if dag_id is not None and (not isinstance(dag_id, str) or not dag_id.strip() or len(dag_id) > 250):
            raise SensorDefinitionError(f"dag_id must be a non-empty string of at most 250 characters, got {dag_id!r}")
        self.task_id = task_id
        self.dag_id = dag_id
        self.poke_interval = _non_negative("poke_interval", poke_interval)
        if self.poke_interval == 0:
            raise SensorDefinitionError("poke_interval must be > 0")
        self.timeout = _non_negative("timeout", timeout)
        self.execution_timeout = _non_negative("execution_timeout", execution_timeout, allow_none=True)
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise SensorDefinitionError(f"retries must be a non-negative integer, got {retries!r}")
        self.retries = retries
        self.retry_delay = _non_negative("retry_delay", retry_delay)
        if not isinstance(soft_fail, bool):
            raise SensorDefinitionError(f"soft_fail must be True or False, got {soft_fail!r}")
        self.soft_fail = soft_fail
        if not isinstance(exponential_backoff, bool):
            raise SensorDefinitionError(f"exponential_backoff must be True or False, got {exponential_backoff!r}")
        self.exponential_backoff = exponential_backoff
        self.max_wait = _non_negative("max_wait", max_wait, allow_none=True)

    # -- the check -----------------------------------------------------------------------------
    def validate_fields(self, partial: bool = False) -> None:
        """Check persist fields; raise SensorDefinitionError naming the field. Override.

        ``partial``: at construction, skip fields that still hold a template (they are validated
        after rendering, at registration); every other field is checked at once.
        """

    def _validate_unless_templated(self) -> None:
        """Validate every field that holds no template now; templated ones after rendering."""
        self.validate_fields(partial=True)

    @staticmethod
    def _skip(value: Any, partial: bool) -> bool:
        return partial and has_template(value)

    def checks(self) -> list[Check] | None:
        """The batched checks that decide this sensor (all must hold), or None if it only has poke()."""
        return None

    def poke(self, context: dict[str, Any]) -> bool:
        """One check. The default answers ``checks()`` through ``context['checker']``."""
        checks = self.checks()
        if checks is None:
            raise NotImplementedError(f"{type(self).__name__} must implement poke() or checks()")
        results = context["checker"].check_all(checks)
        for check in checks:
            outcome = results[check]
            if isinstance(outcome, Exception):
                raise outcome
        return all(results[c] for c in checks)

    def is_smart_sensor_compatible(self) -> bool:
        """The instance's own eligibility check (override to opt single instances out)."""
        return True

    # -- persistence ---------------------------------------------------------------------------
    def persist_values(self) -> dict[str, Any]:
        """Values of persist_fields (subclasses store them already canonical)."""
        missing = [f for f in self.persist_fields if not hasattr(self, f)]
        if missing:
            raise SensorDefinitionError(f"{type(self).__name__} has no attribute for persist field(s) {missing}")
        return {f: getattr(self, f) for f in self.persist_fields}

    def exec_values(self) -> dict[str, Any]:
        """Values of exec_fields."""
        return {f: getattr(self, f) for f in self.exec_fields}

    def rendered(self, execution_date: datetime) -> "BaseSensor":
        """A copy of this sensor with its persist fields rendered for ``execution_date`` and validated."""
        context = template_context(execution_date)
        persist = {f: render_value(f, v, context) for f, v in self.persist_values().items()}
        return self.rebuild(persist, self.exec_values(), task_id=self.task_id, dag_id=self.dag_id)

    @classmethod
    def rebuild(cls, persist: dict[str, Any], exec_values: dict[str, Any], task_id: str,
                dag_id: str | None = None) -> "BaseSensor":
        """Build a sensor from stored attr_dict and exec_dict values alone (no DAG file)."""
        known_exec = {k: v for k, v in exec_values.items() if k in cls.exec_fields}
        try:
            sensor = cls(task_id=task_id, dag_id=dag_id, **persist, **known_exec)
        except TypeError as exc:
            raise SensorDefinitionError(
                f"{cls.__name__} cannot be rebuilt from its persist fields {sorted(persist)}: {exc}") from None
        sensor.validate_fields()
        return sensor

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.dag_id}.{self.task_id}>"


def import_sensor_modules(modules: Iterable[str] = ()) -> None:
    """Import the built-in sensor modules and the configured ``sensor_modules``."""
    for name in (*BUILTIN_MODULES, *modules):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise UnknownSensorClass(f"sensor module {name!r} cannot be imported: {exc}") from None


def resolve_smart_class(classpath: str, enabled: Iterable[str], modules: Iterable[str] = ()) -> type[BaseSensor]:
    """The class for ``classpath`` if it is marked @smart_eligible AND enabled in config.

    The class path is only looked up in the registry filled by the built-in and configured modules;
    a path read from the database is never imported.
    """
    import_sensor_modules(modules)
    cls = _SMART_ELIGIBLE.get(classpath)
    if cls is None:
        raise UnknownSensorClass(f"sensor class {classpath!r} is not a known smart-eligible sensor class "
                                 f"(built-in or in [smart_sensor] sensor_modules); it was not imported")
    if cls.__name__ not in set(enabled):
        raise UnknownSensorClass(f"sensor class {classpath!r} is not enabled in [smart_sensor] sensors_enabled")
    return cls


def resolve_any_class(classpath: str, modules: Iterable[str] = ()) -> type[BaseSensor] | None:
    """Any known BaseSensor subclass by class path (classic mode), or None."""
    import_sensor_modules(modules)
    return _ALL_CLASSES.get(classpath)
