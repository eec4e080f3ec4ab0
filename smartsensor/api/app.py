"""The FastAPI application of ``smartsensor serve``: health, status, metrics and the task endpoints (v1),
bearer-token auth, and errors as one JSON line (never a traceback; see ``guard`` and ``errors``)."""

from __future__ import annotations

import logging
from contextlib import AbstractAsyncContextManager
from typing import Any, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from smartsensor.api.auth import token_route
from smartsensor.api.errors import ERROR_MEANINGS, error_responses
from smartsensor.api.guard import ApiGuard
from smartsensor.api.metrics import render_metrics
from smartsensor.api.page import page_router
from smartsensor.api.request_counts import RequestCounts
from smartsensor.api.tasks import tasks_router
from smartsensor.config import Config
from smartsensor.external.ended_watch import EndedWatch
from smartsensor.ports import ExternalTryStore, OverviewReads, StatusReads, StoreUnavailable
from smartsensor.sensors.errors import first_line
from smartsensor.service.status_snapshot import StatusSnapshot

log = logging.getLogger(__name__)

API = "/api/v1"
MAX_BODY_BYTES = 4 * 1024 * 1024  # a states request for 10,000 keys is ~1.2 MB; one registration far less


class Health(BaseModel):
    """``ok`` with the schema revision, or ``unavailable`` with the reason."""

    status: str
    schema_revision: str | None = None
    error: str | None = None


def api_app(
    cfg: Config,
    token: str | None,
    *,
    tries: ExternalTryStore,
    watch: EndedWatch,
    snapshot: StatusSnapshot,
    status_reads: StatusReads,
    overview: OverviewReads,
    lifespan: Callable[[FastAPI], AbstractAsyncContextManager[None]],
) -> FastAPI:
    """The application's routes over the parts ``roots.serve`` built: the external door's store of
    tries (the task endpoints), the ended watch the held requests wait on, the status snapshot and the status side's
    reads (health, the page), and the lifespan that runs the side jobs and the hub. ``token`` None: no auth (the
    server then listens on 127.0.0.1 only)."""
    # The OpenAPI document is served below, behind the token like every route; no docs page (Swagger UI would
    # load its script from a CDN, which an offline host cannot reach and the page's policy forbids).
    app = FastAPI(title="smartsensor", version="1", docs_url=None, openapi_url=None, redoc_url=None, lifespan=lifespan)

    requests = RequestCounts()
    app.state.requests = requests
    app.state.status_snapshot = snapshot
    app.add_middleware(ApiGuard, requests=requests, max_body=MAX_BODY_BYTES)
    app.router.route_class = token_route(token)  # every /api path but health, and /metrics, ask for the token

    @app.get(f"{API}/openapi.json", include_in_schema=False)
    def openapi() -> JSONResponse:
        """This API's OpenAPI document."""
        return JSONResponse(app.openapi())

    @app.get(
        f"{API}/health", responses={200: {"model": Health}, 503: {"model": Health, "description": ERROR_MEANINGS[503]}}
    )
    def health() -> JSONResponse:
        """Liveness and the database's reachability; no token needed (load balancers call it)."""
        try:
            revision = status_reads.schema_revision()
        except StoreUnavailable as exc:
            return JSONResponse({"status": "unavailable", "error": f"metadata database: {first_line(exc)}"}, 503)
        problem = status_reads.schema_problem(revision)
        if problem:
            return JSONResponse({"status": "unavailable", "error": f"metadata database {problem}"}, 503)
        return JSONResponse({"status": "ok", "schema_revision": revision})

    @app.get(f"{API}/status", responses=error_responses(401, 503))
    def status() -> dict[str, Any]:
        """What `smartsensor status --json` prints (reused for `[api] status_max_age` seconds)."""
        return snapshot.get().as_json()

    @app.get("/metrics", response_class=PlainTextResponse, responses=error_responses(401, 503, json_content=True))
    def metrics() -> Response:
        """Prometheus text format (the status part reused for `[api] status_max_age` seconds)."""
        return PlainTextResponse(
            render_metrics(snapshot.get(), requests.snapshot()), media_type="text/plain; version=0.0.4"
        )

    app.include_router(tasks_router(cfg, tries, watch, app.router.route_class, API))
    app.include_router(page_router(cfg, overview, status_reads, token, snapshot))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": str(exc.detail)}, exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def bad_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return JSONResponse({"error": f"{where}: {first.get('msg', 'invalid request')}"}, 422)

    @app.exception_handler(StoreUnavailable)
    async def database_down(_: Request, exc: Exception) -> JSONResponse:
        log.warning("request failed on the metadata database: %s", first_line(exc))
        return JSONResponse({"error": f"metadata database unavailable: {first_line(exc)}"}, 503)

    return app
