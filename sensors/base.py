"""BaseSensor, the @smart_eligible marker, and the allow-list registry of sensor classes."""

from __future__ import annotations

import importlib
import json
from datetime import datetime, timedelta
from typing import Any, ClassVar, Iterable, TypeVar

from smartsensor.sensors import exec_fields
from smartsensor.sensors.checks import Check
from smartsensor.sensors.errors import (
    SensorDefinitionError,
    SensorModuleUnavailable,
    SensorRebuildError,
    UnknownSensorClass,
    first_line,
)
from smartsensor.sensors.templating import has_template, render_value, template_context
from smartsensor.sensors.validation import check_persist_value, validate_id

__all__ = [
    "BUILTIN_MODULES",
    "DEFAULT_EXEC_FIELDS",
    "BaseSensor",
    "classpath_of",
    "import_sensor_modules",
    "is_smart_eligible",
    "resolve_any_class",
    "resolve_smart_class",
    "smart_class_names",
    "smart_eligible",
]

S = TypeVar("S", bound=type)

# The exec fields' names, defaults and bounds are declared once, in exec_fields.FIELDS.
DEFAULT_EXEC_FIELDS: tuple[str, ...] = exec_fields.NAMES
_DEFAULT = exec_fields.DEFAULTS

# Every BaseSensor subclass by class path, and those marked @smart_eligible.
_ALL_CLASSES: dict[str, type["BaseSensor"]] = {}
_SMART_ELIGIBLE: dict[str, type["BaseSensor"]] = {}

BUILTIN_MODULES: tuple[str, ...] = ("smartsensor.sensors.hive", "smartsensor.sensors.filesystem")

# Up to 0.1 the sensor library was the top-level package ``sensors``; rows stored then say ``sensors.hive.…``.
_LEGACY_PACKAGE = "sensors."
_PACKAGE = "smartsensor.sensors."


def classpath_of(cls: type) -> str:
    """``module.QualName`` of a class: what is stored in task_instance.classpath."""
    return f"{cls.__module__}.{cls.__qualname__}"


def smart_eligible(cls: S) -> S:
    """Mark a sensor class as eligible for the shard workers (it must also be enabled in config).

    The mark is not inherited: a subclass must be marked itself.
    """
    if not (isinstance(cls, type) and issubclass(cls, BaseSensor)):
        raise TypeError("@smart_eligible applies to BaseSensor subclasses")
    cls._smart_eligible_mark = cls  # type: ignore[attr-defined]  # the mark lives on the class only
    _SMART_ELIGIBLE[classpath_of(cls)] = cls
    return cls


def is_smart_eligible(cls: type) -> bool:
    """True when this exact class (not only a parent) carries @smart_eligible."""
    return getattr(cls, "_smart_eligible_mark", None) is cls


