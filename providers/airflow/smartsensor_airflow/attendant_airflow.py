"""What the parking attendant (``attendant.py``) reads and writes in Airflow's database, through Airflow's models: the
parked tries, the checks their serialized DAGs carry, their runs' rows; the ends and hand-backs it applies
(``parking.py``); the parking pool and its safety valve, whose state Airflow keeps (the pool's slots)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, NamedTuple

from smartsensor_airflow._compat import (
    airflow_conf,
    airflow_version,
    dag_run_model,
    pool_model,
    serialized_dag_rows,
    task_instance_model,
)
from smartsensor_airflow.parked_checks import rendered_check, serialized_tasks, start_kwargs
from smartsensor_airflow.parking import (
    HandBack,
    Key,
    ParkedEnd,
    end_parked,
    hand_back,
    in_batches,
    mark_waiting,
    this_try,
    try_row,
)
from smartsensor_airflow.parking_health import DESCRIPTION
from smartsensor_airflow.start import DEFAULT_PARK_POOL, DEFAULT_POOL
from smartsensor_airflow.trigger_context import row_context
from smartsensor_airflow.try_log import TryJournal
from smartsensor_airflow.wire import Registration as TryRegistration, TryKey

log = logging.getLogger("smartsensor_airflow.attendant")

SPECS_TTL = 30.0  # seconds a 2.10 DAG's serialized checks are kept (2.10 keeps one version a DAG: it may change)


class Parked(NamedTuple):
    """A parked try as read: its try number, its serialized DAG's version, and since when it waits (3.x: when the
    scheduler scheduled it; 2.10: the start date an attendant recorded, None until one did)."""

    try_number: int
    version: Any
    since: datetime | None


class Registration(NamedTuple):
    """A new parked try to register: its registration body; its execution_timeout (seconds) and soft_fail, which the
    attendant keeps itself (the service knows the sensor's ``timeout`` only); since when it waits; and from its task:
    its connection, its own pool and what Airflow runs after its end (``start.parked_check``)."""

    key: Key
    try_number: int
    body: TryRegistration
    execution_timeout: float | None
    soft_fail: bool
    since: datetime | None
    conn_id: str
    pool: str
    after_end: dict[str, list[str]]


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


def back_of(key: Key, try_number: int, pool: str, why: str, event: dict[str, Any] | None = None) -> HandBack:
    """The hand-back of one parked try to ``pool``, resumed with ``event`` when given (``parking.HandBack``)."""
    return HandBack(key[0], key[1], key[2], key[3], try_number, pool, why, event)


class AirflowSide:
    """The attendant's reads and writes of Airflow's database (a part of ``Attendant``): ``settings``,
    ``session_factory`` and ``clock`` are the attendant's; ``specs`` caches the serialized checks, ``valve_open``
    and ``unreachable_since`` are the valve's inputs."""

    settings: Settings
    session_factory: Callable[[], Any]
    clock: Callable[[], float]
    specs: dict[Any, dict[str, tuple[dict[str, Any] | None, str]]]
    specs_read: dict[Any, float]
    unreachable_since: dict[str, float]
    valve_open: bool
    journal: TryJournal

    def parked_tries(self, changed_since: datetime | None = None) -> tuple[dict[Key, Parked], datetime | None]:
        """key → ``Parked`` of every try parked in the pool, or of those changed since ``changed_since`` (Airflow's
        ``updated_at``, which its models set on every change); and the newest ``updated_at`` read (None when none
        was)."""
        TaskInstance = task_instance_model()
        from sqlalchemy import select

        version = getattr(TaskInstance, "dag_version_id", None)  # Airflow 3: the try's DAG version
        waits = getattr(TaskInstance, "scheduled_dttm", None)  # Airflow 3: when the scheduler scheduled it
        columns = [
            TaskInstance.dag_id,
            TaskInstance.run_id,
            TaskInstance.task_id,
            TaskInstance.map_index,
            TaskInstance.try_number,
            TaskInstance.updated_at,
            waits if waits is not None else TaskInstance.start_date,
            version if version is not None else TaskInstance.dag_id,
        ]
        where = [TaskInstance.state == "scheduled", TaskInstance.pool == self.settings.pool]
        if changed_since is not None:
            where.append(TaskInstance.updated_at >= changed_since)
        with self.session_factory() as session:
            rows = session.execute(select(*columns).where(*where)).all()
        newest = max((r[5] for r in rows if r[5] is not None), default=None)
        return {(r[0], r[1], r[2], r[3]): Parked(r[4], r[7], r[6]) for r in rows}, newest

    def registrations(self, new: dict[Key, Parked]) -> tuple[list[Registration], list[HandBack]]:
        """The registration of each new parked try, and the hand-backs of those the attendant cannot serve: a check
        it cannot render or read (a worker renders it in Airflow's own context, as the triggerer path resumes such
        a try there), a task that no longer parks (parking switched off: its serialized DAG carries no check)."""
        kwargs_of = self.start_kwargs_of(new)
        runs = self.run_rows({(k[0], k[1]) for k in new})
        bodies: list[Registration] = []
        backs: list[HandBack] = []
        for key, parked in new.items():
            kwargs, pool = kwargs_of.get((parked.version, key[2]), (None, DEFAULT_POOL))
            run = runs.get((key[0], key[1]))
            if run is None:
                log.warning("smartsensor attendant: %s try %s parked with its run gone; left", key, parked.try_number)
                continue
            if kwargs is None:
                backs.append(back_of(key, parked.try_number, pool, "its task no longer parks"))
                continue
            try:
                context = row_context(key[1], *run, kwargs.get("params"))
                registered_as, persist = rendered_check(kwargs, context)
            except Exception as exc:  # noqa: BLE001 - a worker renders it as Airflow does, and raises what it raises
                backs.append(back_of(key, parked.try_number, pool, f"{type(exc).__name__}: {exc}"))
                continue
            conn_id = str(kwargs.get("conn_id") or self.settings.conn_id)
            dag_id, run_id, task_id, map_index = key
            body = TryRegistration(
                TryKey(dag_id, task_id, run_id, map_index, parked.try_number),
                registered_as,
                persist,
                dict(kwargs.get("exec_values") or {}),
                context.get("logical_date"),
            )
            limit = kwargs.get("execution_timeout")
            soft_fail = bool((kwargs.get("exec_values") or {}).get("soft_fail"))
            after = {str(k): list(v) for k, v in dict(kwargs.get("after_end") or {}).items()}
            bodies.append(
                Registration(
                    key,
                    parked.try_number,
                    body,
                    None if limit is None else float(limit),
                    soft_fail,
                    parked.since,
                    conn_id,
                    pool,
                    after,
                )
            )
        return bodies, backs

    def record_waiting(self, tries: list[tuple[Key, int]]) -> None:
        with self.session_factory() as session:
            mark_waiting(tries, self.settings.pool, datetime.now(timezone.utc), session)

    def start_kwargs_of(self, new: dict[Key, Parked]) -> dict[tuple[Any, str], tuple[dict[str, Any] | None, str]]:
        """(DAG version, task_id) → the start kwargs the serialized DAG carries for each new try's task (None when
        none), and the task's own pool: where a try it hands back runs (``own_pool_of``)."""
        now = self.clock()
        missing = {
            p.version
            for p in new.values()
            if p.version not in self.specs
            or (isinstance(p.version, str) and now - self.specs_read[p.version] > SPECS_TTL)
        }
        if missing:
            with self.session_factory() as session:
                for version, data in serialized_dag_rows(session, missing):
                    self.specs[version] = {
                        t: ((kw := start_kwargs(e)), self.own_pool_of(e, kw)) for t, e in serialized_tasks(data).items()
                    }
                    self.specs_read[version] = now
        return {
            (p.version, k[2]): self.specs.get(p.version, {}).get(k[2], (None, DEFAULT_POOL)) for k, p in new.items()
        }

    def own_pool_of(self, task_entry: dict[str, Any], kwargs: dict[str, Any] | None) -> str:
        """A serialized task's own pool: the one its parked check carries (``start.own_pool``), else the pool the
        task names unless it is the parking pool (a task that no longer parks; Airflow's default pool then)."""
        if kwargs is not None:
            return str(kwargs.get("pool") or DEFAULT_POOL)
        pool = task_entry.get("pool")
        return str(pool) if pool and pool != self.settings.pool else DEFAULT_POOL

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

    def apply(self, ends: list[ParkedEnd | HandBack]) -> tuple[dict[str, int], int]:
        """End and hand back ``ends`` (``end_in_airflow``, ``hand_back_in_airflow``) a transaction per batch of
        ``Settings.batch``; each try's log says how it ended once its transaction committed."""
        applied: dict[str, int] = {}
        handed = 0
        for batch in in_batches([e for e in ends if isinstance(e, ParkedEnd)], self.settings.batch):
            for end in self.end_in_airflow(batch):
                applied[end.state] = applied.get(end.state, 0) + 1
                why = end.note or ("what it waits for is there" if end.state == "success" else "")
                self.journal.note(end.key, end.try_number, f"ended {end.state} by the attendant, no worker: {why}")
        backs = [e for e in ends if isinstance(e, HandBack)]
        for start in range(0, len(backs), self.settings.batch):
            for back in self.hand_back_in_airflow(backs[start : start + self.settings.batch]):
                handed += 1
                how = (
                    "resumed on a worker with the answer"
                    if back.event is not None
                    else "run on a worker from the start"
                )
                log.info("smartsensor attendant: %s try %s %s (%s)", back.key, back.try_number, how, back.why)
                self.journal.note(back.key, back.try_number, f"handed back to pool {back.pool!r}, {how}: {back.why}")
        self.journal.flush()
        return applied, handed

    def end_in_airflow(self, batch: list[ParkedEnd]) -> list[ParkedEnd]:
        """``end_parked`` one batch in a transaction of its own: the ends applied."""
        with self.session_factory() as session:
            return end_parked(batch, self.settings.pool, session)

    def hand_back_in_airflow(self, batch: list[HandBack]) -> list[HandBack]:
        """``hand_back`` one batch in a transaction of its own: the tries moved."""
        with self.session_factory() as session:
            return hand_back(batch, self.settings.pool, session)

    def set_pool_slots(self, expected: int, slots: int) -> None:
        """The parking pool's slots from ``expected`` to ``slots`` (a guarded update: a pool a user resized is left)."""
        Pool = pool_model()
        from sqlalchemy import update

        with self.session_factory() as session:
            session.execute(
                update(Pool).where(Pool.pool == self.settings.pool, Pool.slots == expected).values(slots=slots)
            )

    def ensure_pool(self) -> int:
        """Create the parking pool with 0 slots if it does not exist yet; its slots."""
        Pool = pool_model()
        from sqlalchemy import select

        with self.session_factory() as session:
            slots = session.scalar(select(Pool.slots).where(Pool.pool == self.settings.pool))
            if slots is None:
                session.add(
                    Pool(
                        pool=self.settings.pool,
                        slots=0,
                        description=DESCRIPTION,
                        include_deferred=False,
                    )
                )
                return 0
            return int(slots)

    def repark_retries(self) -> int:
        """Park again the retries of parked tries that ended on a worker: a try ``up_for_retry`` outside the parking
        pool, in its task's own pool, whose task parks, goes back to the parking pool before the scheduler schedules
        it (every cycle; a guarded update: still ``up_for_retry``, still that try and pool; one the scheduler already
        moved on, a ``retry_delay`` shorter than a cycle or two, is left, and runs today's way). How many."""
        TaskInstance = task_instance_model()
        from sqlalchemy import bindparam, select, update

        ti = TaskInstance.__table__.c
        version = ti.dag_version_id if "dag_version_id" in ti else ti.dag_id
        with self.session_factory() as session:
            rows = session.execute(
                select(ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number, ti.pool, version).where(
                    ti.state == "up_for_retry", ti.pool != self.settings.pool
                )
            ).all()
        if not rows:
            return 0
        retries = {(r[0], r[1], r[2], r[3]): Parked(r[4], r[6], None) for r in rows}
        kwargs_of = self.start_kwargs_of(retries)
        wanted = []
        for r in rows:
            kwargs, pool = kwargs_of.get((r[6], r[2]), (None, DEFAULT_POOL))
            if kwargs is not None and pool == r[5]:
                wanted.append(try_row((r[0], r[1], r[2], r[3]), r[4], pool=r[5]))
        if not wanted:
            return 0
        with self.session_factory() as session:
            result = session.execute(
                update(TaskInstance.__table__)
                .where(*this_try(ti, "up_for_retry", bindparam("b_pool")))
                .values(pool=self.settings.pool),
                wanted,
            )
            moved = int(result.rowcount or 0)
        if moved:
            log.info("smartsensor attendant: %d retries of parked tries park again", moved)
        return moved

    def release_backs(self) -> list[ParkedEnd | HandBack]:
        """The hand-back of every parked try, each to its task's own pool (parking switched off)."""
        parked, _ = self.parked_tries()
        kwargs_of = self.start_kwargs_of(parked)
        backs: list[ParkedEnd | HandBack] = []
        for key, p in parked.items():
            _, pool = kwargs_of.get((p.version, key[2]), (None, DEFAULT_POOL))
            backs.append(back_of(key, p.try_number, pool, "released: parking switched off"))
        return backs

    # -- the safety valve --------------------------------------------------------------------------------------
    def mind_valve(self) -> None:
        """Open the parking pool while a service of the watched tries has been out of reach for longer than the
        grace; close it (0 slots) once every one answers again. Only a pool opened to ``valve_slots`` slots is closed
        (``open_valve_found``: one an attendant opened before it stopped)."""
        now = self.clock()
        out = any(now - since > self.settings.fallback_grace for since in self.unreachable_since.values())
        if out and not self.valve_open:
            self.set_pool_slots(0, self.settings.valve_slots)
            self.valve_open = True
            log.warning("smartsensor attendant: the service is out of reach: parked tries run on workers")
        elif not out and self.valve_open and not self.unreachable_since:
            self.set_pool_slots(self.settings.valve_slots, 0)
            self.valve_open = False
            log.warning("smartsensor attendant: the service answers again: tries park again")

    def open_valve_found(self, slots: int) -> None:
        """The valve's state as Airflow keeps it, read at start: a pool with ``valve_slots`` slots was opened by an
        attendant that stopped (a restart while a service was out of reach). It stays open until the service of
        ``park_conn_id`` answers; then ``mind_valve`` closes it."""
        if slots == self.settings.valve_slots and slots > 0:
            self.valve_open = True
            self.unreachable_since[self.settings.conn_id] = self.clock() - self.settings.fallback_grace - 1
            log.warning(
                "smartsensor attendant: the parking pool is open (%d slots): closed once the service answers", slots
            )
