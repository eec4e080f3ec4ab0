"""The rules a DAG renders its tasks' templates by, carried from the DAG file's parse to the triggerer.

Airflow renders a task's template fields in the environment its DAG builds (``DAG.get_template_env``): Airflow's
sandboxed (or, with ``render_template_as_native_obj``, native) environment with ``undefined=DAG.template_undefined``
(``jinja2.StrictUndefined`` unless the DAG says otherwise: a name the context lacks is an error, not ""), the
``jinja2.ext.do`` extension, then the DAG's ``jinja_environment_kwargs``, a loader over the DAG's folder and
``template_searchpath``, and its user-defined macros and filters. A try that starts in the triggerer is rendered by
smartsensor's trigger instead (``trigger_context``), where the DAG object is not at hand (2.10's triggerer has none;
3.3's serialized DAG keeps neither ``template_undefined`` nor ``jinja_environment_kwargs``). So what the trigger
needs is read when the DAG is parsed, where the real DAG is, and sent with the trigger's kwargs as
``TemplateRules``. A DAG whose rules cannot travel as data (an ``undefined`` class of its own, environment options
that are objects or that change the template syntax) is a template problem (``start.template_problem``): its tries
take the ``execute`` path, where Airflow renders them itself. So does a template that includes, imports or extends
another (the loader's search path stays with the DAG's files).
"""

from __future__ import annotations

import functools
import importlib
import json
from dataclasses import dataclass
from typing import Any

import jinja2

STRICT = "jinja2.runtime.StrictUndefined"  # Airflow's default template_undefined, on 2.10 and 3.x
UNDEFINED_PACKAGES = frozenset({"jinja2", "airflow"})  # where a template_undefined the trigger carries may live
# Options of jinja_environment_kwargs that change how a template renders, not what it is parsed as, and that are
# plain values: the trigger applies them as Airflow does. Any other option (a delimiter, a finalize function, a
# loader, extensions) sends the task's tries to the execute path.
CARRIED_OPTIONS = frozenset(
    {"autoescape", "trim_blocks", "lstrip_blocks", "keep_trailing_newline", "newline_sequence", "optimized"}
)


@dataclass(frozen=True)
class TemplateRules:
    """What the trigger renders a check with: native or sandboxed, the ``undefined`` class by import path, and the
    carried environment options as canonical JSON (hashable: compiled templates are cached by it)."""

    native: bool = False
    undefined: str = STRICT
    options: str = "{}"

    @classmethod
    def from_kwargs(cls, native: Any, undefined: Any, options: Any) -> TemplateRules:
        """The rules from a trigger's kwargs; a trigger serialized before they existed gets Airflow's default."""
        return cls(bool(native), str(undefined or STRICT), json.dumps(options or {}, sort_keys=True))


def class_path(cls: type) -> str:
    """``module.QualName`` of a class."""
    return f"{cls.__module__}.{cls.__qualname__}"


@functools.lru_cache(maxsize=64)
def undefined_class(path: str) -> type[jinja2.Undefined]:
    """The ``jinja2.Undefined`` subclass at ``path`` (``module.QualName``); ValueError when there is none."""
    module, _, name = path.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"template_undefined {path!r} cannot be imported: {exc}") from None
    if not (isinstance(found, type) and issubclass(found, jinja2.Undefined)):
        raise ValueError(f"template_undefined {path!r} is not a jinja2.Undefined class")
    return found


def rules_of(dag: Any) -> tuple[TemplateRules | None, str | None]:
    """The rules ``dag`` renders by, or None and why the trigger cannot carry them (a sentence for the log). A task
    without a DAG yet gets Airflow's defaults."""
    if dag is None:
        return TemplateRules(), None
    native = bool(getattr(dag, "render_template_as_native_obj", False))
    undefined = getattr(dag, "template_undefined", None) or jinja2.StrictUndefined
    path = class_path(undefined)
    # Only classes that every Airflow process can import: one defined in a DAG file (or a module beside it) is
    # importable where the file was parsed, not necessarily in the triggerer.
    try:
        importable = path.split(".")[0] in UNDEFINED_PACKAGES and undefined_class(path) is undefined
    except ValueError:
        importable = False
    if not importable:
        return None, f"its DAG's template_undefined ({path}) is not one of jinja2's or Airflow's"
    options = dict(getattr(dag, "jinja_environment_kwargs", None) or {})
    if "undefined" in options:  # Airflow applies jinja_environment_kwargs after template_undefined
        return None, "its DAG's jinja_environment_kwargs set undefined, which the triggerer does not carry"
    for name, value in sorted(options.items()):
        if name not in CARRIED_OPTIONS or not isinstance(value, (bool, int, str)):
            return None, f"its DAG's jinja_environment_kwargs set {name}, which the triggerer does not carry"
    return TemplateRules(native, path, json.dumps(options, sort_keys=True)), None


def environment_options(rules: TemplateRules) -> dict[str, Any]:
    """The keyword arguments of the environment ``rules`` describe, as ``DAG.get_template_env`` builds them (no
    loader: a template that loads another takes the execute path)."""
    return {"undefined": undefined_class(rules.undefined), "extensions": ["jinja2.ext.do"], **json.loads(rules.options)}
