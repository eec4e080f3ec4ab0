"""Who may call the API: a bearer token from ``[api] token_file`` or ``[api] token``, compared in constant time.

Without a token the server listens on 127.0.0.1 only: anyone who can reach it could otherwise read every
task and register new ones.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import time
from typing import Any, Callable, Coroutine

from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from smartsensor.config import Config, read_secret_file

LOOPBACK = "127.0.0.1"
SESSION_SECONDS = 12 * 3600  # how long the status page's login cookie opens the page


def configured_token(cfg: Config) -> str | None:
    """The API token, or None when none is configured. A token file that cannot be read is a ConfigError."""
    path = cfg.settings.api.token_file
    if path:
        return read_secret_file(path, "[api] token_file", "the token")
    token = cfg.settings.api.token.strip()
    return token or None


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind_host(requested: str, token: str | None) -> tuple[str, str | None]:
    """The host to listen on, and a warning when the request was narrowed to 127.0.0.1 for lack of a token."""
    if token is None and not is_loopback(requested):
        return LOOPBACK, (
            f"no API token configured ([api] token_file or token): serving on {LOOPBACK} only, not on {requested}"
        )
    return requested, None


def token_matches(header: str | None, token: str) -> bool:
    """``Authorization: Bearer <token>`` with exactly this token."""
    if not header:
        return False
    scheme, _, given = header.partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(given.strip().encode(), token.encode())


def _session_signature(token: str, issued: int) -> str:
    return hmac.new(token.encode(), f"smartsensor-session:{issued}".encode(), hashlib.sha256).hexdigest()


def session_value(token: str, now: float | None = None) -> str:
    """The status page's login cookie: when it was issued and an HMAC of that keyed by the token. It never
    carries the token itself, opens the page only (not the API), expires after SESSION_SECONDS, and stops
    working when the token changes."""
    issued = int(time.time() if now is None else now)
    return f"{issued}.{_session_signature(token, issued)}"


def session_valid(value: str | None, token: str, now: float | None = None) -> bool:
    """True for a cookie ``session_value`` made with this token less than SESSION_SECONDS ago."""
    issued_text, _, signature = (value or "").partition(".")
    if not issued_text.isdigit() or len(issued_text) > 12:
        return False
    age = (time.time() if now is None else now) - int(issued_text)
    return 0 <= age <= SESSION_SECONDS and secrets.compare_digest(
        signature.encode(), _session_signature(token, int(issued_text)).encode()
    )


def needs_token(path: str) -> bool:
    """Every path of the API but health, and /metrics. The page (/, /login) asks for the token itself."""
    return (path.startswith("/api/") and path != "/api/v1/health") or path == "/metrics"


def token_route(token: str | None) -> type[APIRoute]:
    """A route class that asks for ``Authorization: Bearer <token>`` on the paths ``needs_token`` names, after
    routing (an unknown method is still a 405) and before anything reads the body (a client without the token
    gets a 401, never a parse error). ``token`` None: no check (the server listens on 127.0.0.1 only)."""

    class TokenRoute(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()
            if token is None:
                return handler

            async def checked(request: Request) -> Response:  # by the full path: a router's routes know their own
                if needs_token(request.url.path) and not token_matches(request.headers.get("authorization"), token):
                    return JSONResponse(
                        {"error": "missing or wrong bearer token (Authorization: Bearer …)"},
                        401,
                        headers={"WWW-Authenticate": "Bearer"},
                    )
                return await handler(request)

            return checked

    return TokenRoute
