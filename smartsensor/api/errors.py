"""How `smartsensor serve` says something went wrong: one JSON line ``{"error": "..."}`` for every failure, from
the routes, the middleware and the HTTP parser alike, and the error responses each route declares in its schema."""

from __future__ import annotations

import json
from typing import Any

import h11
from pydantic import BaseModel
from uvicorn.protocols.http.h11_impl import H11Protocol

ERROR_MEANINGS = {
    400: "a malformed HTTP request",
    401: "a missing or wrong bearer token",
    409: "a try older than the one registered, or concurrent registrations of the same task (ask again)",
    413: "a request body over the server's limit",
    422: "a request the service refuses: its error says which field and why",
    503: "the metadata database is unreachable, or a sensor module cannot be imported on this host",
}


class ErrorBody(BaseModel):
    """Every error answer: one line saying what went wrong."""

    error: str


def error_body(message: str) -> bytes:
    """The JSON bytes of an error answer."""
    return json.dumps({"error": message}).encode()


def error_responses(*codes: int, json_content: bool = False) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` a route declares for its error codes, each with the ``ErrorBody`` schema. A route whose
    own answers are not JSON (``/metrics``) passes ``json_content``: FastAPI would file a model under the
    route's media type, while errors are always JSON."""
    if json_content:
        schema = {"$ref": "#/components/schemas/ErrorBody"}  # registered by the routes that name the model
        return {
            code: {"description": ERROR_MEANINGS[code], "content": {"application/json": {"schema": schema}}}
            for code in codes
        }
    return {code: {"model": ErrorBody, "description": ERROR_MEANINGS[code]} for code in codes}


class JsonErrorH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, answering a request it cannot parse (a bad Content-Length, a broken request line)
    with the API's JSON error line instead of plain text."""

    def send_400_response(self, msg: str) -> None:
        body = error_body(f"malformed HTTP request: {msg}")
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        for event in (
            h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
            h11.Data(data=body),
            h11.EndOfMessage(),
        ):
            self.transport.write(self.conn.send(event))
        self.transport.close()
