"""This server process's own request counts, which /metrics shows as ``smartsensor_api_requests``.

Each label comes from a bounded set whatever a client sends (the requests are counted before the token check): the
method one of HTTP's standard methods, the route a template the app serves, the status code one HTTP defines; any
other value is counted as ``other``. The guard counts on the event loop as answers start, /metrics reads from a
worker thread: both go through one lock.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

OTHER = "other"
# RFC 9110's methods and PATCH (RFC 5789): the app serves GET and POST, the rest are counted as the 405s they get.
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"})
_KNOWN_CODES = frozenset(int(status) for status in HTTPStatus)

Labels = tuple[str, str, str]


def matched_route(scope: Mapping[str, Any]) -> str | None:
    """The template of the route that routing matched for this request (``/api/v1/tasks/states``; with its
    parameters' names, never their values), or None when no route matched the path."""
    template = getattr(scope.get("route"), "path_format", None)
    return template if isinstance(template, str) else None


class RequestCounts:
    """Answers counted by (method, route, status code), each label bounded (``OTHER`` beyond the known ones)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[Labels, int] = {}

    def count(self, method: str, route: str | None, status: int) -> None:
        """One answer: ``route`` the matched route's template (``matched_route``), None when none matched."""
        labels = (
            method if method in KNOWN_METHODS else OTHER,
            route if route is not None else OTHER,
            str(status) if status in _KNOWN_CODES else OTHER,
        )
        with self._lock:
            self._counts[labels] = self._counts.get(labels, 0) + 1

    def snapshot(self) -> dict[Labels, int]:
        """A copy of the counts so far, consistent as of one moment, that the caller may read at leisure."""
        with self._lock:
            return dict(self._counts)
