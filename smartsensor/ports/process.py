"""What a process hears from the database (``Notifications``)."""

from __future__ import annotations

from typing import Callable, Protocol


class Notifications(Protocol):
    """A process's notifications from the database, by channel (``adapters.sql.notifications.NotificationHub``):
    hints that something changed, each read from the database again before anything acts on it."""

    def subscribe(
        self, channel: str, deliver: Callable[[list[str]], None], on_outage: Callable[[], None] | None = None
    ) -> None:
        """Deliver ``channel``'s payloads to ``deliver``; ``on_outage`` hears that the database is away, and again
        when notifications are heard again (one sent in between was lost: read again). Before ``start``."""
        ...

    def start(self, timeout: float = 30.0) -> bool:
        """Start delivering; True once listening (every notification from then on is delivered), False when the
        first attempt failed or ``timeout`` passed (it goes on trying)."""
        ...
