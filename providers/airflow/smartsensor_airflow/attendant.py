"""The parking attendant (issue 55): a process of the Airflow deployment, next to its scheduler, that ends parked
tries. Run it with Airflow's environment (its airflow.cfg, its database, the ``smartsensor_default`` connection):

    python -m smartsensor_airflow.attendant

It runs on one event loop:

1. every ``[smartsensor] park_interval`` seconds (0.5) a cycle reads the tries parked in ``[smartsensor]
   park_pool`` (``scheduled`` there: the scheduler put them there once their upstream tasks were done and never
   queues them): every ``FULL_READ_EVERY`` seconds all of them, forgetting the ones no longer parked, and between
   those only the ones Airflow changed lately (``updated_at``); it registers the new ones with the service,
   ``REGISTER_BATCH`` a request (``POST /tasks/batch``): each one's check read from the serialized DAG and rendered
   with its run's row (``parked_checks``), as a trigger would render it. A check it cannot render ends the try as an
   ``error`` (retried while the task has tries left, as Airflow retries a try that raised);
2. the tries it watches are asked about in groups of up to ``STATES_CHUNK``, each group by a task of its own that
   holds one ``POST /tasks/states?wait=`` request (the service answers it the moment one of them ends) and ends the
   answered tries at once through Airflow's models (``parking.end_parked``): success, skipped (soft_fail), failed (a
   timeout, its reason as the try's note), an error (retried). New tries join the newest group, whose request is
   asked again with them;
3. the safety valve: while the service stays out of reach for longer than ``[smartsensor] park_fallback_grace``
   seconds, the parking pool gets ``[smartsensor] park_valve_slots`` slots, so the scheduler runs the parked tries
   today's way (their ``execute`` checks on its own); once the service answers again the pool closes and new tries
   park again.

Airflow's database is used from ``DB_THREADS`` threads. Several attendants may run (each ends only what is still
parked, under a row lock). It never writes anything of Airflow's but the parked tries it ends and the parking pool's
slots; smartsensor's own processes never write Airflow's database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, NamedTuple, TypeVar

# Airflow first: run as a program, this module is imported before Airflow, whose start imports the deployment's
# local settings, which may import this provider's policy, which imports _compat: before _compat, not during it.
import airflow  # noqa: F401
import httpx

from smartsensor_airflow._compat import (
    BaseHook,
    airflow_conf,
    airflow_session,
    airflow_version,
    dag_run_model,
    load_note_models,
    pool_model,
    serialized_dag_rows,
    task_instance_model,
)
from smartsensor_airflow.client import (
    API,
    ApiError,
    Endpoint,
    endpoint_from_connection,
    error_message,
    is_timeout,
)
from smartsensor_airflow.parked_checks import rendered_check, serialized_tasks, start_kwargs
from smartsensor_airflow.parking import Key, ParkedEnd, end_parked, in_batches
from smartsensor_airflow.start import DEFAULT_PARK_POOL
from smartsensor_airflow.trigger_context import row_context
from smartsensor_airflow.wire import (
    AskedTry,
    Refused,
    Registered,
    Registration as TryRegistration,
    TryKey,
    TryState,
    WireError,
    batch_answer,
    states_answer,
    states_request,
)

log = logging.getLogger("smartsensor_airflow.attendant")

STATES_CHUNK = 1000  # tries per group: keys per held states request
REGISTER_BATCH = 100  # tries per registration request (the service takes up to 1,000): each batch is asked about
# while the next registers
HOLD = 25.0  # seconds the service holds a group's states request (it allows 30)
FULL_READ_EVERY = 10.0  # seconds between two reads of every parked try; the cycles between read what changed
LOOKBACK = 5.0  # seconds a read of changes reaches back before the newest change seen
ENDPOINT_TTL = 30.0  # seconds between two look-ups of the connection while the service answers
DB_THREADS = 2  # threads that use Airflow's database: a cycle's reads, a group's ends
T = TypeVar("T")
SPECS_TTL = 30.0  # seconds a 2.10 DAG's serialized checks are kept (2.10 keeps one version a DAG: it may change)
RETRY_STATES = frozenset({"unknown", "superseded"})  # the service no longer has this try's check: register again


def read_answer(parse: Callable[[Any], T], answer: dict[str, Any], path: str) -> T:
    """The service's answer to ``path`` read by ``parse`` (a ``wire`` reader); ApiError (transient, as a body that
    is not JSON is) when it is not that answer."""
    try:
        return parse(answer)
    except WireError as exc:
        raise ApiError(f"{path}: the answer is not the service's: {exc}", transient=True) from None


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


@dataclass(eq=False)
class Group:
    """Up to ``STATES_CHUNK`` watched tries asked about in one held states request, by a task of their own
    (``Attendant.follow``). New tries join the newest group while it has room (its request is asked again with
    them: ``grown``); a group that ends up small joins the newest one."""

    tries: dict[Key, Watched] = field(default_factory=dict)
    grown: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class Registration(NamedTuple):
    """A new parked try to register: its registration body, and its execution_timeout (seconds) and soft_fail, which
    the attendant keeps itself (the service knows the sensor's ``timeout`` only)."""

    key: Key
    try_number: int
    body: TryRegistration
    execution_timeout: float | None
    soft_fail: bool


@dataclass
class CycleReport:
    """What one cycle of reading the parked tries did (logged; read by the tests)."""

    parked: int = 0  # parked tries read: all of them (``full_read``), or those changed lately
    full_read: bool = True
    registered: int = 0
    ended: dict[str, int] = field(default_factory=dict)
    errors: int = 0
    reachable: bool = True
    valve_open: bool = False
    seconds: dict[str, float] = field(default_factory=dict)  # phase → seconds it took


@dataclass
class Settings:
    """The attendant's settings, from ``[smartsensor]`` in airflow.cfg."""

    pool: str = DEFAULT_PARK_POOL
    interval: float = 0.5
    fallback_grace: float = 300.0
    valve_slots: int = 128
    conn_id: str = "smartsensor_default"
    batch: int = 500

    @classmethod
    def from_airflow(cls) -> Settings:
        get = airflow_conf.get
        return cls(
            pool=get("smartsensor", "park_pool", fallback=DEFAULT_PARK_POOL) or DEFAULT_PARK_POOL,
            interval=float(get("smartsensor", "park_interval", fallback="0.5")),
            fallback_grace=float(get("smartsensor", "park_fallback_grace", fallback="300")),
            valve_slots=int(get("smartsensor", "park_valve_slots", fallback="128")),
            conn_id=get("smartsensor", "park_conn_id", fallback="smartsensor_default") or "smartsensor_default",
        )


class Attendant:
    """Ends the parked tries of one Airflow deployment (see the module's text), on one event loop: a cycle reads the
    parked tries every interval and registers the new ones; a task per group of watched tries holds a states request
    and ends what it answers. Airflow's database is used from ``DB_THREADS`` threads (its sessions are per thread).
    ``session_factory``: Airflow's ``create_session``; ``endpoint``: how to reach the service (looked up from the
    connection when None)."""

    def __init__(
        self,
        settings: Settings,
        session_factory: Callable[[], Any],
        endpoint: Callable[[], Endpoint] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.session_factory = session_factory
        self.endpoint = endpoint or self._connection_endpoint
        self.clock = clock
        self.watched: dict[Key, Watched] = {}
        self.groups: list[Group] = []
        self.specs: dict[Any, dict[str, Any]] = {}  # serialized DAG version → task_id → its start kwargs or None
        self.specs_read: dict[Any, float] = {}  # when; 2.10's versions are DAG ids, read again after SPECS_TTL
        self.unreachable_since: float | None = None
        self.valve_open = False
        self.newest: datetime | None = None  # the newest updated_at of a parked try read
        self.full_read_at = 0.0  # when to read every parked try again
        self.reached: Endpoint | None = None  # the endpoint looked up last, which the groups ask
        self.look_up_at = 0.0  # when to look the connection up again
        self.http: httpx.AsyncClient | None = None
        self.db = ThreadPoolExecutor(DB_THREADS, thread_name_prefix="smartsensor-attendant-db")

    async def in_db(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on one of the database threads."""
        return await asyncio.get_running_loop().run_in_executor(self.db, fn, *args)

    # -- the cycle ---------------------------------------------------------------------------------------------
    async def cycle(self) -> CycleReport:
        """One pass: read the parked tries, forget the ones no longer parked, register the new ones (ending those
        the registration already answers), mind the valve."""
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
        if since is None:
            self.full_read_at = self.clock() + FULL_READ_EVERY
            gone = [k for k, w in self.watched.items() if parked.get(k, (None,))[0] != w.try_number]
        else:  # a try that left the pool is not in a read of changes: the next full read says so
            gone = [k for k, (n, _) in parked.items() if k in self.watched and self.watched[k].try_number != n]
        for key in gone:
            self.forget(key)  # ended, cleared or changed by someone else: no longer this attendant's
        ends: list[ParkedEnd] = []
        try:
            endpoint = self.reached
            if endpoint is None or self.unreachable_since is not None or self.clock() >= self.look_up_at:
                endpoint = self.reached = await self.in_db(self.endpoint)  # the connection may have changed
                self.look_up_at = self.clock() + ENDPOINT_TTL
            new = {k: v for k, v in parked.items() if k not in self.watched}
            if new:
                report.registered, answered = await self.register(endpoint, new)
                ends += answered
                took("register")
            elif not self.watched and self.unreachable_since is not None:
                await self.health(endpoint)  # nothing is asked about: is the service back?
        except ApiError as exc:
            if not exc.transient:
                raise
            self.out_of_reach(exc)
            self.read_all_next()  # the new tries not registered yet: a read of changes would not see them again
        report.reachable = self.unreachable_since is None
        ends += self.overdue()
        report.ended = await self.end(ends)
        report.errors = sum(1 for e in ends if e.state == "error")
        took("end")
        await self.in_db(self.mind_valve)
        report.valve_open = self.valve_open
        return report

    def overdue(self) -> list[ParkedEnd]:
        """The ends of the watched tries past their ``execution_timeout`` (counted from when this attendant first saw
        them parked), as Airflow ends a try its execution_timeout interrupts: an error, retried while the task has
        tries left (``AirflowTaskTimeout``), or skipped with soft_fail, as Airflow's sensor skips such a poke."""
        now = self.clock()
        ends = []
        for w in self.watched.values():
            if w.deadline is not None and now >= w.deadline:
                why = f"smartsensor: the try reached its execution_timeout ({w.limit:g} s)"
                state = "skipped" if w.soft_fail else "error"
                ends.append(
                    self.end_of(
                        w.key, w.try_number, state, why + ("; soft_fail skips it" if w.soft_fail else ""), w.since
                    )
                )
        return ends

    def out_of_reach(self, exc: Exception) -> None:
        if self.unreachable_since is None:
            self.unreachable_since = self.clock()
            log.warning("smartsensor attendant: the service is out of reach (%s)", exc)

    def forget(self, key: Key) -> None:
        """Stop watching ``key`` (its group stops asking about it)."""
        w = self.watched.pop(key, None)
        if w is not None and w.group is not None:
            w.group.tries.pop(key, None)

    def parked_tries(self, changed_since: datetime | None = None) -> tuple[dict[Key, tuple[int, Any]], datetime | None]:
        """key → (try number, serialized DAG version) of every try parked in the pool, or of those changed since
        ``changed_since`` (Airflow's ``updated_at``, which its models set on every change); and the newest
        ``updated_at`` read (None when none was)."""
        TaskInstance = task_instance_model()
        from sqlalchemy import select

        version = getattr(TaskInstance, "dag_version_id", None)  # Airflow 3: the try's DAG version
        columns = [
            TaskInstance.dag_id,
            TaskInstance.run_id,
            TaskInstance.task_id,
            TaskInstance.map_index,
            TaskInstance.try_number,
            TaskInstance.updated_at,
            *([version] if version is not None else []),
        ]
        where = [TaskInstance.state == "scheduled", TaskInstance.pool == self.settings.pool]
        if changed_since is not None:
            where.append(TaskInstance.updated_at >= changed_since)
        with self.session_factory() as session:
            rows = session.execute(select(*columns).where(*where)).all()
        newest = max((r[5] for r in rows if r[5] is not None), default=None)
        return {(r[0], r[1], r[2], r[3]): (r[4], r[6] if len(r) > 6 else r[0]) for r in rows}, newest

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
    def registrations(
        self, endpoint: Endpoint, new: dict[Key, tuple[int, Any]]
    ) -> tuple[list[Registration], list[ParkedEnd]]:
        """The registration of each new parked try, and the ends of those whose check cannot be rendered (an error,
        as Airflow fails a try whose templates do not render)."""
        kwargs_of = self.start_kwargs_of(new)
        runs = self.run_rows({(k[0], k[1]) for k in new})
        bodies, ends = [], []
        for key, (try_number, version) in new.items():
            kwargs = kwargs_of.get((version, key[2]))
            run = runs.get((key[0], key[1]))
            if kwargs is None or run is None:
                why = "no smartsensor check in its serialized DAG" if kwargs is None else "its run is gone"
                log.warning("smartsensor attendant: %s try %s parked with %s; left as it is", key, try_number, why)
                continue
            try:
                context = row_context(key[1], *run, kwargs.get("params"))
                registered_as, persist = rendered_check(kwargs, context)
            except Exception as exc:  # noqa: BLE001 - Airflow fails such a try (retries apply): so does this
                ends.append(self.end_of(key, try_number, "error", f"smartsensor: {type(exc).__name__}: {exc}"))
                continue
            dag_id, run_id, task_id, map_index = key
            body = TryRegistration(
                TryKey(dag_id, task_id, run_id, map_index, try_number, endpoint.instance),
                registered_as,
                persist,
                dict(kwargs.get("exec_values") or {}),
                context.get("logical_date"),
            )
            limit = kwargs.get("execution_timeout")
            soft_fail = bool((kwargs.get("exec_values") or {}).get("soft_fail"))
            bodies.append(Registration(key, try_number, body, None if limit is None else float(limit), soft_fail))
        return bodies, ends

    async def register(self, endpoint: Endpoint, new: dict[Key, tuple[int, Any]]) -> tuple[int, list[ParkedEnd]]:
        """Register the new parked tries, ``REGISTER_BATCH`` a request (``POST /tasks/batch``; one by one where
        the service refuses a whole batch, e.g. one without that endpoint): how many it watches now, and the ends
        that the answers already call for (a partition already there; a check the service refuses, an error)."""
        bodies, ends = await self.in_db(self.registrations, endpoint, new)
        now = datetime.now(timezone.utc)
        joined: list[Watched] = []
        registered = 0
        for start in range(0, len(bodies), REGISTER_BATCH):
            batch = bodies[start : start + REGISTER_BATCH]
            many = await self.post(endpoint, "/tasks/batch", {"tries": [r.body.to_json() for r in batch]})
            if "status" in many:  # the whole batch refused: a service before /tasks/batch, or a body it cannot take
                answers = [await self.register_one(endpoint, r.body) for r in batch]
            else:
                answers = read_answer(batch_answer, many, "/tasks/batch")
            for r, answer in zip(batch, answers, strict=False):
                key, try_number = r.key, r.try_number
                if isinstance(answer, Refused):
                    end = self.refused(key, try_number, answer)
                    if end is not None:
                        ends.append(end)
                    continue
                asked = answer.asked(r.body.key)
                deadline = None if r.execution_timeout is None else self.clock() + r.execution_timeout
                w = Watched(key, try_number, asked, now, None, deadline, r.execution_timeout, r.soft_fail)
                end = self.end_for(w, answer)
                if end is not None:
                    ends.append(end)
                else:
                    self.watched[key] = w
                    joined.append(w)
            self.join(joined[registered:])  # asked about while the next batch registers
            registered = len(joined)
        return registered, ends

    async def register_one(self, endpoint: Endpoint, registration: TryRegistration) -> Registered | Refused:
        """``POST /tasks`` for one try: the service's answer, or its refusal (4xx) as a batch would answer it."""
        answer = await self.post(endpoint, "/tasks", registration.to_json())
        if "status" in answer:
            return Refused(registration.key, answer["status"], answer["detail"])
        return read_answer(Registered.from_json, answer, "/tasks")

    def refused(self, key: Key, try_number: int, answer: Refused) -> ParkedEnd | None:
        """The end of a try the service did not register: an error for a check it cannot take (422, or a single
        registration's refusal); none for a conflict or a module it cannot import now (409, 503: asked again
        next cycle)."""
        if answer.status in (409, 503):
            log.warning("smartsensor attendant: %s try %s not registered yet: %s", key, try_number, answer)
            self.read_all_next()
            return None
        why = answer.detail or "smartsensor refused this check"
        return self.end_of(key, try_number, "error", f"smartsensor: {why}")

    def join(self, tries: list[Watched]) -> None:
        """Put newly watched ``tries`` into the newest group while it has room, then into new groups, each asked
        about by a task of its own."""
        while tries:
            newest = self.groups[-1] if self.groups else None
            if newest is None or len(newest.tries) >= STATES_CHUNK:
                newest = Group()
                self.groups.append(newest)
                newest.task = asyncio.get_running_loop().create_task(self.follow(newest))
            room = STATES_CHUNK - len(newest.tries)
            for w in tries[:room]:
                w.group = newest
                newest.tries[w.key] = w
            tries = tries[room:]
            newest.grown.set()

    def start_kwargs_of(self, new: dict[Key, tuple[int, Any]]) -> dict[tuple[Any, str], dict[str, Any] | None]:
        """(DAG version, task_id) → the start kwargs the serialized DAG carries for each new try's task."""
        now = self.clock()
        missing = {
            version
            for _, version in new.values()
            if version not in self.specs or (isinstance(version, str) and now - self.specs_read[version] > SPECS_TTL)
        }
        if missing:
            with self.session_factory() as session:
                for version, data in serialized_dag_rows(session, missing):
                    self.specs[version] = {t: start_kwargs(e) for t, e in serialized_tasks(data).items()}
                    self.specs_read[version] = now
        return {(v, k[2]): self.specs.get(v, {}).get(k[2]) for k, (_, v) in new.items()}

    def run_rows(self, runs: set[tuple[str, str]]) -> dict[tuple[str, str], tuple[Any, Any, Any, Any]]:
        """(dag_id, run_id) → the run's logical date, data interval start and end, and conf."""
        DagRun = dag_run_model()
        from sqlalchemy import select, tuple_

        logical = DagRun.logical_date if airflow_version()[0] >= 3 else DagRun.execution_date  # 2.10: a property
        with self.session_factory() as session:
            rows = session.execute(
                select(
                    DagRun.dag_id,
                    DagRun.run_id,
                    logical,
                    DagRun.data_interval_start,
                    DagRun.data_interval_end,
                    DagRun.conf,
                ).where(tuple_(DagRun.dag_id, DagRun.run_id).in_(list(runs)))
            ).all()
        return {(r[0], r[1]): (r[2], r[3], r[4], r[5]) for r in rows}

    # -- answers -----------------------------------------------------------------------------------------------
    async def follow(self, group: Group) -> None:
        """Ask about ``group``'s tries in a held states request until none is left, end the answered ones at once,
        and ask again; asked again at once when tries join (the request in flight is dropped: the service stops
        reading for it). A small group (under a quarter full) that is not the newest joins the newest one."""
        loop = asyncio.get_running_loop()
        try:
            while group.tries:
                if group is not self.groups[-1] and len(group.tries) < STATES_CHUNK // 4:
                    moved = list(group.tries.values())
                    group.tries.clear()
                    self.groups.remove(group)
                    self.join(moved)
                    return
                endpoint = self.reached
                if endpoint is None:
                    await asyncio.sleep(self.settings.interval)
                    continue
                group.grown.clear()
                asked = list(group.tries.values())
                started = loop.time()
                request = asyncio.ensure_future(
                    self.post(endpoint, f"/tasks/states?wait={HOLD:g}", states_request(w.asked for w in asked))
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
                    self.out_of_reach(exc)
                    await asyncio.sleep(self.settings.interval)
                    continue
                if "status" in answer:
                    raise ApiError(f"smartsensor refused the states request: {answer.get('detail')}")
                ends = self.answered(asked, read_answer(states_answer, answer, "/tasks/states"))
                if ends:
                    ended = await self.end(ends)
                    log.info("smartsensor attendant: ended %s", ended)
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

    def answered(self, asked: list[Watched], states: list[TryState]) -> list[ParkedEnd]:
        """The ends the service's answers call for; tries the service no longer has (``RETRY_STATES``) are
        forgotten, to be registered again by the next cycle."""
        ends: list[ParkedEnd] = []
        for w, state in zip(asked, states, strict=False):
            if self.watched.get(w.key) is not w:
                continue  # forgotten (no longer parked) or registered again meanwhile
            end = self.end_for(w, state)
            if end is not None:
                ends.append(end)
            elif state.state in RETRY_STATES:
                self.forget(w.key)
                self.read_all_next()
        return ends

    def end_for(self, w: Watched, answer: Registered | TryState) -> ParkedEnd | None:
        """How a watched try ends for the service's answer, or None while it waits."""
        state, error = answer.state, answer.error
        if state == "success":
            return self.end_of(w.key, w.try_number, "success", None, w.since)
        if state == "skipped":
            return self.end_of(
                w.key, w.try_number, "skipped", f"smartsensor: {error or 'skipped (soft_fail)'}", w.since
            )
        if is_timeout(answer):
            return self.end_of(w.key, w.try_number, "failed", f"smartsensor: {error or 'timed out'}", w.since)
        if state in ("failed", "upstream_failed", "removed"):
            return self.end_of(w.key, w.try_number, "error", f"smartsensor: {error or state}", w.since)
        return None

    @staticmethod
    def end_of(key: Key, try_number: int, state: str, note: str | None, since: datetime | None = None) -> ParkedEnd:
        return ParkedEnd(key[0], key[1], key[2], key[3], try_number, state, note, since)

    async def end(self, ends: list[ParkedEnd]) -> dict[str, int]:
        """Apply ``ends`` through Airflow's models (on a database thread) and stop watching them; how many of each
        state applied (the others were no longer parked, or no longer that try)."""
        if not ends:
            return {}
        applied = await self.in_db(self.apply, ends)
        for end in ends:
            self.forget(end.key)
        return applied

    def apply(self, ends: list[ParkedEnd]) -> dict[str, int]:
        """``end_parked`` a transaction per batch of ``Settings.batch``; how many of each state applied."""
        applied: dict[str, int] = {}
        for batch in in_batches(ends, self.settings.batch):
            with self.session_factory() as session:
                for end in end_parked(batch, self.settings.pool, session):
                    applied[end.state] = applied.get(end.state, 0) + 1
        return applied

    # -- the safety valve --------------------------------------------------------------------------------------
    def mind_valve(self) -> None:
        """Open the parking pool while the service has been out of reach for longer than the grace; close it
        (0 slots) once it answers again. Only a pool this attendant opened (``valve_slots`` slots) is closed."""
        out = (
            self.unreachable_since is not None and self.clock() - self.unreachable_since > self.settings.fallback_grace
        )
        if out and not self.valve_open:
            self.set_pool_slots(0, self.settings.valve_slots)
            self.valve_open = True
            log.warning("smartsensor attendant: the service is out of reach: parked tries run on workers")
        elif not out and self.valve_open and self.unreachable_since is None:
            self.set_pool_slots(self.settings.valve_slots, 0)
            self.valve_open = False
            log.warning("smartsensor attendant: the service answers again: tries park again")

    def set_pool_slots(self, expected: int, slots: int) -> None:
        """The parking pool's slots from ``expected`` to ``slots`` (a guarded update: a pool a user resized is left)."""
        Pool = pool_model()
        from sqlalchemy import update

        with self.session_factory() as session:
            session.execute(
                update(Pool).where(Pool.pool == self.settings.pool, Pool.slots == expected).values(slots=slots)
            )

    def ensure_pool(self) -> None:
        """Create the parking pool with 0 slots if it does not exist yet."""
        Pool = pool_model()
        from sqlalchemy import select

        with self.session_factory() as session:
            if session.scalar(select(Pool.pool).where(Pool.pool == self.settings.pool)) is None:
                session.add(
                    Pool(
                        pool=self.settings.pool,
                        slots=0,
                        description="smartsensor: parked sensor tries",
                        include_deferred=False,
                    )
                )

    # -- HTTP --------------------------------------------------------------------------------------------------
    def _connection_endpoint(self) -> Endpoint:
        try:
            conn = BaseHook.get_connection(self.settings.conn_id)
        except Exception as exc:  # noqa: BLE001 - a secrets backend out of reach: the service is, for us
            raise ApiError(f"connection {self.settings.conn_id!r}: {exc}", transient=True) from None
        return endpoint_from_connection(conn, self.settings.conn_id)

    async def health(self, endpoint: Endpoint) -> None:
        """Whether the service answers its health check; ApiError (transient) when it does not."""
        assert self.http is not None
        try:
            response = await self.http.get(f"{endpoint.base_url}{API}/health", headers=endpoint.headers())
        except httpx.HTTPError as exc:
            raise ApiError(f"/health: {exc}", transient=True) from None
        if response.status_code != 200:
            raise ApiError(f"/health: {error_message(response)}", response.status_code, transient=True)
        self.unreachable_since = None

    async def post(self, endpoint: Endpoint, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST to the service: its JSON answer, or ``{"status", "detail"}`` when it refuses the request for good
        (4xx); ApiError (transient) when it is out of reach (no answer, 502/503/504, a body that is not its JSON)
        or refuses this attendant (401, 403: a wrong token is a service this attendant cannot use, so the valve
        opens after the grace, as when it is down)."""
        assert self.http is not None
        try:
            response = await self.http.post(f"{endpoint.base_url}{API}{path}", json=body, headers=endpoint.headers())
        except httpx.HTTPError as exc:
            raise ApiError(f"{path}: {type(exc).__name__}: {exc}", transient=True) from None
        if response.status_code in (401, 403, 502, 503, 504):
            raise ApiError(f"{path}: {error_message(response)}", response.status_code, transient=True)
        self.unreachable_since = None  # it answered
        if response.status_code >= 500:
            raise ApiError(f"{path}: {error_message(response)}", response.status_code)
        if response.status_code >= 400:
            if response.status_code not in (404, 405):  # 404/405: a service before /tasks/batch
                log.warning("smartsensor attendant: %s refused: %s", path, error_message(response))
            return {"status": response.status_code, "detail": error_message(response)}
        try:
            answer = response.json()
        except ValueError:
            raise ApiError(f"{path}: the answer is not the service's JSON", transient=True) from None
        if not isinstance(answer, dict):
            raise ApiError(f"{path}: the answer is not the service's JSON", transient=True)
        return answer

    # -- running -----------------------------------------------------------------------------------------------
    async def serve(self, stop: asyncio.Event) -> None:
        """Cycle every ``interval`` seconds until ``stop`` is set; the groups' tasks are cancelled then."""
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=HOLD + 30.0))
        await self.in_db(self.ensure_pool)
        log.info("smartsensor attendant: watching pool %r every %g s", self.settings.pool, self.settings.interval)
        last_error = ""
        try:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    report = await self.cycle()
                    if report.registered or report.ended:
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


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
