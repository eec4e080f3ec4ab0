"""Run inside an Airflow venv (not by pytest), against a real Airflow database (the stack's, from its environment):
a stateful model of ``end_parked`` (hypothesis), driven through every interleaving of what changes a parked try.

The tries are the task instances of one run that the scheduler parked (tests/airflow/test_parking.py's DAG): each
example puts them back to ``scheduled`` in their pools, then steps, in any order: an attendant ends a batch (some
answers for another try number, some for a try no longer parked), the same batch ends again (a second attendant, a
restarted one), two attendants end overlapping batches at once (one holds its row locks until it commits), a user
marks a try or clears it, the scheduler schedules a cleared or retried try again (a new try number), the safety
valve lets the scheduler queue a parked try. After each step the database says what the model says: each try's
state, try number and pool; ``end_parked`` applied exactly the ends whose try was, when it ran, still that try,
``scheduled`` and in the parking pool; nothing else changed. Reads the run from stdin as JSON (pool, dag_id,
run_id, tasks); prints one JSON line: examples and steps run."""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from airflow import settings
from hypothesis import HealthCheck, settings as hypothesis_settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from sqlalchemy import text
from sqlalchemy.orm import sessionmaker

from smartsensor_airflow._compat import load_note_models
from smartsensor_airflow.parking import ENDS, ParkedEnd, end_parked, state_of

RUN = json.loads(sys.stdin.read())
POOL: str = RUN["pool"]
TASKS: dict[str, str] = RUN["tasks"]  # task_id → the pool the DAG gives it
Maker = sessionmaker(bind=settings.engine)
WHERE = "dag_id = :d AND run_id = :r AND task_id = :t"
COUNTS = {"examples": 0, "steps": 0, "applied": 0, "concurrent": 0}
load_note_models()


def sql(statement: str, **params: Any) -> list[Any]:
    with settings.engine.begin() as conn:
        result = conn.execute(text(statement), {"d": RUN["dag_id"], "r": RUN["run_id"], **params})
        return list(result.fetchall()) if result.returns_rows else []


