"""Run inside an Airflow venv (not by pytest): which tasks start in the triggerer and with what, as Airflow's own
serializer sees them, and the check's templates rendered by the trigger's renderer beside Airflow's. Prints one
JSON line for tests/airflow/test_provider_in_airflow.py."""

from __future__ import annotations

import importlib
import json
from datetime import datetime, timedelta, timezone
from typing import Any

import airflow
import jinja2
from airflow import DAG

from smartsensor_airflow import policy, sensors
from smartsensor_airflow._compat import hive_sensor_class
from smartsensor_airflow.parked_checks import rendered_check, serialized_tasks, start_kwargs
from smartsensor_airflow.start import PARKED_FIELD, check_fields, template_problem
from smartsensor_airflow.template_rules import TemplateRules
from smartsensor_airflow.trigger_context import release_run_objects, render_fields, row_context

try:  # Airflow 3
    from airflow.serialization.serialized_objects import DagSerialization as Serializer
except ImportError:  # Airflow 2.10
    from airflow.serialization.serialized_objects import SerializedDAG as Serializer

out: dict[str, Any] = {"airflow": airflow.__version__}
NAMED = sensors.NamedHivePartitionSensor

with DAG("starts", start_date=datetime(2026, 1, 1), schedule=None, user_defined_macros={"mine": "x"}) as dag:
    plain = NAMED(task_id="plain", partition_names=["db.t/ds={{ ds }}"], timeout=600, poke_interval=30)
    params = NAMED(task_id="params", partition_names=["db.t/ds={{ params.day }}"], params={"day": "2026-01-02"})
    macro = NAMED(task_id="macro", partition_names=["db.t/ds={{ macros.ds_add(ds, -1) }}"])
    run_conf = NAMED(task_id="run_conf", partition_names=["db.t/ds={{ dag_run.conf['day'] }}"])
    user_macro = sensors.HivePartitionSensor(task_id="user_macro", table="t", schema="db", partition="ds='{{ mine }}'")
    unreadable = sensors.HivePartitionSensor(task_id="unreadable", table="t", schema="db", partition="ds > '1'")
    opted_out = NAMED(task_id="opted_out", partition_names=["db.t/ds=1"], smartsensor_start_from_trigger=False)
    limited = NAMED(task_id="limited", partition_names=["db.t/ds=1"], execution_timeout=timedelta(seconds=30))
    mapped = NAMED.partial(task_id="mapped").expand(partition_names=[["db.t/ds=1"], ["db.t/ds=2"]])
    airflows = hive_sensor_class("NamedHivePartitionSensor")(task_id="routed", partition_names=["db.t/ds={{ ds }}"])
    kept = hive_sensor_class("NamedHivePartitionSensor")(task_id="kept", partition_names=["db.t/ds={{ ds }}"])
    # A param the run does not have: Airflow's default StrictUndefined makes it an error, never "".
    missing = sensors.HivePartitionSensor(task_id="missing", table="t", schema="db", partition="{{ params.nope }}")
    missing_db = NAMED(task_id="missing_db", partition_names=["{{ params.db }}.t/ds={{ ds }}"])
policy.route(airflows, policy.PolicySettings(enabled=True))
policy.route(kept, policy.PolicySettings(enabled=True, start_from_trigger=False))


class OwnUndefined(jinja2.Undefined):
    """A template_undefined defined in a DAG file: the triggerer could not import it."""


# A DAG that asks for lenient rendering and a plain environment option; two whose rules cannot travel as data.
LENIENT = {"template_undefined": jinja2.Undefined, "jinja_environment_kwargs": {"keep_trailing_newline": True}}
with DAG("lenient", start_date=datetime(2026, 1, 1), schedule=None, **LENIENT) as lenient_dag:
    lenient = NAMED(task_id="lenient", partition_names=["db.t/ds={{ ds }}{{ params.nope }}"])
with DAG("own_undefined", start_date=datetime(2026, 1, 1), schedule=None, template_undefined=OwnUndefined) as own_dag:
    own = NAMED(task_id="own", partition_names=["db.t/ds={{ ds }}"])
DELIMITERS = {"variable_start_string": "[[", "variable_end_string": "]]"}
with DAG("delimiters", start_date=datetime(2026, 1, 1), schedule=None, jinja_environment_kwargs=DELIMITERS) as d_dag:
    delimited = NAMED(task_id="delimited", partition_names=["db.t/ds=[[ ds ]]"])

back = Serializer.from_dict(Serializer.to_dict(dag))  # what the scheduler and triggerer read
out["starts"] = {t.task_id: bool(back.get_task(t.task_id).start_from_trigger) for t in dag.tasks}
out["reasons"] = {t.task_id: template_problem(t) for t in (plain, params, macro, run_conf, user_macro)}


