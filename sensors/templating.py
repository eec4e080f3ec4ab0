"""Rendering ``{{ ds }}``-style templates in persist fields, in a jinja2 sandbox."""

from __future__ import annotations

from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

from jinja2 import StrictUndefined, TemplateError
from jinja2.sandbox import SandboxedEnvironment

from sensors.errors import SensorDefinitionError

MAX_RENDERED = 10_000


class _BoundedSandbox(SandboxedEnvironment):
    """The jinja2 sandbox, plus a bound on `*` and `**` so a template cannot allocate gigabytes."""

    intercepted_binops = frozenset(["*", "**"])

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "**":
            if isinstance(right, int) and abs(right) > 64:
                raise SensorDefinitionError(f"exponent {right} too large in a template")
            return left ** right
        if isinstance(left, (str, list)) and isinstance(right, int) and len(left) * right > MAX_RENDERED:
            raise SensorDefinitionError("template result too large")
        if isinstance(right, (str, list)) and isinstance(left, int) and len(right) * left > MAX_RENDERED:
            raise SensorDefinitionError("template result too large")
        return left * right


_ENV = _BoundedSandbox(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)


def ds_add(ds: str, days: int) -> str:
    """``ds_add('2026-11-22', -1)`` → ``'2026-11-21'`` (Airflow's ``macros.ds_add``)."""
    return (datetime.strptime(ds, "%Y-%m-%d") + timedelta(days=int(days))).strftime("%Y-%m-%d")


def ds_format(ds: str, input_format: str, output_format: str) -> str:
    """``ds_format('2026-11-22', '%Y-%m-%d', '%Y/%m/%d')`` → ``'2026/11/22'`` (Airflow's ``macros.ds_format``)."""
    return datetime.strptime(ds, input_format).strftime(output_format)


MACROS = SimpleNamespace(ds_add=ds_add, ds_format=ds_format, datetime=datetime, timedelta=timedelta)


def template_context(execution_date: datetime) -> dict[str, Any]:
    """Variables available to templates for one execution date (the Airflow names users already write)."""
    day = timedelta(days=1)
    return {
        "ds": execution_date.strftime("%Y-%m-%d"),
        "ds_nodash": execution_date.strftime("%Y%m%d"),
        "ts": execution_date.isoformat(),
        "ts_nodash": execution_date.strftime("%Y%m%dT%H%M%S"),
        "execution_date": execution_date,
        "prev_ds": (execution_date - day).strftime("%Y-%m-%d"),
        "next_ds": (execution_date + day).strftime("%Y-%m-%d"),
        "yesterday_ds": (execution_date - day).strftime("%Y-%m-%d"),
        "tomorrow_ds": (execution_date + day).strftime("%Y-%m-%d"),
        "yesterday_ds_nodash": (execution_date - day).strftime("%Y%m%d"),
        "tomorrow_ds_nodash": (execution_date + day).strftime("%Y%m%d"),
        "macros": MACROS,
    }


def has_template(value: Any) -> bool:
    """True if a string (or any string inside a list/dict) contains jinja2 markup."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value or "{#" in value
    if isinstance(value, (list, tuple)):
        return any(has_template(v) for v in value)
    if isinstance(value, dict):
        return any(has_template(k) or has_template(v) for k, v in value.items())
    return False


def render_value(field: str, value: Any, context: dict[str, Any]) -> Any:
    """Render every string inside ``value``; errors name the field."""
    if isinstance(value, str):
        if not has_template(value):
            return value
        try:
            rendered = _ENV.from_string(value).render(context)
        except (TemplateError, SensorDefinitionError, ArithmeticError, TypeError, ValueError, LookupError,
                AttributeError, RecursionError, MemoryError) as exc:
            raise SensorDefinitionError(
                f"field {field!r}: template {value!r} cannot be rendered: {type(exc).__name__}: {exc}") from None
        if len(rendered) > MAX_RENDERED:
            raise SensorDefinitionError(f"field {field!r}: template renders to more than {MAX_RENDERED} characters")
        return rendered
    if isinstance(value, list):
        return [render_value(field, v, context) for v in value]
    if isinstance(value, tuple):
        return [render_value(field, v, context) for v in value]
    if isinstance(value, dict):
        return {render_value(field, k, context): render_value(field, v, context) for k, v in value.items()}
    return value