class BaseSensor:
    """A sensor task: waits until its check is true.

    Subclasses set ``persist_fields`` (constructor arguments the check needs; they are stored as
    attr_dict and must be JSON serialisable) and implement ``poke`` or ``checks``. String values of
    persist fields are jinja2 templates rendered at registration (``{{ ds }}``, ``{{ ds_nodash }}``).
    """

    persist_fields: ClassVar[tuple[str, ...]] = ()
    exec_fields: ClassVar[tuple[str, ...]] = DEFAULT_EXEC_FIELDS

    # The exec fields as the constructor checked them (a duration in seconds), declared in exec_fields.FIELDS.
    poke_interval: float
    timeout: float
    execution_timeout: float | None
    retries: int
    retry_delay: float
    soft_fail: bool
    exponential_backoff: bool
    max_wait: float | None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _ALL_CLASSES[classpath_of(cls)] = cls

    def __init__(
        self,
        task_id: str,
        dag_id: str | None = None,
        poke_interval: float | timedelta = _DEFAULT["poke_interval"],
        timeout: float | timedelta = _DEFAULT["timeout"],
        execution_timeout: float | timedelta | None = _DEFAULT["execution_timeout"],
        retries: int = _DEFAULT["retries"],
        retry_delay: float | timedelta = _DEFAULT["retry_delay"],
        soft_fail: bool = _DEFAULT["soft_fail"],
        exponential_backoff: bool = _DEFAULT["exponential_backoff"],
        max_wait: float | timedelta | None = _DEFAULT["max_wait"],
    ) -> None:
        given = locals()  # the arguments by name, before any other local: each exec field is read from it below
        self.task_id = validate_id("task_id", task_id)
        self.dag_id = None if dag_id is None else validate_id("dag_id", dag_id)
        # Bounded (exec_fields.MAX_DURATION etc.) so no stored value can overflow a worker's dates or timers.
        for field in exec_fields.FIELDS:
            setattr(self, field.name, field.check(given[field.name]))

    # -- the check -----------------------------------------------------------------------------
    def validate_fields(self, partial: bool = False) -> None:
        """Check persist fields; raise SensorDefinitionError naming the field. Override.

        ``partial``: at construction, skip fields that still hold a template (they are validated
        after rendering, at registration); every other field is checked at once.
        """

    def _validate_unless_templated(self) -> None:
        """Validate every field that holds no template now; templated ones after rendering."""
        for name in self.persist_fields:
            if hasattr(self, name):
                check_persist_value(name, getattr(self, name))
        self.validate_fields(partial=True)

    @staticmethod
    def _skip(value: Any, partial: bool) -> bool:
        return partial and has_template(value)

    def checks(self) -> list[Check] | None:
        """The batched checks that decide this sensor (all must hold), or None if it only has poke().

        They must follow from the persisted fields alone: a worker calls this once per distinct check and
        process, and reuses the answer every round while the check waits (not when it raises)."""
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
        values = {f: getattr(self, f) for f in self.persist_fields}
        for name, value in values.items():
            check_persist_value(name, value)
        return values

    def exec_values(self) -> dict[str, Any]:
        """Values of exec_fields."""
        return {f: getattr(self, f) for f in self.exec_fields}

    def rendered(self, execution_date: datetime) -> "BaseSensor":
        """A copy of this sensor with its persist fields rendered for ``execution_date`` and validated."""
        context = template_context(execution_date)
        persist = {f: render_value(f, v, context) for f, v in self.persist_values().items()}
        return self.rebuild(persist, self.exec_values(), task_id=self.task_id, dag_id=self.dag_id)

    @classmethod
    def rebuild(
        cls, persist: dict[str, Any], exec_values: dict[str, Any], task_id: str, dag_id: str | None = None
    ) -> "BaseSensor":
        """Build a sensor from stored attr_dict and exec_dict values alone (no DAG file)."""
        known_exec = {k: v for k, v in exec_values.items() if k in cls.exec_fields}
        try:
            sensor = cls(task_id=task_id, dag_id=dag_id, **persist, **known_exec)
        except TypeError as exc:
            raise SensorDefinitionError(
                f"{cls.__name__} cannot be rebuilt from its persist fields {sorted(persist)}: {exc}"
            ) from None
        sensor.validate_fields()
        return sensor

    @classmethod
    def from_stored(
        cls, attr_dict: str, exec_dict: str | None = None, task_id: str = "smart-check", dag_id: str | None = None
    ) -> "BaseSensor":
        """Rebuild from a task row's stored JSON: the one rule shard workers and classic runs share.

        SensorDefinitionError (permanent) when the JSON is broken or the class's own validation refuses
        it; SensorRebuildError (transient) when the class raises anything else.
        """
        persist = _json_object("attr_dict", attr_dict)
        exec_values = _json_object("exec_dict", exec_dict) if exec_dict else {}
        try:
            return cls.rebuild(persist, exec_values, task_id=task_id, dag_id=dag_id)
        except SensorDefinitionError:
            raise
        except (Exception, SystemExit, KeyboardInterrupt) as exc:  # noqa: BLE001 - a user's class may raise anything
            raise SensorRebuildError(
                f"{classpath_of(cls)} cannot be rebuilt from its attr_dict on this host: "
                f"{type(exc).__name__}: {first_line(exc)}"
            ) from None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.dag_id}.{self.task_id}>"


