"""The ASGI middleware around every request of `smartsensor serve`: a request id, a body limit that holds
whatever the framing (Content-Length or chunked), security headers, one log line for an unexpected error
(its traceback at debug level) answered as a JSON 500, and the count of every answer that /metrics shows
(``request_counts``: bounded labels, whatever clients send)."""

from __future__ import annotations

import logging
import uuid
from typing import Any, Awaitable, Callable, MutableMapping

from starlette.exceptions import HTTPException

from smartsensor.api.errors import error_body
from smartsensor.api.request_counts import RequestCounts, matched_route
from smartsensor.sensors.errors import first_line

log = logging.getLogger("smartsensor.api")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# The status page is server-rendered HTML with inline CSS and SVG, a form posting to /login and no script:
# nothing may load from anywhere, and no other site may frame it. JSON answers carry the same headers.
SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
        b"form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]


class BodyTooLarge(HTTPException):
    """A request body past the limit, however it was framed."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body over {limit} bytes")


class ApiGuard:
    """Wraps the FastAPI app; ``requests`` counts every answer by method, matched route and status code."""

    def __init__(
        self,
        app: Callable[[Scope, Receive, Send], Awaitable[None]],
        requests: RequestCounts,
        max_body: int,
    ) -> None:
        self.app, self.requests, self.max_body = app, requests, max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = uuid.uuid4().hex[:12]
        answered: list[int] = []

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                answered.append(message["status"])
                # counted as the answer starts, so a client that has it also finds it in /metrics
                self.requests.count(scope["method"], matched_route(scope), message["status"])
                message["headers"] = [
                    *message.get("headers", []),
                    *SECURITY_HEADERS,
                    (b"x-request-id", request_id.encode()),
                ]
            await send(message)

        received = 0

        async def bounded_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body:
                    raise BodyTooLarge(self.max_body)
            return message

        try:
            if self._declared_too_long(scope):
                await self._answer(send_with_headers, 413, f"request body over {self.max_body} bytes")
            else:
                await self.app(scope, bounded_receive, send_with_headers)
        except BodyTooLarge as exc:  # read by something other than a route (which answers it as any HTTP error)
            if not answered:
                await self._answer(send_with_headers, 413, str(exc.detail))
        except Exception as exc:  # the one place an unexpected error becomes a 500 line
            log.error(
                "%s %s failed: %s: %s (request id %s)",
                scope["method"],
                scope["path"],
                type(exc).__name__,
                first_line(exc),
                request_id,
            )
            log.debug("traceback of request %s", request_id, exc_info=True)
            if not answered:
                await self._answer(
                    send_with_headers,
                    500,
                    f"internal error ({type(exc).__name__}); request id {request_id} in the server log",
                )

    def _declared_too_long(self, scope: Scope) -> bool:
        length = _header(scope, b"content-length")
        return length is not None and (not length.isdigit() or int(length) > self.max_body)

    @staticmethod
    async def _answer(send: Send, status: int, message: str) -> None:
        body = error_body(message)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _header(scope: Scope, name: bytes) -> str | None:
    """A request header's value (the first one), decoded as Latin-1 as HTTP/1.1 carries it."""
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin-1")
    return None
