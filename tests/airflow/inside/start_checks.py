"""Run inside an Airflow venv (not by pytest): which tasks start in the triggerer and with what, as Airflow's own
serializer sees them, and the check's templates rendered by the trigger's renderer beside Airflow's. Prints one
JSON line for tests/airflow/test_provider_in_airflow.py."""

from __future__ import annotations

import importlib
import json
from datetime import datetime, timedelta
from typing import Any

import airflow
from airflow import DAG

from smartsensor_airflow import policy, sensors
from smartsensor_airflow._compat import hive_sensor_class
from smartsensor_airflow.start import template_problem
from smartsensor_airflow.trigger_context import release_run_objects, render_fields

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
policy.route(airflows, policy.PolicySettings(enabled=True))
policy.route(kept, policy.PolicySettings(enabled=True, start_from_trigger=False))

back = Serializer.from_dict(Serializer.to_dict(dag))  # what the scheduler and triggerer read
out["starts"] = {t.task_id: bool(back.get_task(t.task_id).start_from_trigger) for t in dag.tasks}
out["reasons"] = {t.task_id: template_problem(t) for t in (plain, params, macro, run_conf, user_macro)}


def kwargs_of(task_id: str) -> dict[str, Any] | None:
    args = back.get_task(task_id).start_trigger_args
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
out["rendered"] = render_fields(fields, context, native=False)
out["rendered_by_airflow"] = {"partition_names": plain.render_template(fields["partition_names"], context)}
out["rendered_native"] = render_fields({"partition_names": "{{ ['db.t/ds=' ~ ds] }}"}, context, native=True)

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
print(json.dumps(out, default=str))