class Parking(RuleBasedStateMachine):
    """The tries of one run, as the model has them: task_id → (state, try number, pool)."""

    def __init__(self) -> None:
        super().__init__()
        COUNTS["examples"] += 1
        for n, (task_id, pool) in enumerate(sorted(TASKS.items())):
            sql(
                f"UPDATE task_instance SET state = 'scheduled', try_number = 1, max_tries = :m, pool = :p, "
                f"start_date = NULL, end_date = NULL, duration = NULL WHERE {WHERE}",
                t=task_id,
                p=pool,
                m=n % 2,  # half of them may be retried once: an error ends those up_for_retry, then failed
            )
        self.model: dict[str, tuple[str | None, int, str]] = {t: ("scheduled", 1, p) for t, p in TASKS.items()}
        self.max_tries = {t: int(sql(f"SELECT max_tries FROM task_instance WHERE {WHERE}", t=t)[0][0]) for t in TASKS}
        self.last: list[ParkedEnd] = []

    def ends_of(self, answers: list[tuple[str, int, str]]) -> list[ParkedEnd]:
        return [
            ParkedEnd(RUN["dag_id"], RUN["run_id"], task_id, -1, max(1, self.model[task_id][1] + offset), state, note)
            for task_id, offset, state in answers
            for note in [f"model: {state}" if state != "success" else None]
        ]

    def expected(self, ends: list[ParkedEnd]) -> list[str]:
        """The tasks whose end applies now: the try is still that try, parked, in the parking pool."""
        return sorted(e.task_id for e in ends if self.model[e.task_id] == ("scheduled", e.try_number, POOL))

    def apply(self, ends: list[ParkedEnd], applied: list[ParkedEnd]) -> None:
        for end in applied:
            _, try_number, pool = self.model[end.task_id]
            self.model[end.task_id] = (state_of(end.state, try_number, self.max_tries[end.task_id]), try_number, pool)
        COUNTS["applied"] += len(applied)

    answers = st.lists(
        st.tuples(st.sampled_from(sorted(TASKS)), st.sampled_from([-1, 0, 0, 0, 1]), st.sampled_from(sorted(ENDS))),
        min_size=1,
        max_size=len(TASKS),
        unique_by=lambda a: a[0],
    )

    @rule(answers=answers)
    def an_attendant_ends(self, answers: list[tuple[str, int, str]]) -> None:
        ends = self.ends_of(answers)
        want = self.expected(ends)
        with Maker.begin() as session:
            applied = end_parked(ends, POOL, session)
        assert sorted(e.task_id for e in applied) == want, (ends, want, applied)
        self.apply(ends, applied)
        self.last = ends

    @precondition(lambda self: bool(self.last))
    @rule()
    def the_same_batch_ends_again(self) -> None:
        want = self.expected(self.last)
        with Maker.begin() as session:
            applied = end_parked(self.last, POOL, session)
        assert sorted(e.task_id for e in applied) == want, (self.last, want, applied)
        self.apply(self.last, applied)

    @rule(first=answers, second=answers)
    def two_attendants_end_at_once(self, first: list[tuple[str, int, str]], second: list[tuple[str, int, str]]) -> None:
        """The first holds its row locks while the second asks for the same rows; the second reads them once the
        first commits."""
        COUNTS["concurrent"] += 1
        ends_a, ends_b = self.ends_of(first), self.ends_of(second)
        want_a = self.expected(ends_a)
        got_b: list[ParkedEnd] = []
        session_a = Maker()
        try:
            applied_a = end_parked(ends_a, POOL, session_a)

            def other() -> None:
                with Maker.begin() as session_b:
                    got_b.extend(end_parked(ends_b, POOL, session_b))

            thread = threading.Thread(target=other)
            thread.start()
            time.sleep(0.05)  # the other attendant reaches the locked rows (or ends what the first does not hold)
            session_a.commit()
        finally:
            session_a.close()
        thread.join(timeout=60)
        assert not thread.is_alive(), "the second attendant never got the rows"
        assert sorted(e.task_id for e in applied_a) == want_a, (ends_a, want_a, applied_a)
        self.apply(ends_a, applied_a)
        want_b = self.expected(ends_b)  # after the first's ends: what is still parked
        assert sorted(e.task_id for e in got_b) == want_b, (ends_b, want_b, got_b)
        self.apply(ends_b, got_b)

    @rule(task_id=st.sampled_from(sorted(TASKS)), state=st.sampled_from(["success", "failed", "skipped"]))
    def a_user_marks(self, task_id: str, state: str) -> None:
        sql(f"UPDATE task_instance SET state = :s WHERE {WHERE}", t=task_id, s=state)
        _, try_number, pool = self.model[task_id]
        self.model[task_id] = (state, try_number, pool)

    @rule(task_id=st.sampled_from(sorted(TASKS)))
    def a_user_clears(self, task_id: str) -> None:
        sql(f"UPDATE task_instance SET state = NULL WHERE {WHERE}", t=task_id)
        _, try_number, pool = self.model[task_id]
        self.model[task_id] = (None, try_number, pool)

    @rule(task_id=st.sampled_from(sorted(TASKS)))
    def the_scheduler_schedules_a_new_try(self, task_id: str) -> None:
        state, try_number, pool = self.model[task_id]
        if state not in (None, "up_for_retry"):
            return  # it schedules only a cleared or retried task
        sql(f"UPDATE task_instance SET state = 'scheduled', try_number = :n WHERE {WHERE}", t=task_id, n=try_number + 1)
        self.model[task_id] = ("scheduled", try_number + 1, pool)

    @rule(task_id=st.sampled_from(sorted(TASKS)))
    def the_valve_lets_the_scheduler_queue_it(self, task_id: str) -> None:
        state, try_number, pool = self.model[task_id]
        if (state, pool) != ("scheduled", POOL):
            return
        sql(f"UPDATE task_instance SET state = 'queued' WHERE {WHERE}", t=task_id)
        self.model[task_id] = ("queued", try_number, pool)

    @invariant()
    def the_database_says_what_the_model_says(self) -> None:
        COUNTS["steps"] += 1
        rows = sql("SELECT task_id, state, try_number, pool FROM task_instance WHERE dag_id = :d AND run_id = :r")
        seen = {t: (s, int(n), p) for t, s, n, p in rows if t in TASKS}
        assert seen == self.model, (seen, self.model)


Parking.TestCase.settings = hypothesis_settings(
    max_examples=int(RUN.get("examples", 40)),
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
started = time.monotonic()
Parking.TestCase().runTest()
print(json.dumps({**COUNTS, "seconds": round(time.monotonic() - started, 1)}))
