"""The parking attendant (issue 55): a process of the Airflow deployment, next to its scheduler, that ends parked
tries. Run it with Airflow's environment (its airflow.cfg, its database, the ``smartsensor_default`` connection):

    python -m smartsensor_airflow.attendant

It runs on one event loop:

1. every ``[smartsensor] park_interval`` seconds (0.5) a cycle reads the tries parked in ``[smartsensor]
   park_pool`` (``scheduled`` there: the scheduler put them there once their upstream tasks were done and never
   queues them): every ``FULL_READ_EVERY`` seconds all of them, forgetting the ones no longer parked, and between
   those only the ones Airflow changed lately (``updated_at``); it registers the new ones, each with the service of
   its task's own connection (``smartsensor_conn_id``; ``[smartsensor] park_conn_id`` for a task that names none),
   ``REGISTER_BATCH`` a request (``POST /tasks/batch``): each one's check read from the serialized DAG and rendered
   with its run's row (``parked_checks``), as a trigger would render it;
2. the tries it watches are asked about in groups of up to ``STATES_CHUNK`` (one connection's), each group by a task
   of its own that holds one ``POST /tasks/states?wait=`` request (the service answers it the moment one of them
   ends; answers are matched to tries by key). A success or a skip (soft_fail) of a task for which Airflow runs
   nothing after that end is ended at once through Airflow's models (``parking.end_parked``), as Airflow ends a try
   from its trigger; every other end (and a try past its ``execution_timeout``) is **resumed on a worker** as
   Airflow resumes a deferred try whose trigger fired (``parking.hand_back`` with the trigger's event): the try moves
   to its task's own pool with ``next_method`` ``execute_complete``, the scheduler queues it, and Airflow's own code
   ends it, with its callbacks, email, listeners, outlets, retries, history and log; its retry parks again
   (``repark_retries``). A try the attendant cannot serve is handed back to run from the start: a check it cannot
   render or read (the worker renders it in Airflow's own context), one the service keeps refusing
   (``REFUSALS``), a task that no longer parks;
3. the safety valve: while a service stays out of reach (no answer, a 5xx, a refused token) for longer than
   ``[smartsensor] park_fallback_grace`` seconds, the parking pool gets ``[smartsensor] park_valve_slots`` slots, so
   the scheduler runs the parked tries today's way (their ``execute`` checks on its own); once it answers again the
   pool closes and new tries park again. The valve's state is the pool's slots, in Airflow: an attendant that
   starts with the pool open closes it once the service answers.

``python -m smartsensor_airflow.attendant release`` hands every parked try back (parking switched off); ``… status``
prints the parked tries and their attendant's heartbeat (``parking_health``: the parking pool's description), exit 1
when tries wait with no attendant alive.

Airflow's database is used from ``DB_THREADS`` threads. Several attendants may run (each ends or hands back only what
is still parked, under a row lock). It never writes anything of Airflow's but the parked tries it ends or hands back
(and a 2.10 try's start date, when it began to wait) and the parking pool's slots; smartsensor's own processes never
write Airflow's database.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, TypeVar

# Airflow first: run as a program, this module is imported before Airflow, whose start imports the deployment's
# local settings, which may import this provider's policy, which imports _compat: before _compat, not during it.
import airflow  # noqa: F401
import httpx

from smartsensor_airflow._compat import (
    airflow_conf,
    airflow_session,
    has_listeners,
    load_note_models,
)
from smartsensor_airflow.attendant_airflow import AirflowSide, Registration, Settings, back_of
from smartsensor_airflow.attendant_http import ServiceLinks, read_answer, try_id
from smartsensor_airflow.client import (
    ApiError,
    Endpoint,
    is_timeout,
    outcome,
)
from smartsensor_airflow.parking import HandBack, Key, ParkedEnd
from smartsensor_airflow.parking_health import HEARTBEAT_EVERY, heartbeat, parking_health
from smartsensor_airflow.start import DEFAULT_POOL
from smartsensor_airflow.try_log import TryJournal
from smartsensor_airflow.wire import (
    AskedTry,
    Refused,
    Registered,
    Registration as TryRegistration,
    TryState,
    batch_answer,
    states_answer,
    states_request,
)

log = logging.getLogger("smartsensor_airflow.attendant")

STATES_CHUNK = 1000  # tries per group: keys per held states request
REGISTER_BATCH = 100  # tries per registration request (the service takes up to 1,000): each batch is asked about
# while the next registers
REGISTER_PARALLEL = 4  # registration requests in flight at once per service (tries parked together register together)
HOLD = 25.0  # seconds the service holds a group's states request (it allows 30)
FULL_READ_EVERY = 10.0  # seconds between two reads of every parked try; the cycles between read what changed
LOOKBACK = 5.0  # seconds a read of changes reaches back before the newest change seen
DB_THREADS = 2  # threads that use Airflow's database: a cycle's reads, a group's ends
T = TypeVar("T")
RETRY_STATES = frozenset({"unknown", "superseded"})  # the service no longer has this try's check: register again
REFUSALS = 5  # registrations of one try refused for now (409, 503) before the try is handed back to Airflow


@dataclass(eq=False)
class Watched:
    """A parked try registered with the service, how a states request asks for it (``Registered.asked``: by the
    hashcode of the check registered, in this deployment's instance), and the group of tries it is asked about
    with."""

    key: Key
    try_number: int
    asked: AskedTry
    since: datetime
    group: Group | None = None
    deadline: float | None = None  # the attendant's clock: when the try reaches its execution_timeout
    limit: float | None = None  # the execution_timeout, seconds
    soft_fail: bool = False
    conn_id: str = "smartsensor_default"  # the task's own connection: the service its check is registered with
    pool: str = DEFAULT_POOL  # the task's own pool, where the try runs once handed back
    after_end: dict[str, list[str]] = field(default_factory=dict)  # end → what Airflow runs after it (start.py)


@dataclass(eq=False)
class Group:
    """Up to ``STATES_CHUNK`` watched tries asked about in one held states request, by a task of their own
    (``Attendant.follow``). New tries join the newest group while it has room (its request is asked again with
    them: ``grown``); a group that ends up small joins the newest one."""

    conn_id: str
    tries: dict[Key, Watched] = field(default_factory=dict)
    grown: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


@dataclass
class CycleReport:
    """What one cycle of reading the parked tries did (logged; read by the tests)."""

    parked: int = 0  # parked tries read: all of them (``full_read``), or those changed lately
    full_read: bool = True
    registered: int = 0
    ended: dict[str, int] = field(default_factory=dict)
    handed_back: int = 0  # tries moved to their own pool, for a worker to run (``HandBack``)
    reparked: int = 0  # retries of tries that ended on a worker, parked again (``repark_retries``)
    errors: int = 0
    reachable: bool = True
    valve_open: bool = False
    seconds: dict[str, float] = field(default_factory=dict)  # phase → seconds it took


class Attendant(AirflowSide, ServiceLinks):
    """Ends the parked tries of one Airflow deployment (see the module's text), on one event loop: a cycle reads the
    parked tries every interval and registers the new ones, each with its task's own connection's service; a task per
    group of watched tries (one connection's) holds a states request and ends what it answers. Airflow's database is
    used from ``DB_THREADS`` threads (its sessions are per thread). ``session_factory``: Airflow's
    ``create_session``; ``endpoint``: connection id → how to reach that service (looked up from the connection when
    None)."""

    def __init__(
        self,
        settings: Settings,
        session_factory: Callable[[], Any],
        endpoint: Callable[[str], Endpoint] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.session_factory = session_factory
        self.endpoint = endpoint or self._connection_endpoint
        self.clock = clock
        self.watched: dict[Key, Watched] = {}
        self.groups: list[Group] = []
        self.specs: dict[Any, dict[str, tuple[dict[str, Any] | None, str]]] = {}  # version → task → (kwargs, pool)
        self.specs_read: dict[Any, float] = {}  # when; 2.10's versions are DAG ids, read again after SPECS_TTL
        self.unreachable_since: dict[str, float] = {}  # connection id → since when its service is out of reach
        self.valve_open = False
        self.newest: datetime | None = None  # the newest updated_at of a parked try read
        self.full_read_at = 0.0  # when to read every parked try again
        self.reached: dict[str, Endpoint] = {}  # connection id → the endpoint looked up last, which its groups ask
        self.look_up_at: dict[str, float] = {}  # connection id → when to look it up again
        self.refusals: dict[tuple[Key, int], int] = {}  # a try → registrations refused for now (409, 503) in a row
        self.pending: list[Registration] = []  # the registrations of the last cycle that read new tries
        self.journal = TryJournal()  # the parked tries' logs (try_log)
        self.heartbeat_at = 0.0  # when to write the next heartbeat (parking_health)
        self.beat_error = ""  # the last heartbeat's error, logged once
        self.listeners = False  # listener plugins in this deployment: every end is left to a worker (serve)
        self.http: httpx.AsyncClient | None = None
        self.db = ThreadPoolExecutor(DB_THREADS, thread_name_prefix="smartsensor-attendant-db")

    async def in_db(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on one of the database threads."""
        return await asyncio.get_running_loop().run_in_executor(self.db, fn, *args)

    # -- the cycle ---------------------------------------------------------------------------------------------
    async def cycle(self) -> CycleReport:
        """One pass: read the parked tries, forget the ones no longer parked, register the new ones (ending those
        the registration already answers, handing back those it cannot serve), mind the valve."""
        report = CycleReport()
        mark = time.monotonic()

        def took(phase: str) -> None:
            nonlocal mark
            now = time.monotonic()
            report.seconds[phase] = round(now - mark, 3)
            mark = now

        since = self.read_plan()
        parked, newest = await self.in_db(self.parked_tries, since)
        took("read")
        report.parked, report.full_read = len(parked), since is None
        if newest is not None and (self.newest is None or newest > self.newest):
            self.newest = newest
        report.reparked = await self.in_db(self.repark_retries)
        if since is None:
            self.full_read_at = self.clock() + FULL_READ_EVERY
            gone = [k for k, w in self.watched.items() if k not in parked or parked[k].try_number != w.try_number]
        else:  # a try that left the pool is not in a read of changes: the next full read says so
            gone = [k for k, p in parked.items() if k in self.watched and self.watched[k].try_number != p.try_number]
        for key in gone:
            self.forget(key)  # ended, cleared or changed by someone else: no longer this attendant's
        ends: list[ParkedEnd | HandBack] = []
        new = {k: v for k, v in parked.items() if k not in self.watched}
        self.pending = []
        if new:
            bodies, backs = await self.in_db(self.registrations, new)
            took("prepare")
            report.registered, answered = await self.register(bodies, backs)
            ends += answered
            took("register")
        self.forget_unused_services({r.conn_id for r in self.pending})
        await self.check_health()
        report.reachable = not self.unreachable_since
        ends += self.overdue()
        report.ended, report.handed_back = await self.end(ends)
        report.errors = sum(1 for e in ends if isinstance(e, ParkedEnd) and e.state == "error")
        took("end")
        await self.in_db(self.mind_valve)
        if self.clock() >= self.heartbeat_at:
            self.heartbeat_at = self.clock() + HEARTBEAT_EVERY
            await self.in_db(self.beat)
        if self.journal.pending:
            await self.in_db(self.journal.flush)
        report.valve_open = self.valve_open
        return report

    def overdue(self) -> list[ParkedEnd | HandBack]:
        """The ends of the watched tries past their ``execution_timeout`` (counted from when the try began to wait),
        as the provider's trigger ends such a try: resumed on a worker with an ``execution_timeout`` event, whose
        ``execute_complete`` raises Airflow's ``AirflowTaskTimeout`` (retried while the task has tries left) or skips
        with soft_fail; a soft_fail skip with nothing after it is ended here."""
        now = self.clock()
        ends: list[ParkedEnd | HandBack] = []
        for w in self.watched.values():
            if w.deadline is not None and now >= w.deadline:
                why = f"smartsensor: the try reached its execution_timeout ({w.limit:g} s)"
                state = "skipped" if w.soft_fail else "error"
                end = self.end_of(
                    w.key, w.try_number, state, why + ("; soft_fail skips it" if w.soft_fail else ""), w.since
                )
                event = {"state": "execution_timeout", "error": why, "key": w.asked.key.in_instance("").to_json()}
                ends.append(self.resumed_if_needed(w, end, event))
        return ends

    def forget(self, key: Key) -> None:
        """Stop watching ``key`` (its group stops asking about it)."""
        w = self.watched.pop(key, None)
        if w is not None and w.group is not None:
            w.group.tries.pop(key, None)

    def read_all_next(self) -> None:
        """Read every parked try next cycle: some are to be registered (again), and a read of changes would not
        see them (Airflow did not change them)."""
        self.full_read_at = 0.0

    def read_plan(self) -> datetime | None:
        """Where this cycle's read starts: None (every parked try) every ``FULL_READ_EVERY`` seconds and until one
        read saw a change, else ``LOOKBACK`` seconds before the newest change seen (a transaction that commits
        late, a scheduler whose clock is a little behind: the next full read finds what this misses)."""
        if self.newest is None or self.clock() >= self.full_read_at:
            return None
        return self.newest - timedelta(seconds=LOOKBACK)

    # -- registering -------------------------------------------------------------------------------------------

    async def register(
        self, bodies: list[Registration], backs: list[HandBack]
    ) -> tuple[int, list[ParkedEnd | HandBack]]:
        """Register new parked tries (``bodies``, as ``registrations`` read and rendered them; ``backs``: those it
        cannot serve) with their connections' services, ``REGISTER_BATCH`` a request (``POST /tasks/batch``; one by
        one where the service refuses a whole batch, e.g. one without that endpoint), up to ``REGISTER_PARALLEL``
        at once: how many it watches now, and the ends that the answers already call for (a partition already
        there; a check the service refuses) with the hand-backs."""
        self.pending = bodies
        ends: list[ParkedEnd | HandBack] = list(backs)
        by_conn: dict[str, list[Registration]] = {}
        for r in bodies:
            by_conn.setdefault(r.conn_id, []).append(r)
        waiting: list[tuple[Key, int]] = []
        lanes = asyncio.Semaphore(REGISTER_PARALLEL)

        async def one_batch(conn_id: str, endpoint: Endpoint, batch: list[Registration]) -> None:
            async with lanes:
                joined = await self.register_batch(conn_id, endpoint, batch, ends)
            waiting.extend((w.key, w.try_number) for w in joined)
            self.join(joined)  # asked about while the other batches register

        for conn_id, regs in by_conn.items():
            try:
                endpoint = await self.endpoint_of(conn_id)
                batches = [regs[start : start + REGISTER_BATCH] for start in range(0, len(regs), REGISTER_BATCH)]
                failed = [
                    exc
                    for exc in await asyncio.gather(
                        *(one_batch(conn_id, endpoint, batch) for batch in batches), return_exceptions=True
                    )
                    if exc is not None
                ]
                if failed:
                    raise failed[0]
            except ApiError as exc:
                if not exc.transient:
                    raise
                self.out_of_reach(conn_id, exc)
                self.read_all_next()  # the tries not registered yet: a read of changes would not see them again
        registered = len(waiting)
        watching = set(waiting)
        unrecorded = [(r.key, r.try_number) for r in bodies if r.since is None and (r.key, r.try_number) in watching]
        if unrecorded:  # 2.10: when each began to wait, kept in Airflow (a restarted attendant counts from there)
            await self.in_db(self.record_waiting, unrecorded)
        return registered, ends

    async def register_batch(
        self, conn_id: str, endpoint: Endpoint, batch: list[Registration], ends: list[ParkedEnd | HandBack]
    ) -> list[Watched]:
        """Register one batch with ``conn_id``'s service: the tries it watches now; the ends and hand-backs its
        answers call for are added to ``ends``. Answers are matched to tries by their key."""
        sent = [replace(r.body, key=r.body.key.in_instance(endpoint.instance)) for r in batch]
        many = await self.post(conn_id, endpoint, "/tasks/batch", {"tries": [b.to_json() for b in sent]})
        if "status" in many:  # the whole batch refused: a service before /tasks/batch, or a body it cannot take
            answers = [await self.register_one(conn_id, endpoint, b) for b in sent]
        else:
            answers = read_answer(batch_answer, many, "/tasks/batch")
        by_try = {try_id(a.key): a for a in answers}
        now = datetime.now(timezone.utc)
        joined: list[Watched] = []
        for r, body in zip(batch, sent, strict=True):
            answer = by_try.get(try_id(body.key))
            if answer is None:
                raise ApiError(f"/tasks/batch: no answer for {body.key}", transient=True)
            if isinstance(answer, Refused):
                back = self.refused(r, answer)
                if back is not None:
                    ends.append(back)
                continue
            self.refusals.pop((r.key, r.try_number), None)
            since = r.since or now
            deadline = None
            if r.execution_timeout is not None:
                waited = max(0.0, (now - since).total_seconds())
                deadline = self.clock() + r.execution_timeout - waited
            w = Watched(
                r.key,
                r.try_number,
                answer.asked(body.key),
                since,
                None,
                deadline,
                r.execution_timeout,
                r.soft_fail,
                conn_id,
                r.pool,
                r.after_end,
            )
            self.journal.note(
                r.key,
                r.try_number,
                f"waiting since {since:%Y-%m-%d %H:%M:%S} UTC for {r.body.sensor_class} {json.dumps(r.body.persist)};"
                f" registered with the service of connection {conn_id!r} (check {answer.hashcode}: {answer.state})",
            )
            end = self.end_for(w, answer)
            if end is not None:
                ends.append(end)
            else:
                self.watched[r.key] = w
                joined.append(w)
        return joined

    async def register_one(
        self, conn_id: str, endpoint: Endpoint, registration: TryRegistration
    ) -> Registered | Refused:
        """``POST /tasks`` for one try: the service's answer, or its refusal (4xx) as a batch would answer it."""
        answer = await self.post(conn_id, endpoint, "/tasks", registration.to_json())
        if "status" in answer:
            return Refused(registration.key, answer["status"], answer["detail"])
        return read_answer(Registered.from_json, answer, "/tasks")

    def refused(self, r: Registration, answer: Refused) -> HandBack | None:
        """What follows a registration the service refused: for now (409, 503) it is asked again next cycle, up to
        ``REFUSALS`` times in a row, then the try is handed back to Airflow; a check the service cannot take (422…)
        is handed back at once (a worker's registration meets the same refusal and fails the try as Airflow
        retries a try that raised)."""
        why = f"smartsensor refused it ({answer.status}): {answer.detail or 'no reason given'}"
        if answer.status in (409, 503):
            seen = self.refusals[(r.key, r.try_number)] = self.refusals.get((r.key, r.try_number), 0) + 1
            if seen < REFUSALS:
                log.warning(
                    "smartsensor attendant: %s try %s not registered yet (%d): %s", r.key, r.try_number, seen, why
                )
                self.read_all_next()
                return None
            why += f", {seen} times"
        self.refusals.pop((r.key, r.try_number), None)
        return back_of(r.key, r.try_number, r.pool, why)

    def join(self, tries: list[Watched]) -> None:
        """Put newly watched ``tries`` into the newest group of their connection while it has room, then into new
        groups, each asked about by a task of its own."""
        by_conn: dict[str, list[Watched]] = {}
        for w in tries:
            by_conn.setdefault(w.conn_id, []).append(w)
        for conn_id, left in by_conn.items():
            while left:
                mine = [g for g in self.groups if g.conn_id == conn_id]
                newest = mine[-1] if mine else None
                if newest is None or len(newest.tries) >= STATES_CHUNK:
                    newest = Group(conn_id)
                    self.groups.append(newest)
                    newest.task = asyncio.get_running_loop().create_task(self.follow(newest))
                room = STATES_CHUNK - len(newest.tries)
                for w in left[:room]:
                    w.group = newest
                    newest.tries[w.key] = w
                left = left[room:]
                newest.grown.set()

    # -- answers -----------------------------------------------------------------------------------------------
    async def follow(self, group: Group) -> None:
        """Ask about ``group``'s tries in a held states request to their connection's service until none is left,
        end the answered ones at once, and ask again; asked again at once when tries join (the request in flight is
        dropped: the service stops reading for it). A small group (under a quarter full) that is not its
        connection's newest joins the newest one."""
        loop = asyncio.get_running_loop()
        try:
            while group.tries:
                if self.merged_away(group):
                    return
                endpoint = await self.endpoint_or_none(group.conn_id)
                if endpoint is None:
                    await asyncio.sleep(self.settings.interval)
                    continue
                group.grown.clear()
                asked = list(group.tries.values())
                started = loop.time()
                body = states_request(
                    AskedTry(w.asked.key.in_instance(endpoint.instance), w.asked.hashcode) for w in asked
                )
                request = asyncio.ensure_future(
                    self.post(group.conn_id, endpoint, f"/tasks/states?wait={HOLD:g}", body)
                )
                grown = asyncio.ensure_future(group.grown.wait())
                await asyncio.wait({request, grown}, return_when=asyncio.FIRST_COMPLETED)
                grown.cancel()
                if not request.done():
                    request.cancel()  # tries joined: ask about all of them
                    continue
                try:
                    answer = request.result()
                except ApiError as exc:
                    if not exc.transient:
                        raise
                    self.out_of_reach(group.conn_id, exc)
                    await asyncio.sleep(self.settings.interval)
                    continue
                if "status" in answer:
                    raise ApiError(f"smartsensor refused the states request: {answer.get('detail')}")
                ends = self.answered(asked, read_answer(states_answer, answer, "/tasks/states"))
                if ends:
                    ended, handed = await self.end(ends)
                    log.info("smartsensor attendant: ended %s, handed back %d", ended, handed)
                elif loop.time() - started < self.settings.interval:
                    await asyncio.sleep(self.settings.interval)  # an early answer that ended nothing: pace
        except asyncio.CancelledError:
            raise
        except Exception:  # the group's tries are registered again by the next cycle
            log.exception("smartsensor attendant: asking about %d tries failed", len(group.tries))
            for key in list(group.tries):
                self.forget(key)
            self.read_all_next()
        finally:
            if group in self.groups and not group.tries:
                self.groups.remove(group)

    def merged_away(self, group: Group) -> bool:
        """Move a small group (under a quarter full) that is not its connection's newest into the newest one:
        whether it moved (its task then ends)."""
        mine = [g for g in self.groups if g.conn_id == group.conn_id]
        if group is mine[-1] or len(group.tries) >= STATES_CHUNK // 4:
            return False
        moved = list(group.tries.values())
        group.tries.clear()
        self.groups.remove(group)
        self.join(moved)
        return True

    def answered(self, asked: list[Watched], states: list[TryState]) -> list[ParkedEnd | HandBack]:
        """The ends the service's answers call for, each answer matched to the try its key names (an answer for no
        try asked about is ignored); tries the service no longer has (``RETRY_STATES``) are forgotten, to be
        registered again by the next cycle."""
        by_try = {try_id(s.key): s for s in states}
        ends: list[ParkedEnd | HandBack] = []
        for w in asked:
            state = by_try.get(try_id(w.asked.key))
            if state is None or self.watched.get(w.key) is not w:
                continue  # not answered, forgotten (no longer parked) or registered again meanwhile
            end = self.end_for(w, state)
            if end is not None:
                ends.append(end)
            elif state.state in RETRY_STATES:
                self.forget(w.key)
                self.read_all_next()
        return ends

    def end_for(self, w: Watched, answer: Registered | TryState) -> ParkedEnd | HandBack | None:
        """How a watched try ends for the service's answer, or None while it waits. A try ends here (as Airflow
        ends a try from its trigger with ``end_from_trigger``) only when Airflow runs nothing after that end; a
        failure, a task with callbacks, email or outlets for that end, or a deployment with listener plugins, is
        resumed on a worker with the answer as its event, as the triggerer path resumes it (``parking.HandBack``)."""
        state, error = answer.state, answer.error
        if state == "success":
            end = self.end_of(w.key, w.try_number, "success", None, w.since)
        elif state == "skipped":
            end = self.end_of(w.key, w.try_number, "skipped", f"smartsensor: {error or 'skipped (soft_fail)'}", w.since)
        elif is_timeout(answer):
            end = self.end_of(w.key, w.try_number, "failed", f"smartsensor: {error or 'timed out'}", w.since)
        elif state in ("failed", "upstream_failed", "removed"):
            end = self.end_of(w.key, w.try_number, "error", f"smartsensor: {error or state}", w.since)
        else:
            return None
        event = {**outcome(answer), "hashcode": answer.hashcode, "key": w.asked.key.in_instance("").to_json()}
        return self.resumed_if_needed(w, end, event)

    def resumed_if_needed(self, w: Watched, end: ParkedEnd, event: dict[str, Any]) -> ParkedEnd | HandBack:
        """``end``, or, when Airflow runs work after it that only a worker runs (``work_after``), the try resumed
        on a worker with ``event``."""
        work = self.work_after(w, end.state)
        if work:
            return back_of(w.key, w.try_number, w.pool, f"{end.state}: a worker runs {', '.join(work)}", event)
        return end

    def work_after(self, w: Watched, end: str) -> list[str]:
        """What Airflow runs after ``w`` ends as ``end`` that only a worker runs: nothing for a success or a skip
        of a task without callbacks or outlets; a failure's callbacks, email, retry rule and history always (as
        the triggerer path resumes a failing try on a worker); listener plugins for any end."""
        work = list(w.after_end.get(end, []))
        if end in ("failed", "error"):
            work.append("Airflow's failure handling")
        if self.listeners:
            work.append("the listeners")
        return work

    @staticmethod
    def end_of(key: Key, try_number: int, state: str, note: str | None, since: datetime | None = None) -> ParkedEnd:
        return ParkedEnd(key[0], key[1], key[2], key[3], try_number, state, note, since)

    async def end(self, ends: list[ParkedEnd | HandBack]) -> tuple[dict[str, int], int]:
        """Apply ``ends`` through Airflow's models (on a database thread) and stop watching them: how many of each
        state applied, and how many tries were handed back (the others were no longer parked, or no longer that
        try)."""
        if not ends:
            return {}, 0
        applied, handed = await self.in_db(self.apply, ends)
        for end in ends:
            self.forget(end.key)
            self.refusals.pop((end.key, end.try_number), None)
        return applied, handed

    def beat(self) -> None:
        """This attendant's heartbeat (``parking_health.heartbeat``). One that cannot be written (a role without the
        grants) is logged, once per error: the parked tries are still ended, but ``status`` and ``park = auto``
        cannot see this attendant."""
        try:
            with self.session_factory() as session:
                heartbeat(session, self.settings.pool, len(self.watched))
        except Exception as exc:  # noqa: BLE001 - the cycle goes on
            if repr(exc) != self.beat_error:
                log.warning("smartsensor attendant: its heartbeat could not be written: %s", exc)
            self.beat_error = repr(exc)
        else:
            self.beat_error = ""

    def release(self) -> int:
        """Hand every parked try back to Airflow, each to its task's own pool (``python -m
        smartsensor_airflow.attendant release``: parking switched off with no attendant to run); how many."""
        return self.apply(self.release_backs())[1]

    # -- the safety valve --------------------------------------------------------------------------------------

    # -- HTTP --------------------------------------------------------------------------------------------------

    # -- running -----------------------------------------------------------------------------------------------
    async def serve(self, stop: asyncio.Event) -> None:
        """Cycle every ``interval`` seconds until ``stop`` is set; the groups' tasks are cancelled then."""
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=HOLD + 30.0))
        self.open_valve_found(await self.in_db(self.ensure_pool))
        self.listeners = has_listeners()
        log.info(
            "smartsensor attendant: watching pool %r every %g s%s",
            self.settings.pool,
            self.settings.interval,
            "; listener plugins: every end is left to a worker" if self.listeners else "",
        )
        last_error = ""
        try:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    report = await self.cycle()
                    if report.registered or report.ended or report.handed_back:
                        log.info("smartsensor attendant: %s", report)
                    last_error = ""
                except Exception as exc:  # a failed cycle (the database restarting…) is tried again next time
                    if repr(exc) != last_error:  # the traceback once, then a line a cycle while it fails the same
                        log.exception("smartsensor attendant: cycle failed")
                    else:
                        log.warning("smartsensor attendant: cycle failed again: %s", exc)
                    last_error = repr(exc)
                left = max(0.0, self.settings.interval - (time.monotonic() - started))
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), left)
        finally:
            tasks = [g.task for g in self.groups if g.task is not None]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.http.aclose()
            self.db.shutdown(wait=True)


