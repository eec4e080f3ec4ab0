"""Whether a smartsensor task starts in the triggerer, and with what.

Airflow's ``start_from_trigger`` defers a task straight from the scheduler, with the trigger and kwargs of the
task's ``start_trigger_args``: no worker runs the task's ``execute``, no slot is taken. With ``end_from_trigger``
a try then goes scheduled → deferred → success without ever touching a worker. Airflow reads both attributes
when it serializes the DAG (the dag-processor, at parse time), so they are computed from the task as it is then:
after its constructor and the cluster policy, once its DAG is known (``StartsInTriggerer``).

A task starts in the triggerer when all of these hold, and takes today's ``execute`` path otherwise:

- the running Airflow starts tasks from the trigger (2.10.x, 3.3+; ``_compat.can_start_from_trigger``);
- the task did not opt out (``smartsensor_start_from_trigger=False``, ``[smartsensor] start_from_trigger``);
- smartsensor can read its check: a field without templates that it cannot (a filter with OR or ranges) takes the
  execute path, which fails the try (a drop-in) or runs Airflow's own sensor (a task routed by the policy);
- it is not mapped (a mapped task copies the class's attributes, Airflow's defaults);
- the triggerer can render its check's templates (``template_problem``): the trigger renders them itself, with
  the run's context, by the DAG's own rules (``template_rules``: ``StrictUndefined`` unless the DAG sets another
  ``template_undefined``, its ``jinja_environment_kwargs``, ``render_template_as_native_obj``), read here where the
  DAG is. On 3.3 that context is Airflow's own; on 2.10 the triggerer has no DAG, so the trigger builds the context
  from the run's row and supports only ``CONTEXT_2_10``. Neither has a DAG's ``user_defined_macros`` or
  ``user_defined_filters`` (they are not serialized), nor its template search path (a template that includes
  another), nor rules that cannot travel as data: those tasks take the execute path, where Airflow renders them.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any, NamedTuple

import jinja2
from jinja2 import meta, nodes

from smartsensor_airflow._compat import (
    StartTriggerArgs,
    airflow_conf,
    airflow_version,
    can_start_from_trigger,
    parsing_for_task_run,
    read_variable,
    serialize_value,
    template_environment,
)
from smartsensor_airflow.checks import CHECK_FIELDS, check_of
from smartsensor_airflow.template_rules import TemplateRules, rules_of

log = logging.getLogger(__name__)

START_CLASSPATH = "smartsensor_airflow.triggers.SmartSensorStartTrigger"
DEFAULT_POOL = "default_pool"  # Airflow's own, on 2.10 and 3.x
DEFAULT_PARK_POOL = "smartsensor_parked"
# The serialized task's field that carries a parked task's check for the attendant (``parked_check``).
PARKED_FIELD = "smartsensor_parked"
# The template variables the 2.10 trigger can give a check's templates: what it reads from the run's row.
CONTEXT_2_10 = frozenset(
    {
        "ds",
        "ds_nodash",
        "ts",
        "ts_nodash",
        "ts_nodash_with_tz",
        "logical_date",
        "execution_date",
        "data_interval_start",
        "data_interval_end",
        "run_id",
        "params",
        "macros",
    }
)


def check_fields(task: Any) -> dict[str, Any]:
    """The attributes a task's check is made of (unrendered), by name."""
    return {name: getattr(task, name) for name in CHECK_FIELDS[task.smartsensor_class]}


