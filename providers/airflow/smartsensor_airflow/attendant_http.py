"""How the parking attendant (``attendant.py``) reaches smartsensor's services: each parked try's own connection
(``smartsensor_conn_id``), looked up through Airflow's connections, its service's reachability (the safety valve's
input), and the requests, with the one rule for what an answer means."""

from __future__ import annotations

import logging
from typing import Any, Callable, TypeVar

import httpx

from smartsensor_airflow._compat import server_connection
from smartsensor_airflow.client import API, ApiError, Endpoint, endpoint_from_connection, error_message
from smartsensor_airflow.wire import TryKey, WireError

log = logging.getLogger("smartsensor_airflow.attendant")

T = TypeVar("T")
ENDPOINT_TTL = 30.0  # seconds between two look-ups of a connection while its service answers
TryId = tuple[str, str, str, int, int]  # a try's: dag_id, task_id, run_id, map_index, try_number (as TryKey orders)


def try_id(key: TryKey) -> TryId:
    """The try a wire key names, whatever deployment instance it carries (answers name none)."""
    return (key.dag_id, key.task_id, key.run_id, key.map_index, key.try_number)


def read_answer(parse: Callable[[Any], T], answer: dict[str, Any], path: str) -> T:
    """The service's answer to ``path`` read by ``parse`` (a ``wire`` reader); ApiError (transient, as a body that
    is not JSON is) when it is not that answer."""
    try:
        return parse(answer)
    except WireError as exc:
        raise ApiError(f"{path}: the answer is not the service's: {exc}", transient=True) from None


class ServiceLinks:
    """The attendant's links to its services (a part of ``Attendant``), by connection id: ``endpoint`` looks one
    up; ``reached`` and ``look_up_at`` cache it; ``unreachable_since`` says which are out of reach since when."""

    endpoint: Callable[[str], Endpoint]
    clock: Callable[[], float]
    reached: dict[str, Endpoint]
    look_up_at: dict[str, float]
    unreachable_since: dict[str, float]
    http: httpx.AsyncClient | None
    groups: list[Any]
    settings: Any

    async def in_db(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on one of the attendant's database threads (``Attendant.in_db``)."""
        raise NotImplementedError

    async def check_health(self) -> None:
        """Ask each service out of reach that no group asks about whether it is back."""
        for conn_id in list(self.unreachable_since):
            if any(g.conn_id == conn_id and g.tries for g in self.groups):
                continue  # its groups' requests tell
            try:
                await self.health(conn_id, await self.endpoint_of(conn_id))
            except ApiError as exc:
                if not exc.transient:
                    raise

    def forget_unused_services(self, registering: set[str]) -> None:
        """Stop minding services out of reach that no parked try waits on any more (none watched, none being
        registered): the safety valve opens for the tries that wait, and closes once none does. The service of
        ``park_conn_id`` is always minded (a pool opened for it stays open until it answers)."""
        used = registering | {g.conn_id for g in self.groups if g.tries} | {self.settings.conn_id}
        for conn_id in set(self.unreachable_since) - used:
            del self.unreachable_since[conn_id]
            log.warning("smartsensor attendant: no parked try waits on %r's service any more", conn_id)

    async def endpoint_of(self, conn_id: str) -> Endpoint:
        """How to reach ``conn_id``'s service: looked up again every ``ENDPOINT_TTL`` seconds, and at every ask
        while it is out of reach (the connection may have changed); ApiError (transient) when it cannot be read."""
        endpoint = self.reached.get(conn_id)
        if endpoint is None or conn_id in self.unreachable_since or self.clock() >= self.look_up_at.get(conn_id, 0):
            try:
                endpoint = self.reached[conn_id] = await self.in_db(self.endpoint, conn_id)
            except ApiError as exc:
                self.out_of_reach(conn_id, exc)
                raise
            self.look_up_at[conn_id] = self.clock() + ENDPOINT_TTL
        return endpoint

    async def endpoint_or_none(self, conn_id: str) -> Endpoint | None:
        """``endpoint_of``, None while its connection cannot be read (out of reach, for the valve)."""
        try:
            return await self.endpoint_of(conn_id)
        except ApiError as exc:
            if not exc.transient:
                raise
            return None

    def out_of_reach(self, conn_id: str, exc: Exception) -> None:
        if conn_id not in self.unreachable_since:
            self.unreachable_since[conn_id] = self.clock()
            log.warning("smartsensor attendant: the service of %r is out of reach (%s)", conn_id, exc)

    def reachable(self, conn_id: str) -> None:
        if self.unreachable_since.pop(conn_id, None) is not None:
            log.warning("smartsensor attendant: the service of %r answers again", conn_id)

    def _connection_endpoint(self, conn_id: str) -> Endpoint:
        try:
            conn = server_connection(conn_id)
        except Exception as exc:  # noqa: BLE001 - a secrets backend out of reach: the service is, for us
            raise ApiError(f"connection {conn_id!r}: {exc}", transient=True) from None
        return endpoint_from_connection(conn, conn_id)

    async def health(self, conn_id: str, endpoint: Endpoint) -> None:
        """Whether ``conn_id``'s service answers its health check; ApiError (transient) when it does not."""
        assert self.http is not None
        try:
            response = await self.http.get(f"{endpoint.base_url}{API}/health", headers=endpoint.headers())
        except httpx.HTTPError as exc:
            self.out_of_reach(conn_id, exc)
            raise ApiError(f"/health: {exc}", transient=True) from None
        if response.status_code != 200:
            refused = ApiError(f"/health: {error_message(response)}", response.status_code, transient=True)
            self.out_of_reach(conn_id, refused)
            raise refused
        self.reachable(conn_id)

    async def post(self, conn_id: str, endpoint: Endpoint, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST to ``conn_id``'s service: its JSON answer, or ``{"status", "detail"}`` when it refuses the request
        for good (4xx); ApiError (transient) when it is out of reach or not working (no answer, any 5xx, a body that
        is not its JSON) or refuses this attendant (401, 403: a wrong token is a service this attendant cannot use):
        the valve opens after the grace, as when it is down."""
        assert self.http is not None
        try:
            response = await self.http.post(f"{endpoint.base_url}{API}{path}", json=body, headers=endpoint.headers())
        except httpx.HTTPError as exc:
            raise ApiError(f"{path}: {type(exc).__name__}: {exc}", transient=True) from None
        if response.status_code in (401, 403) or response.status_code >= 500:
            raise ApiError(f"{path}: {error_message(response)}", response.status_code, transient=True)
        if response.status_code >= 400:
            self.reachable(conn_id)
            if response.status_code not in (404, 405):  # 404/405: a service before /tasks/batch
                log.warning("smartsensor attendant: %s refused: %s", path, error_message(response))
            return {"status": response.status_code, "detail": error_message(response)}
        try:
            answer = response.json()
        except ValueError:
            raise ApiError(f"{path}: the answer is not the service's JSON", transient=True) from None
        if not isinstance(answer, dict):
            raise ApiError(f"{path}: the answer is not the service's JSON", transient=True)
        self.reachable(conn_id)
        return answer