def run(stop: threading.Event | None = None, settings: Settings | None = None) -> None:
    """Run the attendant until ``stop`` is set (SIGTERM or SIGINT when run as a program)."""
    load_note_models()
    attendant = Attendant(settings or Settings.from_airflow(), airflow_session)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()
        if stop is not None:  # a thread's event: set ours when it is set
            threading.Thread(target=lambda: (stop.wait(), loop.call_soon_threadsafe(stopping.set)), daemon=True).start()
        else:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stopping.set)
        await attendant.serve(stopping)

    asyncio.run(main())


def release() -> int:
    """Hand every parked try back to Airflow (parking switched off): how many."""
    attendant = Attendant(Settings.from_airflow(), airflow_session)
    try:
        return attendant.release()
    finally:
        attendant.db.shutdown(wait=True)


def status() -> int:
    """Print the parked tries and their attendant (``parking_health``); 1 when tries wait with no attendant alive."""
    settings = Settings.from_airflow()
    alive_for = float(airflow_conf.get("smartsensor", "park_attendant_timeout", fallback="60"))
    with airflow_session() as session:
        health = parking_health(session, settings.pool, alive_for=alive_for)
    print(f"smartsensor parking ({settings.pool}): {health.line()}")
    return 1 if health.unattended else 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = sys.argv[1:] if argv is None else argv
    if args == ["release"]:
        print(f"smartsensor attendant: {release()} parked tries handed back to their own pools")
        return 0
    if args == ["status"]:
        return status()
    if args:
        print("usage: python -m smartsensor_airflow.attendant [release | status]", file=sys.stderr)
        return 2
    run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