def _templates(value: Any) -> list[str]:
    """The strings inside a field's value that Jinja would render."""
    if isinstance(value, str):
        return [value] if ("{{" in value or "{%" in value or "{#" in value) else []
    if isinstance(value, (list, tuple, set)):
        return [t for item in value for t in _templates(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _templates(item)]
    return []


def dag_of(task: Any) -> Any:
    """The task's DAG, or None while it has none (Airflow 3 raises then)."""
    try:
        return task.dag
    except (AttributeError, RuntimeError):
        return None


class _TemplateUse(NamedTuple):
    """What one template text uses, read once per process (Airflow reads a task's start arguments about ten
    times while it parses and serializes a DAG, and a DAG's tasks share a few texts)."""

    error: str | None
    variables: frozenset[str]
    filters: frozenset[str]
    includes: bool


@functools.lru_cache(maxsize=4096)
def _template_use(text: str) -> _TemplateUse:
    try:
        tree = template_environment(native=False).parse(text)
    except jinja2.TemplateSyntaxError as exc:
        return _TemplateUse(str(exc), frozenset(), frozenset(), False)
    return _TemplateUse(
        None,
        frozenset(meta.find_undeclared_variables(tree)),
        frozenset(f.name for f in tree.find_all(nodes.Filter)),
        any(isinstance(n, (nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends)) for n in tree.body),
    )


def template_problem(task: Any, parked: bool = False) -> str | None:
    """Why the triggerer (``parked``: the parking attendant, which renders from the run's row on every version)
    cannot render ``task``'s check (a sentence for the log), or None when it can."""
    dag = dag_of(task)
    _, problem = rules_of(dag)
    if problem is not None:  # even without a "{{": rules that change the syntax may make templates of other text
        return problem
    templates = [(name, text) for name, value in check_fields(task).items() for text in _templates(value)]
    macros = set(getattr(dag, "user_defined_macros", None) or ())
    filters = set(getattr(dag, "user_defined_filters", None) or ())
    for name, text in templates:
        use = _template_use(text)
        if use.error is not None:
            return f"its {name} is not a valid template: {use.error}"
        if use.variables & macros or use.filters & filters:
            return f"its {name} uses the DAG's user-defined macros or filters"
        if (parked or airflow_version()[0] == 2) and not use.variables <= CONTEXT_2_10:
            unknown = ", ".join(sorted(use.variables - CONTEXT_2_10))
            who = "the parking attendant" if parked else "a 2.10 triggerer"
            return f"its {name} uses {unknown}, which {who} cannot give"
        if use.includes:
            return f"its {name} includes other templates"
    return None


def park_setting() -> bool | None:
    """``[smartsensor] park``: True (always park), False (never), or None for ``auto``, the default (park while a
    parking attendant is alive: ``attendant_alive``). A value it cannot read is ``auto``, logged."""
    return _park_value(str(airflow_conf.get("smartsensor", "park", fallback="auto") or "auto").strip().lower())


@functools.lru_cache(maxsize=8)
def _park_value(text: str) -> bool | None:
    """``park_setting`` of one text (a value it cannot read logged once per process)."""
    if text in ("true", "on", "yes", "1"):
        return True
    if text in ("false", "off", "no", "0"):
        return False
    if text != "auto":
        log.error("smartsensor: [smartsensor] park = %r: expected auto, True or False; auto it is", text)
    return None


def park_pool(task: Any = None) -> str | None:
    """The pool ``task``'s tries park in (``[smartsensor] park_pool``) when parking is on for it (its
    ``smartsensor_park``, else ``[smartsensor] park``; ``auto`` while an attendant is alive), else None."""
    wanted = getattr(task, "smartsensor_park", None) if task is not None else None
    if wanted is None:
        wanted = park_setting()
        if wanted is None:
            wanted = attendant_alive()
    if not wanted:
        return None
    return airflow_conf.get("smartsensor", "park_pool", fallback=DEFAULT_PARK_POOL) or DEFAULT_PARK_POOL


ATTENDANT_VARIABLE = "smartsensor_parking"  # the attendants' heartbeat, as DAG parsing can read it (parking_health)
ALIVE_CACHE = 10.0  # seconds a process keeps what it read of the heartbeat
_alive: list[Any] = [None, -1e9]  # what was read, and when (monotonic)


def attendant_alive() -> bool:
    """Whether a parking attendant is alive, by its heartbeat (the ``ATTENDANT_VARIABLE`` Variable, younger than
    ``[smartsensor] park_attendant_timeout``), read at most every ``ALIVE_CACHE`` seconds per process. Never on a
    worker that parses to run a try (its pool is its own there) and False when it cannot be read: with ``park =
    auto`` a deployment with no attendant keeps the triggerer path, and tries park once one runs (at the next parse
    of their DAG files)."""
    if parsing_for_task_run():
        return False
    now = time.monotonic()
    if now - _alive[1] >= ALIVE_CACHE:
        try:
            text = read_variable(ATTENDANT_VARIABLE)
            alive_at = None if text is None else datetime.fromisoformat(json.loads(text)["alive_at"])
        except Exception:
            log.warning("smartsensor: the parking attendant's heartbeat could not be read", exc_info=True)
            alive_at = None
        _alive[0], _alive[1] = alive_at, now
    alive_at = _alive[0]
    if alive_at is None:
        return False
    limit = float(airflow_conf.get("smartsensor", "park_attendant_timeout", fallback="60") or 60)
    return bool((datetime.now(timezone.utc) - alive_at).total_seconds() <= limit)


def parked_start_args(task: Any) -> StartTriggerArgs | None:
    """The start arguments a parked task carries for the attendant, or None when its tries do not park: parking is
    off for it, or the attendant cannot render its check."""
    return start_trigger_args(task, parked=True) if park_pool(task) is not None else None


# What Airflow runs after a try ends, by how it ends, that only a worker runs for a parked try (``after_end``).
AFTER_END_CALLBACKS = {
    "success": ("on_success_callback",),
    "skipped": ("on_skipped_callback",),
    "failed": ("on_failure_callback",),
    "error": ("on_failure_callback", "on_retry_callback"),
}


def own_pool(task: Any) -> str:
    """The pool ``task`` was given (Airflow's default pool when none): where its tries run when not parked."""
    return task.__dict__.get("_smartsensor_own_pool") or task.__dict__.get("pool") or DEFAULT_POOL


def after_end(task: Any) -> dict[str, list[str]]:
    """end → what ``task`` has Airflow run after a try ends that way (its callbacks, ``email`` on failure or retry,
    its ``outlets``' asset events), by name; an end with nothing listed needs no worker. Read when the DAG is
    serialized (callbacks are not serialized as such)."""
    work: dict[str, list[str]] = {}
    emails = bool(getattr(task, "email", None))
    for end, names in AFTER_END_CALLBACKS.items():
        have = [n for n in (*names, "on_execute_callback") if getattr(task, n, None)]
        if end == "success" and getattr(task, "outlets", None):
            have.append("outlets")
        if (
            end in ("failed", "error")
            and emails
            and (getattr(task, "email_on_failure", False) or getattr(task, "email_on_retry", False))
        ):
            have.append("email")
        if have:
            work[end] = have
    return work


def parked_check(task: Any) -> str | None:
    """What a parked task carries for the attendant in its serialized DAG (``PARKED_FIELD``): its start arguments
    (``parked_start_args``), its own pool (where a try the attendant hands back runs: ``own_pool``) and what Airflow
    runs after its tries end (``after_end``), as Airflow's serializer encodes them, in a JSON string, which every
    Airflow version keeps and reads back as it is; None when its tries do not park. Not in ``start_trigger_args``:
    Airflow 2.10's scheduler builds a try's whole template context for every task that has them
    (``DagRun.schedule_tis``: three queries for the previous runs a try), ~1 s for 300 tries on the scheduler's loop."""
    args = parked_start_args(task)
    if args is None:
        return None
    try:
        extra = {"pool": own_pool(task), "after_end": after_end(task)}
    except Exception:  # read while Airflow serializes the DAG: never fail the file for it
        log.warning("smartsensor: %s: what runs after its end unread", getattr(task, "task_id", "?"), exc_info=True)
        extra = {"pool": own_pool(task), "after_end": {end: ["unknown"] for end in AFTER_END_CALLBACKS}}
    return json.dumps(serialize_value({**args.trigger_kwargs, **extra}))


def start_trigger_args(task: Any, parked: bool = False) -> StartTriggerArgs | None:
    """What Airflow starts ``task`` with in the triggerer, or None when the task takes the ``execute`` path.
    ``parked``: what a parked try's attendant reads from the serialized DAG (the same arguments, with the task's
    params on every version), or None when it cannot render the task's check."""
    if not getattr(task, "smartsensor_start_from_trigger", False):
        return None
    if not parked and not can_start_from_trigger():  # a parked try needs no trigger: it parks on 3.0-3.2 too
        return None
    try:
        fields = check_fields(task)
        if template_problem(task, parked) is not None:
            return None
        if not _templates(list(fields.values())) and not _readable(task):
            return None  # a check smartsensor cannot read (OR, ranges): the execute path says so, or runs Airflow's
        rules, _ = rules_of(dag_of(task))
        rules = rules or TemplateRules()  # no template to render (template_problem said so otherwise)
        params = _params(task) if parked or airflow_version()[0] == 2 else None
        poll = float(task.smartsensor_poll_interval)
        kwargs = {
            "sensor_class": task.smartsensor_class,
            "fields": fields,
            "exec_values": task.exec_values(),
            "conn_id": task.smartsensor_conn_id,
            "poll_interval": poll,
            "end_from_trigger": bool(task.end_from_trigger),
            "settle": float(task.smartsensor_resume_settle),
            "fallback_grace": float(task.smartsensor_fallback_grace),
            "execution_timeout": None
            if task.execution_timeout is None
            else float(task.execution_timeout.total_seconds()),
            "native": rules.native,
            "undefined": rules.undefined,
            "jinja_options": json.loads(rules.options),
            "params": params,
            "hold": float(task.smartsensor_execute_wait),
        }
        backstop = task.smartsensor_backstop()
    except AttributeError:  # read while the task is being built (Airflow validates after each __init__)
        return None
    except Exception:  # Airflow reads this while it parses a DAG file: never fail the file for it
        log.warning("smartsensor: %s takes the execute path", getattr(task, "task_id", "?"), exc_info=True)
        return None
    # A fresh instance per task (apache/airflow#70888: a shared one leaks kwargs between tasks). The timeout is a
    # backstop a little after the service's own (the task's timeout), whose verdict carries the reason.
    return StartTriggerArgs(
        trigger_cls=START_CLASSPATH,
        next_method="execute_complete",
        trigger_kwargs=kwargs,
        next_kwargs=None,
        timeout=backstop,
    )


def _readable(task: Any) -> bool:
    """Whether smartsensor can read the check of a task whose fields hold no template (once per distinct check)."""
    fields = check_fields(task)
    key = (task.smartsensor_class, repr(sorted(fields.items())))
    if key not in _READABLE:
        try:
            check_of(task.smartsensor_class, SimpleNamespace(**fields))
            readable = True
        except (ValueError, TypeError):  # UnsupportedPartitionFilter is a ValueError
            readable = False
        if len(_READABLE) >= 4096:
            _READABLE.clear()
        _READABLE[key] = readable
    return _READABLE[key]


_READABLE: dict[tuple[str, str], bool] = {}


def _params(task: Any) -> dict[str, Any] | None:
    """The task's params as values (2.10's trigger renders ``params`` itself), None when it has none."""
    params = getattr(task, "params", None)
    if not params:
        return None
    dump = params.dump() if hasattr(params, "dump") else dict(params)
    return {str(k): v for k, v in dump.items()}


class StartsInTriggerer:
    """``start_from_trigger`` and ``start_trigger_args`` of a smartsensor task, computed from the task when Airflow
    reads them (``start_trigger_args``); a value set on the task wins. Read on the class (as a mapped task copies
    them), Airflow's defaults: a mapped task takes the ``execute`` path. A task that parks (``parked_start_args``)
    has neither: its check travels in ``PARKED_FIELD`` (``ParkedCheck``)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, task: Any, owner: type | None = None) -> Any:
        if task is None:
            return None if self.name == "start_trigger_args" else False
        if self.name in task.__dict__:
            return task.__dict__[self.name]
        if parked_start_args(task) is not None:
            return None if self.name == "start_trigger_args" else False
        args = start_trigger_args(task)
        return args if self.name == "start_trigger_args" else args is not None

    def __set__(self, task: Any, value: Any) -> None:
        task.__dict__[self.name] = value


class ParkedCheck:
    """A smartsensor task's ``PARKED_FIELD`` (``parked_check``), computed when Airflow serializes the task; a value
    set on the task wins."""

    def __get__(self, task: Any, owner: type | None = None) -> Any:
        if task is None:
            return None
        if PARKED_FIELD in task.__dict__:
            return task.__dict__[PARKED_FIELD]
        return parked_check(task)

    def __set__(self, task: Any, value: Any) -> None:
        task.__dict__[PARKED_FIELD] = value


class ParkingPool:
    """A smartsensor task's ``pool``: the parking pool (``park_pool``) when its tries park, else the pool
    it was given (Airflow's default pool when none). Computed when Airflow reads it: when it serializes the DAG (the
    scheduler then parks the task's tries); on a worker (parsing to run a try) the task's own pool."""

    def __get__(self, task: Any, owner: type | None = None) -> Any:
        if task is None:
            return DEFAULT_POOL
        # A task the policy routed was given its pool before its class gained this descriptor: its own attribute.
        own = own_pool(task)
        if airflow_version()[0] == 2 and parsing_for_task_run():
            # A 2.10 worker checks the slots of the task's pool before it runs a try: a try here was queued from its
            # own pool (handed back by the attendant) or from the parking pool the valve opened (whose slots the
            # scheduler already counted); the parking pool's 0 slots would send the first back for good.
            return own
        return park_pool(task) if parked_start_args(task) is not None else own

    def __set__(self, task: Any, value: Any) -> None:
        task.__dict__["_smartsensor_own_pool"] = value
