"""A user's own smart-eligible sensors (no batched check), importable through sensor_modules."""

from __future__ import annotations

import threading
import time
from typing import Any

from smartsensor.sensors import BaseSensor, smart_eligible

POKES: list[str] = []
READY: set[str] = set()


@smart_eligible
class KeySensor(BaseSensor):
    """True once ``key`` is in READY; records every poke."""

    persist_fields = ("key",)

    def __init__(self, task_id: str, key: str, **kw: Any) -> None:
        super().__init__(task_id=task_id, **kw)
        self.key = key

    def poke(self, context: dict[str, Any]) -> bool:
        POKES.append(self.key)
        return self.key in READY


HANG = threading.Event()


@smart_eligible
class HangingSensor(KeySensor):
    """A poke() that blocks until HANG is set (a network call without a timeout)."""

    def poke(self, context: dict[str, Any]) -> bool:
        HANG.wait(600)
        return False


EXPLODE: set[str] = set()


@smart_eligible
class FragileSensor(KeySensor):
    """Its constructor raises for keys in EXPLODE: another version of the class on this host (a deploy skew)."""

    def __init__(self, task_id: str, key: str, **kw: Any) -> None:
        if key in EXPLODE:
            raise RuntimeError(f"this version cannot read key {key!r}")
        super().__init__(task_id=task_id, key=key, **kw)


@smart_eligible
class SlowSensor(BaseSensor):
    """Its poke() sleeps ``seconds``, then says landed: a round that long (a slow call, a Spark start)."""

    persist_fields = ("seconds",)

    def __init__(self, task_id: str, seconds: float, **kw: Any) -> None:
        super().__init__(task_id=task_id, **kw)
        self.seconds = seconds

    def poke(self, context: dict[str, Any]) -> bool:
        time.sleep(self.seconds)
        return True


@smart_eligible
class SparkSensor(KeySensor):
    """Reads ``context['spark']``, as a user's own Spark query would: landed once it has a session."""

    def poke(self, context: dict[str, Any]) -> bool:
        return context["spark"] is not None
