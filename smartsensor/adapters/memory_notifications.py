"""The in-memory twin of ``ports.Notifications``: what a ``NotificationHub`` delivers from the database, delivered
by a call (``publish``, ``outage``), in the caller's thread. A worker loop, its wake-ups and the ended watch run on
it without a database (tests/unit/test_memory_notifications.py); the hub itself is held to the database's channels
by tests/integration/test_notifications.py."""

from __future__ import annotations

import threading
from typing import Callable


class MemoryNotifications:
    """Subscriptions by channel; ``publish`` delivers a channel's payloads to each of its subscribers once, in
    subscription order, after ``start`` (before it, as the hub, nothing is listening: the payloads are dropped)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscriptions: list[tuple[str, Callable[[list[str]], None], Callable[[], None] | None]] = []
        self.started = False

    def subscribe(
        self, channel: str, deliver: Callable[[list[str]], None], on_outage: Callable[[], None] | None = None
    ) -> None:
        """Deliver ``channel``'s payloads to ``deliver`` (before ``start``, as the hub requires)."""
        if self.started:
            raise RuntimeError("subscribe before the hub starts")
        with self._lock:
            self._subscriptions.append((channel, deliver, on_outage))

    def start(self, timeout: float = 30.0) -> bool:
        """Listening from now on (at once: there is no database to reach)."""
        self.started = True
        return True

    def publish(self, channel: str, payloads: list[str]) -> int:
        """Deliver ``payloads`` on ``channel``; how many subscribers got them (0 before ``start``)."""
        if not self.started or not payloads:
            return 0
        with self._lock:
            targets = [deliver for name, deliver, _ in self._subscriptions if name == channel]
        for deliver in targets:
            deliver(list(payloads))
        return len(targets)

    def outage(self) -> None:
        """The database went away: every subscriber's ``on_outage``."""
        with self._lock:
            hooks = [hook for _, _, hook in self._subscriptions if hook is not None]
        for hook in hooks:
            hook()
