"""Parked tries: a smart sensor's try that waits in Airflow with no worker and no trigger, in a pool with 0 slots,
until smartsensor's answer ends it (issue 55, in progress).

Airflow's scheduler makes a task of a pool without open slots ``scheduled`` once its upstream tasks are done and
never queues it (it leaves such pools out when it picks what to queue); the run's deadlock check counts it as
runnable (a pool is not one of the task's own dependencies), so a run with only parked tries waits, it does not
fail. Whatever ends a parked try runs in Airflow's own processes, through Airflow's models: smartsensor's own
processes never write Airflow's database.

``end_parked`` ends a batch of parked tries in one transaction: each try is ended only if it is still that try
(its try number), still ``scheduled`` and still in the parking pool, read under a row lock, so a try that a user
marked, cleared or that the scheduler queued meanwhile (the pool opened: the safety valve) is left as it is, and a
try is never ended twice. Airflow's public REST API ends one try per request, deserializing the DAG for each
(``scripts/bench/parking.py``: 12-28 tries a second on 3.3.2, 4-5 on 2.10.5, where the goal needs hundreds).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Sequence

from smartsensor_airflow._compat import sdk_serialize, task_instance_model

# What a parked try can end as. "error": the try failed in a way Airflow retries (its check could not be rendered
# or read, or its check errored): up_for_retry while the task has tries left (max_tries), else failed.
ENDS = frozenset({"success", "failed", "skipped", "error"})
Key = tuple[str, str, str, int]  # a task instance's: dag_id, run_id, task_id, map_index


@dataclass(frozen=True)
class ParkedEnd:
    """How one parked try ends: its key, its new state (``ENDS``), why (for the try's own log: ``try_log``; a task
    instance's note is its users', never written here), and since when it waited (its start date; None: the moment
    it ends, as Airflow's own state change does)."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    try_number: int
    state: str
    note: str | None = None
    since: datetime | None = None

    def __post_init__(self) -> None:
        if self.state not in ENDS:
            raise ValueError(f"a parked try ends as one of {sorted(ENDS)}, not {self.state!r}")

    @property
    def key(self) -> Key:
        """The task instance's primary key as Airflow 2.10 and 3.x both index it."""
        return (self.dag_id, self.run_id, self.task_id, self.map_index)


def this_try(ti: Any, state: str, pool: Any) -> list[Any]:
    """The guard of one try's update in a batch (``session.execute(update…, rows)``): its key and try number, bound
    per row (``try_row``), still ``state`` and in ``pool`` (a pool's name, or a bound parameter)."""
    from sqlalchemy import bindparam

    return [
        ti.dag_id == bindparam("b_dag_id"),
        ti.run_id == bindparam("b_run_id"),
        ti.task_id == bindparam("b_task_id"),
        ti.map_index == bindparam("b_map_index"),
        ti.try_number == bindparam("b_try_number"),
        ti.state == state,
        ti.pool == pool,
    ]


def try_row(key: Key, try_number: int, **values: Any) -> dict[str, Any]:
    """One row of a batch guarded by ``this_try``: the try's key and number, and ``values`` (``b_``-named)."""
    dag_id, run_id, task_id, map_index = key
    return {
        "b_dag_id": dag_id,
        "b_run_id": run_id,
        "b_task_id": task_id,
        "b_map_index": map_index,
        "b_try_number": try_number,
        **{f"b_{name}": value for name, value in values.items()},
    }


def end_parked(ends: Sequence[ParkedEnd], pool: str, session: Any) -> list[ParkedEnd]:
    """End every try of ``ends`` that is, read under a row lock, still that try, ``scheduled`` and in ``pool``: its
    state, start and end dates and duration set as Airflow's own state change sets them (the start: when it began
    to wait, ``since``). Two statements whatever the batch's size (the lock, one guarded update per try sent as
    one batch); flushes, does not commit (the caller's transaction:
    ``airflow.utils.session.create_session``). The ends applied; the others were no longer this try's to end."""
    from sqlalchemy import bindparam, select, tuple_, update

    TaskInstance = task_instance_model()

    if not ends:
        return []
    wanted = {end.key: end for end in ends}
    if len(wanted) != len(ends):
        raise ValueError("a batch of parked ends names one task instance twice")
    ti = TaskInstance.__table__.c
    key = (ti.dag_id, ti.run_id, ti.task_id, ti.map_index)
    locked = session.execute(
        select(*key, ti.try_number, ti.max_tries, ti.start_date)
        .where(tuple_(*key).in_(list(wanted)), ti.state == "scheduled", ti.pool == pool)
        .with_for_update()
    ).all()
    now = datetime.now(timezone.utc)
    applied: list[ParkedEnd] = []
    rows: list[dict[str, Any]] = []
    for dag_id, run_id, task_id, map_index, try_number, max_tries, start_date in locked:
        end = wanted[(dag_id, run_id, task_id, map_index)]
        if try_number != end.try_number:
            continue  # another try of the task (cleared and scheduled again): not this answer's
        started = start_date or (min(end.since, now) if end.since is not None else now)
        rows.append(
            try_row(
                end.key,
                try_number,
                state=state_of(end.state, try_number, max_tries),
                start_date=started,
                duration=max(0.0, (now - started).total_seconds()),
            )
        )
        applied.append(end)
    if rows:
        guarded = (
            update(TaskInstance.__table__)
            .where(*this_try(ti, "scheduled", pool))
            .values(
                state=bindparam("b_state"),
                start_date=bindparam("b_start_date"),
                end_date=now,
                duration=bindparam("b_duration"),
            )
        )
        session.execute(guarded, rows)
    session.flush()
    return applied


RESUME_METHOD = "execute_complete"  # what a resumed try runs on a worker: a smartsensor task's, as after its trigger


@dataclass(frozen=True)
class HandBack:
    """A parked try handed back to Airflow: moved to ``pool`` (its task's own), where the scheduler queues it and a
    worker runs it as it runs any try, and why. With an ``event`` the worker **resumes** it as Airflow resumes a
    deferred try whose trigger fired (``next_method`` ``execute_complete``, ``next_kwargs`` ``{"event": …}``: the
    same event the provider's trigger sends), so Airflow's own code ends it: callbacks, email, listeners, outlets,
    retries, history, log. Without one the worker runs its ``execute`` from the start (a check the attendant could
    not serve)."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    try_number: int
    pool: str
    why: str
    event: dict[str, Any] | None = None

    @property
    def key(self) -> Key:
        return (self.dag_id, self.run_id, self.task_id, self.map_index)


def hand_back(backs: Sequence[HandBack], park: str, session: Any) -> list[HandBack]:
    """Move each try of ``backs`` that is still that try, ``scheduled`` and in the parking pool ``park`` to its own
    pool: one guarded update per try, sent as one batch; flushes, does not commit. The tries moved (a try a user
    changed, cleared or that another attendant ended or moved meanwhile is left as it is)."""
    from sqlalchemy import bindparam, select, tuple_, update

    TaskInstance = task_instance_model()
    if not backs:
        return []
    ti = TaskInstance.__table__.c
    key = (ti.dag_id, ti.run_id, ti.task_id, ti.map_index)
    wanted = {(*b.key, b.try_number): b for b in backs}
    found = session.execute(
        select(*key, ti.try_number)
        .where(tuple_(*key).in_([b.key for b in backs]), ti.state == "scheduled", ti.pool == park)
        .with_for_update()
    ).all()
    moved = [wanted[tuple(row)] for row in found if tuple(row) in wanted]
    kwargs_type = ti.next_kwargs.type
    resumed = [
        try_row(b.key, b.try_number, pool=b.pool, kwargs=encode_next_kwargs({"event": b.event}, kwargs_type))
        for b in moved
        if b.event is not None
    ]
    if resumed:  # as Airflow's handle_event_submit resumes a deferred try: next_method and the event
        session.execute(
            update(TaskInstance.__table__)
            .where(*this_try(ti, "scheduled", park))
            .values(
                pool=bindparam("b_pool"),
                next_method=RESUME_METHOD,
                next_kwargs=bindparam("b_kwargs", type_=kwargs_type),
            ),
            resumed,
        )
    fresh = [try_row(b.key, b.try_number, pool=b.pool) for b in moved if b.event is None]
    if fresh:  # its execute from the start
        session.execute(
            update(TaskInstance.__table__).where(*this_try(ti, "scheduled", park)).values(pool=bindparam("b_pool")),
            fresh,
        )
    session.flush()
    return moved


def encode_next_kwargs(kwargs: dict[str, Any], column_type: Any) -> Any:
    """``next_kwargs`` as the running Airflow stores a trigger event's (its ``handle_event_submit``): 2.10 and 3.1 keep
    them in an ``ExtendedJSON`` column, which encodes on write; 3.3 keeps plain JSON, encoded with the Task SDK's
    serde."""
    if type(column_type).__name__ == "ExtendedJSON":
        return kwargs
    return sdk_serialize(kwargs)


def mark_waiting(tries: Sequence[tuple[Key, int]], park: str, now: datetime, session: Any) -> None:
    """Record when each parked try (key, try number) began to wait, as its start date, where Airflow recorded none
    (2.10 has no ``scheduled_dttm``): an attendant that restarts, or another one, counts the try's
    ``execution_timeout`` from there. One guarded update, sent as one batch; flushes, does not commit."""
    from sqlalchemy import update

    if not tries:
        return
    TaskInstance = task_instance_model()
    ti = TaskInstance.__table__.c
    session.execute(
        update(TaskInstance.__table__)
        .where(*this_try(ti, "scheduled", park), ti.start_date.is_(None))
        .values(start_date=now),
        [try_row(key, n) for key, n in tries],
    )
    session.flush()


def state_of(end: str, try_number: int, max_tries: int | None) -> str:
    """The state a try ends in: an ``error`` is retried while the task has tries left, as Airflow retries a try
    that raised (``max_tries`` counts the retries: tries 1 … max_tries + 1)."""
    if end != "error":
        return end
    return "up_for_retry" if try_number <= (max_tries or 0) else "failed"


def in_batches(ends: Iterable[ParkedEnd], size: int) -> Iterable[list[ParkedEnd]]:
    """``ends`` in lists of at most ``size``, each key once per list (a later end of the same key starts the next)."""
    batch: list[ParkedEnd] = []
    keys: set[Key] = set()
    for end in ends:
        if len(batch) >= size or end.key in keys:
            yield batch
            batch, keys = [], set()
        batch.append(end)
        keys.add(end.key)
    if batch:
        yield batch
