"""One states request at a time for every deferred task in a triggerer process, held by the service until a
task ends.

Airflow's triggerer runs all its triggers as coroutines in one event loop. Each SmartSensorTrigger hands its
key to the loop's shared ``StatesPoller`` (one per connection) and awaits the answer; the poller asks
``POST /api/v1/tasks/states?wait=INTERVAL`` for all waiting keys at once (``interval``: the shortest interval
any waiting trigger asked for) and resolves the waiters whose try reached a terminal state.

The service holds that request until one of the tries ends (it is woken by the commit that ended it), so a
landing is heard at once instead of at the next poll. Requests are paced by a ``RequestBudget``: one per
interval on average, as when it polled, up to ``BURST`` back to back after answers that came early. A service
that does not hold requests (an older one) answers at once, and the budget then makes this the plain poll
every interval that it was.

An answer that ended some tries is given back to the budget: the next request goes at once, so tries that end in
the next commit (two tables landing together end in two rounds) are heard at once too. So is an early answer
while keys joined: a key that joins while a request is in flight is asked by the next one, and a triggerer
starts its triggers a few at a time (Airflow 2.10: a batch a second). Each such extra request follows an answer
that ended a try or a join, so they are bounded by the tasks. A trigger whose try is already answered when it
joins hears at the next request (within an interval; a drop-in only defers when its held request in ``execute``
did not get the answer).

While the service is out of reach, the poller keeps asking every interval; a waiter that asked for a ``grace``
gets ``ServiceUnreachable`` once the outage has lasted that long (its trigger then resumes the task, which checks
on its own). Out of reach means: no answer, 502/503/504, a 200 whose body is not the service's answer (a proxy's
page), or the Airflow connection's look-up failing (Airflow 3's ``aget_connection`` asks the API server), as the
poller starts or again after a 401. Only the service's own refusal (a wrong token, an invalid key) fails waiters.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from typing import Awaitable, Callable, List, Tuple

import httpx

from smartsensor_airflow.client import API, MAX_WAIT, TERMINAL, ApiError, Endpoint, error_message
from smartsensor_airflow.off_loop_log import log_off_loop
from smartsensor_airflow.wire import AskedTry, TryKey, TryState, states_answer, states_request

log = logging.getLogger(__name__)

MAX_KEYS_PER_REQUEST = 10_000  # the API's own limit
FIRST_POLL_DELAY = 0.5  # gathers triggers that start together (a triggerer picking up many) into one request
BURST = 3  # requests the budget allows back to back, after answers that came early
OUTAGE_LOG_EVERY = 30.0  # seconds between log lines about the same outage
# One waiting trigger: the future its answer is set on, its interval, and its grace period (None: wait however long).
Waiter = Tuple["asyncio.Future[TryState]", float, "float | None"]


class ServiceUnreachable(ApiError):
    """The service has been out of reach for longer than the waiter's grace period."""

    def __init__(self, message: str) -> None:
        super().__init__(message, transient=True)


class RequestBudget:
    """A token bucket: on average one request per ``interval``, at most ``burst`` back to back."""

    def __init__(self, burst: int = BURST) -> None:
        self.burst = burst
        self.tokens = 1.0
        self.at = time.monotonic()

    async def take(self, interval: float) -> None:
        """Wait until a request is allowed, then spend it."""
        while True:
            now = time.monotonic()
            self.tokens = min(float(self.burst), self.tokens + (now - self.at) / interval)
            self.at = now
            if self.tokens >= 1:
                self.tokens -= 1
                return
            await asyncio.sleep((1 - self.tokens) * interval)

    def refund(self) -> None:
        """Give back the request just spent (its answer ended tries, or came early while keys joined)."""
        self.tokens = min(float(self.burst), self.tokens + 1)


def states_of(response: httpx.Response) -> List[TryState] | None:
    """The answers of a 200 to a states request, or None when its body is not the service's JSON answer (a proxy's
    page, a truncated body): ``wire.states_answer``."""
    try:
        return states_answer(response.json())
    except ValueError:  # not JSON, or WireError: not the service's answer
        return None


