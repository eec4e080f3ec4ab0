"""A check's templates rendered in the triggerer, for a task that starts there (``start.py``): the run's context,
and the fields rendered with it in the environment Airflow would use for the task."""

from __future__ import annotations

import functools
import logging
from typing import Any

import jinja2

from smartsensor_airflow._compat import airflow_conf, airflow_version, dag_run_row, macros_module, template_environment
from smartsensor_airflow.template_rules import TemplateRules, environment_options

log = logging.getLogger(__name__)


async def run_context(ti: Any, params: dict[str, Any] | None) -> dict[str, Any]:
    """The template context of ``ti``'s run. Airflow 3.3 gives the trigger a task instance that builds Airflow's
    own context; 2.10's triggerer has no DAG, so the context is built from the run's row (``start.CONTEXT_2_10``,
    with ``params`` the task's as parsed, overridden by the run's conf as Airflow does by default)."""
    if airflow_version()[0] >= 3:
        return dict(ti.get_template_context())
    from asgiref.sync import sync_to_async  # shipped with Airflow 2.x

    # Not thread_sensitive: the reads of triggers that start together run side by side, not one at a time.
    return await sync_to_async(_context_2_10, thread_sensitive=False)(ti.dag_id, ti.run_id, params)


def release_run_objects(ti: Any) -> None:
    """Let go of what Airflow 3's triggerer handed a trigger that starts a task, once its check is rendered.

    Its runner gives such a trigger a task instance holding the task, and through it the whole DAG, deserialized for
    this trigger alone, and the run's template context (kept by the task instance and by the coroutine that runs the
    trigger). Both stay referenced for as long as the trigger waits, which can be hours. The trigger needs neither
    once its check is rendered and its try's key read, and Airflow 3.3's runner does not read them again (only the
    instance's ids, for its log lines). Airflow 2.10 hands the database's task instance, which holds no DAG: it is
    left as it is."""
    if airflow_version()[0] < 3:
        return
    try:
        cached = getattr(ti, "_cached_template_context", None)
        if isinstance(cached, dict):
            cached.clear()  # the same dict the runner passed to render_template_fields
        if getattr(ti, "task", None) is not None:
            ti.task = None
    except Exception:  # memory only: a task instance that will not let go is left as it is
        log.debug("smartsensor: the task instance keeps its task and context", exc_info=True)


def _context_2_10(dag_id: str, run_id: str, params: dict[str, Any] | None) -> dict[str, Any]:
    return row_context(run_id, *dag_run_row(dag_id, run_id), params)


def row_context(
    run_id: str, logical: Any, start: Any, end: Any, conf: dict[str, Any] | None, params: dict[str, Any] | None
) -> dict[str, Any]:
    """The template context a check is rendered with from its run's row alone (``start.CONTEXT_2_10``): the run's
    id, logical date, data interval and conf, and the task's ``params`` (as parsed) overridden by the run's conf as
    Airflow does by default; on Airflow 3 only what its own context has (no ``execution_date``; a data interval
    only with a logical date). What 2.10's trigger and a parked try's attendant render with."""
    import pendulum

    values = dict(params or {})
    if conf and airflow_conf.getboolean("core", "dag_run_conf_overrides_params", fallback=True):
        values.update(conf)
    interval = {
        "data_interval_start": pendulum.instance(start) if start is not None else None,
        "data_interval_end": pendulum.instance(end) if end is not None else None,
    }
    context: dict[str, Any] = {"run_id": run_id, "params": values, "macros": macros_module()}
    airflow_3 = airflow_version()[0] >= 3
    if logical is None:
        # Airflow 3: a run without a logical date has no ds, ts… nor a data interval in its context (a template
        # using them fails); 2.10's runs all have one.
        return context if airflow_3 else {**interval, **context}
    logical = pendulum.instance(logical)
    ds = logical.strftime("%Y-%m-%d")
    ts = logical.isoformat()
    return {
        "ds": ds,
        "ds_nodash": ds.replace("-", ""),
        "ts": ts,
        "ts_nodash": logical.strftime("%Y%m%dT%H%M%S"),
        "ts_nodash_with_tz": ts.replace("-", "").replace(":", ""),
        "logical_date": logical,
        **({} if airflow_3 else {"execution_date": logical}),  # Airflow 3's context has no execution_date
        **interval,
        **context,
    }


@functools.lru_cache(maxsize=2048)
def _compiled(text: str, rules: TemplateRules) -> Any:
    """A template compiled once per process and rules: the triggers of one DAG's tasks share their few templates."""
    options = environment_options(rules)
    extensions = tuple(options.pop("extensions"))
    return template_environment(rules.native, extensions=extensions, **options).from_string(text)


def render_fields(fields: dict[str, Any], context: dict[str, Any], rules: TemplateRules) -> dict[str, Any]:
    """``fields`` with every string rendered (inside lists and dicts too), as Airflow renders template fields, by
    the DAG's ``rules``: a name the context lacks raises ``jinja2.UndefinedError`` under Airflow's default
    ``StrictUndefined``, as it does when Airflow renders the task."""

    def render(value: Any) -> Any:
        if isinstance(value, str):
            rendered = _compiled(value, rules).render(**context)
            # A native rendering of a lone undefined name is the undefined value itself, not an error yet: as the
            # text Airflow records for a rendered field, it raises for StrictUndefined (and is "" when lenient).
            return str(rendered) if isinstance(rendered, jinja2.Undefined) else rendered
        if isinstance(value, (list, tuple)):
            return [render(item) for item in value]
        if isinstance(value, dict):
            return {key: render(item) for key, item in value.items()}
        return value

    return {name: render(value) for name, value in fields.items()}
