"""Rendering ``{{ ds }}``-style templates in persist fields, in a jinja2 sandbox."""

from __future__ import annotations

import functools
import operator
import re
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any, Callable, cast

from jinja2 import Environment, StrictUndefined, TemplateError
from jinja2.nodes import EvalContext
from jinja2.runtime import Context
from jinja2.sandbox import SandboxedEnvironment

from smartsensor.sensors.errors import SensorDefinitionError

MAX_RENDERED = 10_000


MAX_RENDER_SECONDS = 1.0  # of the rendering thread's CPU time: a loaded machine's waits do not count
MAX_TEMPLATE_INT = 10_000  # widths and counts given to filters and str methods (center, indent, zfill, ...)
_BIG_NUMBER = re.compile(r"\d{6,}")  # a width or precision of a million or more in a format string


class TemplateBudgetExceeded(SensorDefinitionError):
    """A template ran too long or asked for too much."""


class _BoundedSandbox(SandboxedEnvironment):
    """The jinja2 sandbox, plus bounds on time, on `*`, `**` and `%`, and on the sizes filters and str
    methods are asked to produce, so a template can neither hang nor allocate gigabytes."""

    intercepted_binops = frozenset(["*", "**", "%"])

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # jinja's signature
        _check_deadline()
        if getattr(__obj, "__self__", None).__class__ is str:  # a str method: center, zfill, format, ...
            _check_sizes((__obj.__self__, *args, *kwargs.values()))
        return super().call(__context, __obj, *args, **kwargs)

    def wrap_str_format(self, value: Any) -> Any:
        wrapped = super().wrap_str_format(value)
        if wrapped is not None:  # 'fmt'.format / format_map: refuse huge widths before formatting
            _check_sizes((value.__self__,))
        return wrapped

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _check_deadline()
        if operator == "%":
            _check_sizes((left,))
            return left % right
        if operator == "**":
            if isinstance(right, int) and abs(right) > 64:
                raise SensorDefinitionError(f"exponent {right} too large in a template")
            return left**right
        if isinstance(left, (str, list)) and isinstance(right, int) and len(left) * right > MAX_RENDERED:
            raise SensorDefinitionError("template result too large")
        if isinstance(right, (str, list)) and isinstance(left, int) and len(right) * left > MAX_RENDERED:
            raise SensorDefinitionError("template result too large")
        return left * right


_ENV = _BoundedSandbox(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)


def _bounded_filter(f: Any) -> Any:
    @functools.wraps(f)  # keeps jinja's pass_context/pass_environment marks
    def bounded(*args: Any, **kwargs: Any) -> Any:
        _check_deadline()
        plain = [a for a in args if not isinstance(a, (Context, Environment, EvalContext))]
        # the piped value may be any number (ds_nodash|int|string); widths and counts come after it
        _check_sizes([a for a in plain[:1] if isinstance(a, str)] + plain[1:] + list(kwargs.values()))
        return f(*args, **kwargs)

    return bounded


_ENV.filters = {name: _bounded_filter(f) for name, f in _ENV.filters.items()}
MAX_LIPSUM_WORDS = 1_000  # lipsum's default (5 paragraphs of at most 100 words) is 500


def _bounded_lipsum(n: Any = 5, html: Any = True, min: Any = 20, max: Any = 100) -> Any:  # jinja's names
    """jinja's ``lipsum``, refused past MAX_LIPSUM_WORDS words or paragraphs: it runs in Python, where the
    template's time budget cannot stop it (``lipsum(n=200000)`` hung `submit`)."""
    n, min, max = (operator.index(v) for v in (n, min, max))  # whole numbers only: randrange takes 1e7 too
    if n * (abs(max) + 1) > MAX_LIPSUM_WORDS:
        raise TemplateBudgetExceeded(
            f"lipsum(n={_short_int(n)}, max={_short_int(max)}) too large in a template "
            f"(at most {MAX_LIPSUM_WORDS} words)"
        )
    return _LIPSUM(n, html, min, max)