class StatesPoller:
    """Waiting keys of one event loop and one connection, polled together."""

    def __init__(
        self, endpoint: Callable[[], Awaitable[Endpoint]], transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self._endpoint = endpoint
        self._transport = transport
        # key (without instance: the answers' keys carry none) → its waiting triggers
        self._waiters: dict[TryKey, List[Waiter]] = {}
        self._hashcodes: dict[TryKey, int] = {}  # key → the hashcode of the check its try registered, when known
        self._task: asyncio.Task[None] | None = None
        self._joined = asyncio.Event()  # a key joined since the request in flight was sent
        self.requests = 0  # states requests sent (logged, and asserted by tests)
        self.ended = 0  # waiters given an answer or an error
        self.unreachable_since: float | None = None  # monotonic time of the first failure of the current outage
        self._logged_at = 0.0  # when the current outage was last logged

    @property
    def waiting(self) -> int:
        return sum(len(w) for w in self._waiters.values())

    async def wait(self, asked: AskedTry, interval: float, grace: float | None = None) -> TryState:
        """The service's answer for this try once it is terminal (asked in the connection's instance, by its
        check's hashcode when known). Raises ApiError when the service rejects the request for good (a wrong
        token, an invalid key), ServiceUnreachable when it has been out of reach for ``grace`` seconds (None: wait
        however long)."""
        future: asyncio.Future[TryState] = asyncio.get_running_loop().create_future()
        entry: Waiter = (future, max(0.1, float(interval)), grace)
        k = asked.key.in_instance("")
        self._waiters.setdefault(k, []).append(entry)
        if asked.hashcode is not None:
            self._hashcodes[k] = asked.hashcode
        self._joined.set()
        self._ensure_running()
        try:
            return await future
        finally:
            entries = self._waiters.get(k, [])
            if entry in entries:
                entries.remove(entry)
            if not entries:
                self._waiters.pop(k, None)
                self._hashcodes.pop(k, None)

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="smartsensor-states-poller")

    def _interval(self) -> float:
        return min((i for entries in self._waiters.values() for _, i, _ in entries), default=1.0)

    async def _run(self) -> None:
        try:
            endpoint: Endpoint | None = None
            async with httpx.AsyncClient(timeout=MAX_WAIT + 30.0, transport=self._transport) as client:
                await asyncio.sleep(FIRST_POLL_DELAY)
                self._joined.clear()  # those keys are gathered: the first request asks them
                budget = RequestBudget()
                while self._waiters:
                    await budget.take(self._interval())
                    if not self._waiters:
                        break
                    endpoint = endpoint or await self._look_up()
                    if endpoint is not None:
                        endpoint = await self._poll_asking_joiners(client, endpoint, budget)
        except Exception as exc:  # noqa: BLE001 - never leave a waiter hanging on a dead poller
            self._fail_all(ApiError(f"smartsensor states poller stopped: {exc}"))
        finally:
            # A trigger that arrived while this task was closing its client still needs a poller.
            if any(not f.done() for entries in self._waiters.values() for f, _, _ in entries):
                self._task = asyncio.get_running_loop().create_task(self._run(), name="smartsensor-states-poller")

    async def _look_up(self) -> Endpoint | None:
        """The connection's endpoint, or None when looking it up failed: an outage, as an unanswered request is
        (Airflow 3 asks its API server, which may be restarting), asked again at the next interval."""
        try:
            return await self._endpoint()
        except Exception as exc:  # noqa: BLE001 - whatever the look-up raises, the waiters keep waiting
            self._out_of_reach(f"looking up the connection failed ({type(exc).__name__}: {exc})")
            return None

    async def _poll_asking_joiners(
        self, client: httpx.AsyncClient, endpoint: Endpoint, budget: RequestBudget
    ) -> Endpoint:
        """One ``_poll``; its request is given back to the budget, so that the next one goes at once, when it
        ended some tries (the others may end in the next commit: two tables landing together are two rounds),
        or when it was answered early while keys joined (the next one asks them)."""
        self._joined.clear()
        started, ended = time.monotonic(), self.ended
        endpoint = await self._poll(client, endpoint)
        if self.ended > ended or (self._joined.is_set() and time.monotonic() - started < self._interval()):
            budget.refund()
        return endpoint

    async def _poll(self, client: httpx.AsyncClient, endpoint: Endpoint) -> Endpoint:
        """One round: every waiting key, in requests of at most MAX_KEYS_PER_REQUEST, held by the service for up
        to an interval (when they fit in one request). Returns the endpoint to use next (looked up again after a
        401, in case the connection's token was changed; the same when that look-up failed)."""
        keys = [k for k, entries in self._waiters.items() if any(not f.done() for f, _, _ in entries)]
        if not keys:  # every waiter has its answer and is leaving
            return endpoint
        wait = min(self._interval(), MAX_WAIT) if len(keys) <= MAX_KEYS_PER_REQUEST else 0.0
        for start in range(0, len(keys), MAX_KEYS_PER_REQUEST):
            chunk = keys[start : start + MAX_KEYS_PER_REQUEST]
            body = states_request(self._asked(k, endpoint) for k in chunk)
            self.requests += 1
            try:
                response = await client.post(
                    f"{endpoint.base_url}{API}/tasks/states",
                    json=body,
                    params={"wait": f"{wait:g}"},
                    headers=endpoint.headers(),
                )
            except httpx.TransportError as exc:
                self._out_of_reach(f"smartsensor at {endpoint.base_url} unreachable ({exc})")
                return endpoint
            if response.status_code in (502, 503, 504):
                self._out_of_reach(f"smartsensor answered {error_message(response)}")
                return endpoint
            states = states_of(response) if response.status_code == 200 else []
            if states is None:
                self._out_of_reach(
                    f"smartsensor at {endpoint.base_url} answered 200 with a body that is not its JSON answer: "
                    f"{response.text[:200]!r}"
                )
                return endpoint
            if response.status_code == 401:
                fresh = await self._look_up()
                if fresh is None:
                    return endpoint  # an outage until the look-up works: the token may have changed
                if fresh != endpoint:
                    self.unreachable_since = None
                    return fresh  # the token changed: try it next interval
            self.unreachable_since = None
            if response.status_code != 200:
                error = ApiError(
                    f"smartsensor refused the states request: {error_message(response)}", response.status_code
                )
                for k in chunk:
                    self._resolve(k, error)
                continue
            for answer in states:
                if answer.state in TERMINAL:
                    self._resolve(answer.key, answer)
        return endpoint

    def _asked(self, key: TryKey, endpoint: Endpoint) -> AskedTry:
        """One key as the states request asks it: in the connection's instance, by its check's hashcode if known."""
        return AskedTry(key.in_instance(endpoint.instance), self._hashcodes.get(key))

    def _out_of_reach(self, why: str) -> None:
        """Note a failed request; give ServiceUnreachable to the waiters whose grace the outage has outlasted."""
        now = time.monotonic()
        if self.unreachable_since is None:
            self.unreachable_since = self._logged_at = now
            log_off_loop(log, "warning", "%s; %d task(s) keep waiting", why, self.waiting)
        away = now - self.unreachable_since
        if now - self._logged_at >= OUTAGE_LOG_EVERY:
            self._logged_at = now
            log_off_loop(log, "warning", "%s for %.0f s; %d task(s) keep waiting", why, away, self.waiting)
        for entries in self._waiters.values():
            for future, _, grace in entries:
                if grace is not None and away >= grace and not future.done():
                    self.ended += 1
                    future.set_exception(
                        ServiceUnreachable(f"{why}, out of reach for {away:.0f} s (grace {grace:g} s)")
                    )

    def _resolve(self, key: TryKey, outcome: TryState | Exception) -> None:
        for future, _, _ in self._waiters.get(key, []):
            if not future.done():
                self.ended += 1
                if isinstance(outcome, Exception):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)

    def _fail_all(self, error: Exception) -> None:
        for key in list(self._waiters):
            self._resolve(key, error)


# One poller per (event loop, connection id). Weak on the loop: `airflow dags test` runs each inline trigger
# in a fresh loop, and a closed loop's pollers must go with it.
_POLLERS: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, StatesPoller]]" = weakref.WeakKeyDictionary()


def shared_poller(
    conn_id: str, endpoint: Callable[[], Awaitable[Endpoint]], transport: httpx.AsyncBaseTransport | None = None
) -> StatesPoller:
    """The running loop's poller for ``conn_id``, created on first use."""
    per_loop = _POLLERS.setdefault(asyncio.get_running_loop(), {})
    poller = per_loop.get(conn_id)
    if poller is None:
        poller = per_loop[conn_id] = StatesPoller(endpoint, transport)
    return poller
