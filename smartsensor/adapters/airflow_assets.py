"""Airflow 3.3's REST API, as the landing publisher uses it (``service.landings``): the ``hive://`` assets DAGs are
scheduled on, and one asset event per landed partition.

- ``GET /api/v2/assets?uri_prefix_pattern=…`` (pages of 100): an asset's ``id``, ``uri`` and ``scheduled_dags``;
- ``POST /api/v2/assets/events`` with ``{asset_id, partition_key, extra}``;
- ``GET /api/v2/assets/events?asset_id=…&timestamp_gte=…&order_by=timestamp`` (pages of 100, at most
  ``LOOKUP_PAGES``): whether Airflow holds the event of a landing whose post had an unknown outcome (its ``extra``
  names the outbox row). On 3.3.2 this listing answers 500 while any event it would return created a dag run that
  has not started yet: ``DagRunAssetReference.start_date`` is required and a queued run has none. Such an answer
  is "cannot tell yet": the row waits and is asked about again (the run starts within the scheduler's next loops);
- ``POST /auth/token`` with ``{username, password}`` for a bearer token (Airflow's auth managers answer it), taken
  again once when a call is answered 401.

Every call has ``timeout`` seconds as a whole, its redirects and the reading of its answer included (each phase of
each hop gets what is left; an answer still arriving at the deadline is abandoned: a post's is of unknown outcome).
The token is taken by a call of its own. A redirect to the same API route on the same
host (http → https, another port or path prefix in front: a proxy) is followed with the same method, body and token,
up to ``MAX_REDIRECTS`` (a permanent one is logged once: set ``[landings] airflow_url`` to it); any other redirect is
not followed and the call is retried later. Only Airflow's own answers (JSON with a ``detail``) can refuse an event
for good: a proxy's 400 or 413 page is retried, and a 2xx that is not Airflow's answer to a post (no event id) is
of unknown outcome, looked up before it is posted again. A failure is classified for the outbox
(``domain.landings.PostOutcome``), never raised from ``post_event``; ``consumed_hive_assets`` raises
``AirflowApiError`` with one line saying what failed.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime
from typing import Any, Iterator

import httpx

from smartsensor.domain import clock
from smartsensor.domain.landings import EventLookup, HiveAsset, PostOutcome, outcome_of_status, parse_hive_uri

log = logging.getLogger(__name__)

PAGE = 100  # assets per GET /api/v2/assets page, events per GET /api/v2/assets/events page
# A look-up's connection is not kept: after 3.3.2's 500 on this listing (an exception in the ASGI app) the api-server
# resets the connection, and the next call on it (a post: then of unknown outcome) would fail.
ONE_OFF = {"Connection": "close"}
LOOKUP_PAGES = 10  # pages of events one look-up reads at most: more events of the asset since then is "cannot tell"
DETAIL_LIMIT = 300  # characters of an error answer kept in a log line or an outbox row
REDIRECTS = frozenset({301, 302, 303, 307, 308})
PERMANENT = frozenset({301, 308})
MAX_REDIRECTS = 3  # hops one call follows
DECODED_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})  # of a body read already


class AirflowApiError(Exception):
    """A call to Airflow's API failed (one line: the call, and the status or the error)."""


def _detail(response: httpx.Response) -> str:
    return _answer(response)[0]


def _answer(response: httpx.Response) -> tuple[str, bool]:
    """What an error answer says (one line), and whether it is Airflow's API's own (JSON with a ``detail``)."""
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    ours = isinstance(body, dict) and "detail" in body
    detail = body.get("detail", body) if isinstance(body, dict) else body
    if response.status_code in REDIRECTS:
        detail = f"redirected to {response.headers.get('location', '?')}, not followed: {detail}"
    return str(detail).replace("\n", " ")[:DETAIL_LIMIT], ours