def kwargs_of(task_id: str, serialized: Any = None) -> dict[str, Any] | None:
    args = (serialized or back).get_task(task_id).start_trigger_args
    if args is None:
        return None
    kwargs = args.trigger_kwargs
    if isinstance(kwargs, dict) and "__var" in kwargs:  # 3.x keeps them encoded until the triggerer decodes them
        from airflow.serialization.serialized_objects import BaseSerialization

        kwargs = BaseSerialization.deserialize(kwargs)
    return {
        "classpath": args.trigger_cls,
        "next_method": args.next_method,
        "timeout": args.timeout.total_seconds(),
        "kwargs": kwargs,
    }


out["plain"] = kwargs_of("plain")
out["limited_execution_timeout"] = (kwargs_of("limited") or {}).get("kwargs", {}).get("execution_timeout")
out["routed_class"] = (kwargs_of("routed") or {}).get("kwargs", {}).get("sensor_class")
# Per instance (apache/airflow#70888): each read is a new object, and a change to one task's never reaches another.
first = plain.start_trigger_args
first.trigger_kwargs["fields"]["partition_names"] = ["changed"]
out["per_instance"] = plain.start_trigger_args.trigger_kwargs["fields"] == {"partition_names": ["db.t/ds={{ ds }}"]}

# The trigger rebuilt from its kwargs, as the triggerer does, and serialized back.
plain_kwargs = (out["plain"] or {})["kwargs"]
module, _, name = out["plain"]["classpath"].rpartition(".")
trigger = getattr(importlib.import_module(module), name)(**plain_kwargs)
out["round_trip"] = trigger.serialize() == (out["plain"]["classpath"], plain_kwargs)

# The trigger's renderer against Airflow's own rendering of the same field, with the same context values.
day = datetime(2026, 11, 22)
context = {"ds": "2026-11-22", "ds_nodash": "20261122", "params": {"day": "2026-01-02"}, "logical_date": day}
context["macros"] = importlib.import_module("airflow.macros")
fields = {"partition_names": ["db.t/ds={{ ds }}", "db.t/ds={{ macros.ds_add(ds, -1) }}/x={{ params.day }}"]}
out["rendered"] = render_fields(fields, context, TemplateRules())
out["rendered_by_airflow"] = {"partition_names": plain.render_template(fields["partition_names"], context)}
out["rendered_native"] = render_fields(
    {"partition_names": "{{ ['db.t/ds=' ~ ds] }}"}, context, TemplateRules(native=True)
)


def trigger_of(task_id: str, serialized: Any = None) -> Any:
    """The start trigger of ``task_id`` as the triggerer builds it: from the kwargs Airflow serialized."""
    seen = kwargs_of(task_id, serialized) or {}
    module, _, name = seen["classpath"].rpartition(".")
    return getattr(importlib.import_module(module), name)(**seen["kwargs"])


def outcome(render: Any) -> Any:
    """What rendering gave: its value, or the name of the exception it raised."""
    try:
        return render()
    except Exception as exc:  # noqa: BLE001 - the exception's type is what is compared
        return type(exc).__name__


def trigger_rendering(task_id: str, context: dict[str, Any], serialized: Any = None) -> Any:
    """The task's check fields as its start trigger renders them, by the rules it was serialized with."""
    trigger = trigger_of(task_id, serialized)
    return render_fields(trigger.fields, context, trigger.rules)


def airflows_rendering(task: Any, context: dict[str, Any]) -> Any:
    """The task's check fields as Airflow renders them (the DAG's environment), or the exception's name."""
    return outcome(lambda: {f: task.render_template(v, context) for f, v in check_fields(task).items()})


# A param the run lacks, rendered by Airflow and by the trigger the triggerer builds from the serialized kwargs.
strict_context = {**context, "params": {}}
out["strict"] = {
    task.task_id: {
        "airflow": airflows_rendering(task, strict_context),
        "trigger": outcome(lambda t=task: trigger_rendering(t.task_id, strict_context)),
        "trigger_check": outcome(lambda t=task: trigger_of(t.task_id).check(strict_context)),
    }
    for task in (missing, missing_db)
}
# Native rendering gives a lone undefined name back as the undefined value: it is refused as its text is.
out["strict_native"] = outcome(lambda: render_fields({"p": "{{ params.nope }}"}, strict_context, TemplateRules(True)))
lenient_back = Serializer.from_dict(Serializer.to_dict(lenient_dag))
out["lenient"] = {
    "airflow": airflows_rendering(lenient, strict_context),
    "trigger": outcome(lambda: trigger_rendering("lenient", strict_context, lenient_back)),
    "starts": bool(lenient_back.get_task("lenient").start_from_trigger),
    "undefined": (kwargs_of("lenient", lenient_back) or {})["kwargs"]["undefined"],
    "jinja_options": (kwargs_of("lenient", lenient_back) or {})["kwargs"]["jinja_options"],
}
out["plain_undefined"] = plain_kwargs["undefined"]
out["not_carried"] = {
    "own": template_problem(own),
    "own_starts": bool(Serializer.from_dict(Serializer.to_dict(own_dag)).get_task("own").start_from_trigger),
    "delimited": template_problem(delimited),
    "delimited_starts": bool(Serializer.from_dict(Serializer.to_dict(d_dag)).get_task("delimited").start_from_trigger),
}