def _json_object(name: str, text: str | None) -> dict[str, Any]:
    if not isinstance(text, (str, bytes, bytearray)):
        raise SensorDefinitionError(f"{name} is missing (a row written by hand or by an older version)")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise SensorDefinitionError(f"{name} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise SensorDefinitionError(f"{name} is not a JSON object")
    return value


def import_sensor_modules(modules: Iterable[str] = ()) -> dict[str, str]:
    """Import the built-in sensor modules and the configured ``sensor_modules``, each on its own.

    Returns {module: why it failed} for the configured modules that cannot be imported on this host;
    the others (and every built-in class) stay usable. A failed import is tried again at the next
    call, so a module deployed later is picked up without a restart.
    """
    for name in BUILTIN_MODULES:
        importlib.import_module(name)
    failures: dict[str, str] = {}
    for name in modules:
        try:
            importlib.import_module(name)
        except (Exception, SystemExit, KeyboardInterrupt) as exc:  # noqa: BLE001 - a user module may raise anything
            failures[name] = f"{type(exc).__name__}: {first_line(exc)}"
    return failures


def smart_class_names() -> set[str]:
    """Names of the smart-eligible classes imported so far (built-in and configured modules)."""
    return {cls.__name__ for cls in _SMART_ELIGIBLE.values()}


def smart_classes_named(name: str) -> list[type["BaseSensor"]]:
    """The smart-eligible classes imported so far whose class name is ``name`` (built-ins first)."""
    return sorted(
        (cls for cls in _SMART_ELIGIBLE.values() if cls.__name__ == name),
        key=lambda cls: cls.__module__ not in BUILTIN_MODULES,
    )


def current_classpath(classpath: str) -> str:
    """``sensors.hive.X`` (a row stored by 0.1) → ``smartsensor.sensors.hive.X``; any other path unchanged."""
    if classpath.startswith(_LEGACY_PACKAGE):
        return _PACKAGE + classpath[len(_LEGACY_PACKAGE) :]
    return classpath


def _lookup(
    registry: dict[str, type["BaseSensor"]], classpath: str, modules: Iterable[str]
) -> type["BaseSensor"] | None:
    """``classpath`` in ``registry`` after importing the sensor modules; SensorModuleUnavailable when it is
    missing because the configured module it would come from cannot be imported on this host now."""
    if not isinstance(classpath, str) or not classpath:
        return None  # a row without a class path: an unknown class, said by the caller
    classpath = current_classpath(classpath)
    failures = import_sensor_modules(modules)
    cls = registry.get(classpath)
    if cls is None:
        for module, why in failures.items():
            if classpath.startswith(module + "."):
                raise SensorModuleUnavailable(
                    module,
                    f"sensor module {module!r} cannot be imported on this host "
                    f"({why}); tasks of {classpath} wait until it can (within "
                    f"their own timeouts)",
                )
    return cls


def resolve_smart_class(classpath: str, enabled: Iterable[str], modules: Iterable[str] = ()) -> type[BaseSensor]:
    """The class for ``classpath`` if it is marked @smart_eligible AND enabled in config.

    The class path is only looked up in the registry filled by the built-in and configured modules;
    a path read from the database is never imported. Raises SensorModuleUnavailable (transient: a
    deploy skew) when the class would come from a configured module that cannot be imported now,
    UnknownSensorClass (permanent) otherwise.
    """
    cls = _lookup(_SMART_ELIGIBLE, classpath, modules)
    if cls is None:
        raise UnknownSensorClass(
            f"sensor class {classpath!r} is not a known smart-eligible sensor class "
            f"(built-in or in [smart_sensor] sensor_modules); it was not imported"
        )
    if cls.__name__ not in set(enabled):
        raise UnknownSensorClass(f"sensor class {classpath!r} is not enabled in [smart_sensor] sensors_enabled")
    return cls


def resolve_any_class(classpath: str, modules: Iterable[str] = ()) -> type[BaseSensor] | None:
    """Any known BaseSensor subclass by class path (classic mode), or None.

    Raises SensorModuleUnavailable when it would come from a configured module that cannot be imported now.
    """
    return _lookup(_ALL_CLASSES, classpath, modules)