# The other globals are bounded already: range by the sandbox (MAX_RANGE), dict/cycler/joiner/namespace
# build small objects.
_LIPSUM = cast(Callable[..., Any], _ENV.globals["lipsum"])
_ENV.globals["lipsum"] = _bounded_lipsum
_local = threading.local()


def _check_deadline() -> None:
    deadline = getattr(_local, "deadline", None)
    if deadline is not None and time.thread_time() > deadline:
        raise TemplateBudgetExceeded(f"template used more than {MAX_RENDER_SECONDS:g} s of CPU to render")


def _check_sizes(values: Any) -> None:
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_TEMPLATE_INT:
            raise TemplateBudgetExceeded(
                f"number {_short_int(value)} too large for a filter or text method "
                f"in a template (at most {MAX_TEMPLATE_INT})"
            )
        if isinstance(value, str) and _BIG_NUMBER.search(value) and ("%" in value or "{" in value):
            raise TemplateBudgetExceeded("format string with a width or precision of a million or more in a template")


def _short_int(value: int) -> str:
    return str(value) if value.bit_length() < 64 else f"of about {int(value.bit_length() * 0.30103)} digits"


@functools.lru_cache(maxsize=4096)
def _compiled(source: str) -> Any:
    """Compiled templates, cached: compiling costs ~30x rendering, and a file repeats its templates."""
    return _ENV.from_string(source)


def _render_bounded(source: str, context: dict[str, Any]) -> str:
    """Render with a CPU-time budget: a trace function on the template's own frames stops a loop that
    runs past MAX_RENDER_SECONDS (the sandbox bounds each range, not nested loops over them). The thread's
    CPU time, not the wall clock: on a loaded machine a ``{{ ds }}`` waited over a second for the GIL and a
    core, and a good check was refused."""
    _local.deadline = time.thread_time() + MAX_RENDER_SECONDS

    def on_line(frame: Any, event: str, arg: Any) -> Any:
        _check_deadline()
        return on_line

    def on_call(frame: Any, event: str, arg: Any) -> Any:
        return on_line if frame.f_code.co_filename == "<template>" else None

    template = _compiled(source)
    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        return template.render(context)
    finally:
        sys.settrace(previous)
        _local.deadline = None


def ds_add(ds: str, days: int) -> str:
    """``ds_add('2026-11-22', -1)`` → ``'2026-11-21'`` (Airflow's ``macros.ds_add``)."""
    return (datetime.strptime(ds, "%Y-%m-%d") + timedelta(days=int(days))).strftime("%Y-%m-%d")


def ds_format(ds: str, input_format: str, output_format: str) -> str:
    """``ds_format('2026-11-22', '%Y-%m-%d', '%Y/%m/%d')`` → ``'2026/11/22'`` (Airflow's ``macros.ds_format``)."""
    return datetime.strptime(ds, input_format).strftime(output_format)


MACROS = SimpleNamespace(ds_add=ds_add, ds_format=ds_format, datetime=datetime, timedelta=timedelta)


def template_context(execution_date: datetime) -> dict[str, Any]:
    """Variables available to templates for one execution date (the Airflow names users already write).

    An aware date is given as its naive UTC wall time, as templates have always seen it: ``ts`` and
    ``execution_date`` render without an offset, so the rendered checks (and their hashcodes) stay the same."""
    if execution_date.tzinfo is not None:
        execution_date = execution_date.astimezone(timezone.utc).replace(tzinfo=None)
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
            rendered = _render_bounded(value, context)
        except TemplateBudgetExceeded as exc:
            raise SensorDefinitionError(
                f"field {field!r}: template {value[:200]!r} cannot be rendered: {exc}"
            ) from None
        except (
            TemplateError,
            SensorDefinitionError,
            ArithmeticError,
            TypeError,
            ValueError,
            LookupError,
            AttributeError,
            RecursionError,
            MemoryError,
        ) as exc:
            raise SensorDefinitionError(
                f"field {field!r}: template {value!r} cannot be rendered: {type(exc).__name__}: {exc}"
            ) from None
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