if int(airflow.__version__.split(".")[0]) >= 3:
    # What 3.3's runner hands a trigger that starts a task: a RuntimeTaskInstance whose task belongs to a DAG loaded
    # for this trigger alone, and the template context it caches, which the runner also keeps. Once the trigger has
    # let go of them, the DAG can be collected while the runner still holds the instance and the context.
    import gc
    import weakref

    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    loaded = Serializer.from_dict(Serializer.to_dict(dag))
    runtime_ti = RuntimeTaskInstance.model_construct(
        task=loaded.get_task("plain"), task_id="plain", dag_id="starts", run_id="r", try_number=1, map_index=-1
    )
    runtime_ti._cached_template_context = {"dag": loaded, "task": runtime_ti.task, "ti": runtime_ti}
    runners_context = runtime_ti._cached_template_context  # as run_trigger's own parameter keeps it
    dag_ref = weakref.ref(loaded)
    del loaded
    gc.collect()
    out["dag_held_before_release"] = dag_ref() is not None
    release_run_objects(runtime_ti)
    gc.collect()
    out["dag_released"] = dag_ref() is None
    out["ids_kept"] = [runtime_ti.dag_id, runtime_ti.task_id, runtime_ti.run_id, runtime_ti.try_number]

# A parked try's check (parked_checks): carried in its serialized task (start.PARKED_FIELD), read from the DAG's JSON,
# rendered with the run's row, the same as the start trigger's; a task on the execute path carries none. The scheduler
# sees a parked task with no start arguments (2.10 builds a try's template context for a task that has them).
with DAG("parks", start_date=datetime(2026, 1, 1), schedule=None) as parks_dag:
    NAMED(task_id="plain", partition_names=["db.t/ds={{ ds }}"], timeout=600, poke_interval=30, smartsensor_park=True)
    NAMED(task_id="macro", partition_names=["db.t/ds={{ macros.ds_add(ds, -1) }}"], smartsensor_park=True)
    NAMED(
        task_id="opted_out", partition_names=["db.t/ds=1"], smartsensor_start_from_trigger=False, smartsensor_park=True
    )
    sensors.HivePartitionSensor(
        task_id="unreadable", table="t", schema="db", partition="ds > '1'", smartsensor_park=True
    )
parks_json = json.loads(json.dumps(Serializer.to_dict(parks_dag), default=str))
entries = serialized_tasks(parks_json)
parks_back = Serializer.from_dict(parks_json)
out["parked_serialized"] = {
    task_id: {
        "carries_check": PARKED_FIELD in entry,
        "start_trigger_args": entry.get("start_trigger_args"),
        "scheduler_start_args": parks_back.get_task(task_id).start_trigger_args,
        "scheduler_starts": bool(parks_back.get_task(task_id).start_from_trigger),
        "scheduler_pool": parks_back.get_task(task_id).pool,
    }
    for task_id, entry in entries.items()
}
row = ("manual__2026-11-22", datetime(2026, 11, 22, tzinfo=timezone.utc), None, None, None)
out["parked"] = {}
for task_id in ("plain", "macro", "opted_out", "unreadable"):
    parked_kwargs = start_kwargs(entries[task_id])
    if parked_kwargs is None:
        out["parked"][task_id] = None
        continue
    row_ctx = row_context(*row, parked_kwargs.get("params"))
    out["parked"][task_id] = {
        "check": outcome(lambda k=parked_kwargs, c=row_ctx: list(rendered_check(k, c))),
        "trigger_check": outcome(lambda t=task_id, c=row_ctx: list(trigger_of(t).check(c))),
    }
no_date = row_context("asset_triggered__1", None, None, None, None, None)
out["parked_no_logical_date"] = outcome(lambda: rendered_check(start_kwargs(entries["plain"]) or {}, no_date))
# A parked task serialized by a provider older than PARKED_FIELD carried its check in its start arguments.
started_entry = serialized_tasks(json.loads(json.dumps(Serializer.to_dict(dag), default=str)))["plain"]
# The parked field carries the same arguments and two of its own (the task's own pool, what runs after its end).
parked_only = {"pool", "after_end"}
out["older_parked_entry"] = start_kwargs(started_entry) == {
    k: v for k, v in (start_kwargs(entries["plain"]) or {}).items() if k not in parked_only
}
print(json.dumps(out, default=str))
