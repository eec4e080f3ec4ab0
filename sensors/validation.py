"""Checks of values a sensor definition brings in: task and DAG ids, text, and persist field values.

Each refuses a bad value with a SensorDefinitionError naming the field, before anything is stored.
"""

from __future__ import annotations

import re
from typing import Any

from smartsensor.sensors.errors import SensorDefinitionError

_ID_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f]")


def validate_id(field: str, value: Any) -> str:
    """A dag_id or task_id: a non-empty string of at most 250 characters, printable, valid UTF-8."""
    if not isinstance(value, str):
        raise SensorDefinitionError(f"{field} must be a string, got a {type(value).__name__}")
    if not value.strip() or len(value) > 250:
        raise SensorDefinitionError(f"{field} must be a non-empty string of at most 250 characters, got {value[:80]!r}")
    if _ID_FORBIDDEN.search(value):
        raise SensorDefinitionError(f"{field} must not contain control characters (NUL, newline, ...), got {value!r}")
    check_utf8(field, value)
    return value


def check_utf8(field: str, value: str) -> None:
    """Refuse strings that cannot be stored as UTF-8 (lone surrogates such as '\\udc80')."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SensorDefinitionError(
            f"{field}: {value[:80]!r} is not valid Unicode text (lone surrogate at position {exc.start})"
        ) from None


MAX_NESTING = 20
MAX_PERSIST_CHARS = 1_000_000


def check_persist_value(field: str, value: Any) -> None:
    """A persist field's value must be plain JSON-like data: str/int/float/bool/None, lists, tuples and
    dicts with string keys, nested at most MAX_NESTING deep, without cycles, of bounded size.

    Walks iteratively, so a self-referencing or absurdly deep value is a clear error naming the
    field instead of a RecursionError somewhere later.
    """
    leave = object()  # (leave, id(container)) is popped after the container's children: it leaves the path
    stack: list[tuple[Any, int]] = [(value, 0)]  # (item, depth), or (leave, id of a container)
    on_path: set[int] = set()
    chars = 0
    while stack:
        item, depth = stack.pop()
        if item is leave:
            on_path.discard(depth)  # here the second slot is the container's id
            continue
        if isinstance(item, str):
            check_utf8(f"field {field!r}", item)
            chars += len(item)
        elif item is None or isinstance(item, (bool, int, float)):
            chars += 8
        elif isinstance(item, (list, tuple, dict)):
            if depth >= MAX_NESTING:
                raise SensorDefinitionError(f"field {field!r}: nested more than {MAX_NESTING} levels deep")
            if id(item) in on_path:
                raise SensorDefinitionError(f"field {field!r}: contains itself (a self-referencing list or dict)")
            on_path.add(id(item))
            stack.append((leave, id(item)))
            if isinstance(item, dict):
                for k, v in item.items():
                    if not isinstance(k, str):
                        raise SensorDefinitionError(
                            f"field {field!r}: dict keys must be strings, got {type(k).__name__}"
                        )
                    stack.append((k, depth + 1))
                    stack.append((v, depth + 1))
            else:
                stack.extend((v, depth + 1) for v in item)
        else:
            raise SensorDefinitionError(
                f"field {field!r}: values must be text, numbers, booleans, None, lists or "
                f"dicts (JSON), got {type(item).__name__}"
            )
        if chars > MAX_PERSIST_CHARS:
            raise SensorDefinitionError(f"field {field!r}: larger than {MAX_PERSIST_CHARS} characters")
