"""What a parked try waits for (issue 55), read where Airflow keeps it: the raw check its task carries in the
serialized DAG (``start.PARKED_FIELD``: the start-trigger arguments ``start.py`` computes when the DAG file is
parsed: the sensor class, the unrendered fields, the exec values, the DAG's template rules and the task's params),
rendered with the run's row (``trigger_context.row_context``), as a 2.10 trigger renders it. A parked try and a try
that starts in the triggerer thus register the same check, with the same hash, from the same code.

Reading the task's entry of the serialized DAG's JSON costs no deserialization of the DAG (Airflow 3.3's triggerer
deserializes the whole DAG for every task it starts: apache/airflow#69841)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from smartsensor_airflow._compat import deserialize_value
from smartsensor_airflow.checks import check_of
from smartsensor_airflow.start import PARKED_FIELD, START_CLASSPATH
from smartsensor_airflow.template_rules import TemplateRules
from smartsensor_airflow.trigger_context import render_fields


def serialized_tasks(dag_data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """task_id → the task's entry in a serialized DAG's JSON (``serialized_dag.data``, 2.10 and 3.x alike)."""
    tasks: dict[str, dict[str, Any]] = {}
    for item in dag_data.get("dag", {}).get("tasks", []):
        entry = item.get("__var", item) if isinstance(item, dict) else {}
        if "task_id" in entry:
            tasks[str(entry["task_id"])] = entry
    return tasks


def start_kwargs(task_entry: dict[str, Any]) -> dict[str, Any] | None:
    """The arguments of smartsensor's start trigger that a task's serialized entry carries, as the trigger takes
    them: a parked task's ``PARKED_FIELD``, else its start-trigger arguments (a task that starts in the triggerer;
    a parked one serialized by a provider older than ``PARKED_FIELD``); None when the task carries none (not a
    smart sensor, or one that takes the ``execute`` path)."""
    parked = task_entry.get(PARKED_FIELD)
    if isinstance(parked, str):
        decoded = deserialize_value(json.loads(parked))
        return dict(decoded) if isinstance(decoded, dict) else None
    encoded = task_entry.get("start_trigger_args")
    if not isinstance(encoded, dict) or encoded.get("trigger_cls") != START_CLASSPATH:
        return None
    kwargs = encoded.get("trigger_kwargs")
    if kwargs is None:
        return None
    decoded = deserialize_value(kwargs)
    return dict(decoded) if isinstance(decoded, dict) else None


def rendered_check(kwargs: dict[str, Any], context: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The check a try registers, from its start-trigger arguments and its run's template context: the service's
    class name and persist fields. Raises what rendering (``jinja2.UndefinedError`` under ``StrictUndefined``…) or
    reading the check raises."""
    rules = TemplateRules.from_kwargs(kwargs.get("native"), kwargs.get("undefined"), kwargs.get("jinja_options"))
    return check_from(str(kwargs["sensor_class"]), kwargs["fields"], rules, context)


def check_from(
    sensor_class: str, fields: dict[str, Any], rules: TemplateRules, context: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """``sensor_class``'s check from its unrendered ``fields`` rendered with ``context`` by the DAG's ``rules``: what
    a parked try (``rendered_check``) and a try that starts in the triggerer both register."""
    rendered = render_fields(dict(fields), context, rules)
    return check_of(sensor_class, SimpleNamespace(**rendered))
