"""The read-only status page at ``/`` of ``smartsensor serve``: server-side HTML (Jinja2 templates packaged with
smartsensor) with inline SVG charts, no JavaScript and no external asset. Its numbers are ``collect_status``'s,
each in an element with a ``data-metric`` (or ``data-lease``, ``data-shard``…) attribute.

With a token configured, the page takes the API's bearer header or the ``smartsensor_session`` cookie that
``POST /login`` sets (signed, expiring, never the token itself: ``auth.session_value``); without either it
redirects to ``/login``. Also here: the history sampler the page's chart reads, which the app's lifespan schedules
while the server runs."""

from __future__ import annotations

import secrets
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from smartsensor.api import charts
from smartsensor.api.auth import SESSION_SECONDS, session_valid, session_value, token_matches
from smartsensor.config import Config
from smartsensor.ports import OverviewReads, StatusReads
from smartsensor.service.overview import collect_overview
from smartsensor.service.status_report import StatusReport
from smartsensor.service.status_snapshot import StatusSnapshot

COOKIE = "smartsensor_session"
REFRESH_SECONDS = 30
MAX_LOGIN_BODY = 4096
TEMPLATES = Path(__file__).resolve().parent / "templates"
CHART_WIDTH, CHART_HEIGHT, BAR_WIDTH = 1300, 260, 310

_env = Environment(
    loader=FileSystemLoader(str(TEMPLATES)),
    autoescape=select_autoescape(("html",)),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def page_router(
    cfg: Config, reads: OverviewReads, status_reads: StatusReads, token: str | None, snapshot: StatusSnapshot
) -> APIRouter:
    """``GET /`` (the page), ``GET /login`` and ``POST /login`` over the page's reads; the page's status numbers are
    ``snapshot``'s, the same as /metrics and the status API."""
    router = APIRouter(include_in_schema=False)

    def signed_in(request: Request) -> bool:
        if token is None or token_matches(request.headers.get("authorization"), token):
            return True
        return session_valid(request.cookies.get(COOKIE), token)

    @router.get("/")
    def page(request: Request) -> Response:
        """The status page, or a redirect to the login form."""
        if not signed_in(request):
            return RedirectResponse("/login", status_code=303)
        return HTMLResponse(render_page(collect_overview(reads, status_reads, cfg, status=snapshot.get()), cfg))

    @router.api_route("/login", methods=["GET", "POST"])
    async def login(request: Request) -> Response:
        """GET: the token form (the page itself when no token is configured). POST: check the form's ``token``;
        right: a session cookie and back to ``/``; wrong: the form again, 401. One route, so that a 405 for
        another method names both."""
        if token is None:
            return RedirectResponse("/", status_code=303)
        if request.method == "GET":
            return HTMLResponse(render_login(None))
        body = b""
        async for chunk in request.stream():  # a form with one token: stop reading past a few KB, however sent
            body += chunk
            if len(body) > MAX_LOGIN_BODY:
                return HTMLResponse(render_login("That form was too large."), status_code=413)
        given = (parse_qs(body.decode("utf-8", "replace")).get("token") or [""])[0].strip()
        if not secrets.compare_digest(given.encode(), token.encode()):
            return HTMLResponse(render_login("That is not the token this server was given."), status_code=401)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(
            COOKIE, session_value(token), max_age=SESSION_SECONDS, httponly=True, samesite="strict", path="/"
        )
        return response

    return router


def render_login(message: str | None) -> str:
    """The login form's HTML."""
    return _env.get_template("login.html").render(message=message)


def render_page(data: dict[str, Any], cfg: Config) -> str:
    """The status page's HTML for ``collect_overview``'s data."""
    status: StatusReport = data["status"]
    limit = cfg.shard_code_upper_limit
    segments = charts.strip_segments(status.leases, limit, CHART_WIDTH)
    owners = charts.owner_colours(lease.owner for lease in status.leases)
    states = charts.ordered_states({*status.tasks_by_state, *(s for _, counts in data["history"] for s in counts)})
    return _env.get_template("status.html").render(
        s=status,
        d=data,
        limit=limit,
        refresh=REFRESH_SECONDS,
        now=_when(data["now"]),
        chart=charts.stacked_chart(data["history"], CHART_WIDTH, CHART_HEIGHT),
        chart_w=CHART_WIDTH,
        chart_h=CHART_HEIGHT,
        legend=[(s, charts.state_colour(s), status.tasks_by_state.get(s, 0)) for s in states],
        bars=charts.hbars(data["tables"], BAR_WIDTH),
        bar_w=BAR_WIDTH,
        ratio_bars=charts.hbars(
            [("waiting tasks", status.waiting), ("distinct checks", status.distinct_hashes)], BAR_WIDTH
        ),
        segments=segments,
        owners=sorted(owners.items()),
        when=_when,
        ago=_ago,
        lease_max={lease.shard_min: lease.shard_max for lease in status.leases},
    )


def _when(value: datetime | str | None) -> str:
    if value is None:
        return "–"
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.strftime("%Y-%m-%d %H:%M:%S")


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = abs(seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