class AirflowAssets:
    """One Airflow api-server, reached at ``url`` (``http://host:8080``) as ``username``. Thread-safe: one
    ``httpx.Client`` (its pool) and one token for the process."""

    def __init__(
        self,
        url: str,
        username: str,
        password: str,
        timeout: float,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.username, self.password = username, password
        self.timeout = timeout
        self.client = httpx.Client(base_url=self.url, timeout=httpx.Timeout(timeout), transport=transport)
        self._token: str | None = None
        self._lock = threading.Lock()
        self._moved: set[str] = set()  # permanent redirects logged (once each)
        self.calls = 0  # requests sent, the token's included (the tests and the bench read it)

    def close(self) -> None:
        self.client.close()

    def _login(self) -> str:
        try:  # redirected as any other call (a proxy that moved Airflow moved its token endpoint too)
            response = self._following(
                "POST", "/auth/token", {}, json={"username": self.username, "password": self.password}
            )
        except httpx.HTTPError as exc:
            raise AirflowApiError(f"POST /auth/token: {type(exc).__name__}: {exc}") from exc
        if response.status_code >= 300:
            raise AirflowApiError(f"POST /auth/token: HTTP {response.status_code}: {_detail(response)}")
        try:
            token = response.json().get("access_token")
        except (ValueError, AttributeError):  # a proxy's page, not Airflow's answer
            raise AirflowApiError(f"POST /auth/token: not Airflow's answer: {_detail(response)}") from None
        if not isinstance(token, str) or not token:
            raise AirflowApiError("POST /auth/token: the answer holds no access_token")
        return token

    def _send(self, method: str, path: str, headers: dict[str, str] | None = None, **kwargs: Any) -> httpx.Response:
        """One call with the bearer token (and ``headers``); answered 401, the token is taken again and the call sent
        once more."""
        for fresh in (False, True):
            with self._lock:
                if self._token is None or fresh:
                    self._token = self._login()
                token = self._token
            sent = {**(headers or {}), "Authorization": f"Bearer {token}"}
            response = self._following(method, path, sent, **kwargs)
            if response.status_code != 401:
                return response
        return response

    def _following(self, method: str, path: str, headers: dict[str, str], **kwargs: Any) -> httpx.Response:
        """One call, following redirects to the same route on the same host (module docstring), within ``timeout``
        seconds as a whole."""
        deadline = time.monotonic() + self.timeout
        url: httpx.URL | str = path
        for _ in range(MAX_REDIRECTS + 1):
            self.calls += 1
            response = self._within(deadline, self.client.build_request(method, url, headers=headers, **kwargs))
            location = response.headers.get("location")
            if response.status_code not in REDIRECTS or not location:
                return response
            target = response.url.join(location).copy_with(query=None)  # the call's own parameters are sent again
            if target.host != response.url.host or not target.path.endswith(path):
                return response  # elsewhere (another host, a maintenance page): not followed, retried later
            if response.status_code in PERMANENT and str(target) not in self._moved:
                self._moved.add(str(target))
                log.warning(
                    "landings: Airflow's API moved: %s redirects to %s for good; set [landings] airflow_url to it",
                    response.url,
                    target,
                )
            url = target
        return response

    def _within(self, deadline: float, request: httpx.Request) -> httpx.Response:
        """Send ``request`` and read its answer by ``deadline`` (``time.monotonic``): each phase gets what is left,
        and the answer is read chunk by chunk, abandoned (``httpx.ReadTimeout``) once the deadline passes. A request
        not sent by then raises ``httpx.ConnectTimeout`` (nothing reached Airflow)."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise httpx.ConnectTimeout(f"no time left of the call's {self.timeout:g} s to send it", request=request)
        request.extensions["timeout"] = httpx.Timeout(left).as_dict()
        response = self.client.send(request, stream=True)
        try:
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if time.monotonic() > deadline:
                    raise httpx.ReadTimeout(f"the answer took longer than {self.timeout:g} s", request=request)
        finally:
            response.close()
        decoded = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in DECODED_HEADERS]
        return httpx.Response(response.status_code, headers=decoded, content=bytes(body), request=request)

    def _listing(self, path: str, params: dict[str, Any], key: str) -> Iterator[dict[str, Any]]:
        """Every item of a paged listing (``key`` of each page, ``PAGE`` a page). Raises AirflowApiError."""
        offset = 0
        while True:
            try:
                response = self._send("GET", path, params={**params, "limit": PAGE, "offset": offset})
            except httpx.HTTPError as exc:
                raise AirflowApiError(f"GET {path}: {type(exc).__name__}: {exc}") from exc
            if response.status_code != 200:
                raise AirflowApiError(f"GET {path}: HTTP {response.status_code}: {_detail(response)}")
            page = response.json()
            items = page.get(key, [])
            yield from items
            offset += len(items)
            if not items or offset >= int(page.get("total_entries", 0)):
                return

    def consumed_hive_assets(self, uri_prefix: str) -> list[HiveAsset]:
        """The active ``hive://`` assets whose URI starts with ``uri_prefix`` and that at least one DAG is scheduled
        on, each with those DAGs. Raises AirflowApiError."""
        found: list[HiveAsset] = []
        for asset in self._listing("/api/v2/assets", {"uri_prefix_pattern": uri_prefix, "order_by": "id"}, "assets"):
            uri = asset.get("uri", "")
            parsed = parse_hive_uri(uri)
            if parsed is None or not uri.startswith(uri_prefix) or not asset.get("scheduled_dags"):
                continue
            consumers = tuple(
                sorted(str(d["dag_id"]) for d in asset["scheduled_dags"] if isinstance(d, dict) and "dag_id" in d)
            )
            found.append(HiveAsset(int(asset["id"]), uri, parsed[1], parsed[2], consumers))
        return found

    def paused_dags(self) -> set[str]:
        """``GET /api/v2/dags?paused=true``, every page: the ids of the DAGs Airflow has paused. Raises
        AirflowApiError."""
        dags = self._listing("/api/v2/dags", {"paused": "true", "order_by": "dag_id"}, "dags")
        return {str(d["dag_id"]) for d in dags if d.get("is_paused", True)}

    def post_event(self, asset_id: int, partition_key: str, extra: dict[str, Any]) -> PostOutcome:
        """``POST /api/v2/assets/events``: one event for ``asset_id`` with ``partition_key``. What it came to;
        never raises for a failure of Airflow or of the way to it."""
        body = {"asset_id": asset_id, "partition_key": partition_key, "extra": extra}
        try:
            response = self._send("POST", "/api/v2/assets/events", json=body)
        except AirflowApiError as exc:  # no token: nothing was posted
            return PostOutcome("retry", str(exc))
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:  # never sent
            return PostOutcome("retry", f"{type(exc).__name__}: {exc}")
        except httpx.HTTPError as exc:  # sent, and maybe taken: a read timeout, a connection dropped mid-answer
            return PostOutcome("unknown", f"{type(exc).__name__}: {exc}")
        if 200 <= response.status_code < 300:
            try:
                event_id = int(response.json().get("id"))
            except (ValueError, TypeError, AttributeError):  # a 2xx that is not Airflow's answer to a post
                detail = f"HTTP {response.status_code} without an event id: {_detail(response)}"
                return PostOutcome("unknown", detail)
            return PostOutcome("delivered", "", event_id)
        detail, ours = _answer(response)
        return outcome_of_status(response.status_code, detail, None, ours)

    def find_events(self, asset_id: int, since: datetime, until: datetime | None, marks: dict[str, Any]) -> EventLookup:
        """``GET /api/v2/assets/events`` of ``asset_id`` from ``since`` to ``until`` (Airflow's clock; None: no end),
        oldest first, at most ``LOOKUP_PAGES`` pages: the ids of the events whose ``extra`` holds every item of
        ``marks``. Not answered (never raised) when a call fails, answers other than 200 (a 500 while a run an
        event created has not started: module docstring), or the events do not fit in the pages."""
        found: list[int] = []
        offset = 0
        for _ in range(LOOKUP_PAGES):
            params: dict[str, Any] = {
                "asset_id": asset_id,
                "timestamp_gte": clock.iso(since) + "Z",
                "order_by": "timestamp",
                "limit": PAGE,
                "offset": offset,
            }
            if until is not None:
                params["timestamp_lte"] = clock.iso(until) + "Z"
            try:
                response = self._send("GET", "/api/v2/assets/events", headers=ONE_OFF, params=params)
            except (AirflowApiError, httpx.HTTPError) as exc:
                return EventLookup(False, detail=f"GET /api/v2/assets/events: {type(exc).__name__}: {exc}")
            if response.status_code != 200:
                detail = f"GET /api/v2/assets/events: HTTP {response.status_code}: {_detail(response)}"
                return EventLookup(False, detail=detail)
            try:
                page = response.json()
                events = list(page.get("asset_events", []))
                total = int(page.get("total_entries", 0))
                found += [int(e["id"]) for e in events if _marked(e.get("extra"), marks)]
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                return EventLookup(False, detail=f"GET /api/v2/assets/events: a bad answer: {exc}")
            offset += len(events)
            if not events or offset >= total:
                return EventLookup(True, tuple(found))
        return EventLookup(False, detail=f"more than {LOOKUP_PAGES * PAGE} events of asset {asset_id} to read")


def _marked(extra: Any, marks: dict[str, Any]) -> bool:
    """Whether an event's ``extra`` holds every item of ``marks`` (compared as text: JSON keeps an id a number, but
    a proxy or a producer may not)."""
    return isinstance(extra, dict) and all(str(extra.get(k)) == str(v) for k, v in marks.items())
