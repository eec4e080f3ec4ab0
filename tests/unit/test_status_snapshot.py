"""``service.status_snapshot``: one status read shared by a server's requests for ``[api] status_max_age``."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from smartsensor.service.status_snapshot import StatusSnapshot
from tests.support.common import wait_until


class Reads:
    """A stand-in for ``collect_status``: each call returns a new token of when it started, or fails when told.
    With a ``gate``, a read holds until the gate opens (the test moves the clock meanwhile: a read that takes time)."""

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.calls = 0
        self.fail = False
        self.gate: threading.Event | None = None
        self.active = 0  # reads running now
        self.most_active = 0  # the most that ever ran at once

    def __call__(self) -> Any:
        self.calls += 1
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        try:
            token = ("report", self.calls, self.clock[0])
            if self.gate is not None:
                assert self.gate.wait(30), "the test never opened the gate"
            if self.fail:
                raise ConnectionError(f"database unreachable (read {token[1]})")
            return token
        finally:
            self.active -= 1


def snapshot_over(max_age: float) -> tuple[StatusSnapshot, Reads, list[float]]:
    clock = [0.0]
    reads = Reads(clock)
    return StatusSnapshot(reads, max_age, clock=lambda: clock[0]), reads, clock


def test_without_a_max_age_every_request_reads() -> None:
    snapshot, reads, _ = snapshot_over(0)
    assert snapshot.get() != snapshot.get()
    assert reads.calls == snapshot.computed == 2


def test_a_snapshot_is_reused_until_it_is_max_age_old() -> None:
    snapshot, reads, clock = snapshot_over(5)
    first = snapshot.get()
    clock[0] = 4.9
    assert snapshot.get() is first
    clock[0] = 5.0
    assert snapshot.get() != first and reads.calls == 2


def test_a_failed_read_is_not_kept_and_the_old_snapshot_is_not_served_after_it() -> None:
    snapshot, reads, clock = snapshot_over(5)
    snapshot.get()
    clock[0], reads.fail = 6.0, True
    for _ in range(2):  # each request tries again: nothing stale stands in for the answer
        with pytest.raises(ConnectionError):
            snapshot.get()
    reads.fail = False
    answer: Any = snapshot.get()
    assert answer == ("report", 4, 6.0)


def test_requests_during_a_read_wait_for_it_and_share_it() -> None:
    release, entered = threading.Event(), threading.Event()
    calls = []

    def slow_read() -> Any:
        calls.append(1)
        entered.set()
        assert release.wait(30)
        return object()

    snapshot = StatusSnapshot(slow_read, 60)
    results: list[Any] = []
    first = threading.Thread(target=lambda: results.append(snapshot.get()))
    first.start()
    assert entered.wait(30)
    others = [threading.Thread(target=lambda: results.append(snapshot.get())) for _ in range(5)]
    for t in others:
        t.start()
    release.set()
    for t in [first, *others]:
        t.join(30)
    assert len(calls) == 1 and len(results) == 6 and all(r is results[0] for r in results)


def concurrent_requests(snapshot: StatusSnapshot, reads: Reads, n: int, seconds: float = 0.0) -> list[Any]:
    """``n`` requests at once: the first reads (held at the gate), the others arrive while it reads; the read takes
    ``seconds``. Each request's report or error, in order."""
    reads.gate = threading.Event()
    outcomes: list[Any] = [None] * n

    def request(i: int) -> None:
        try:
            outcomes[i] = snapshot.get()
        except ConnectionError as exc:
            outcomes[i] = exc

    requests = [threading.Thread(target=request, args=(i,)) for i in range(n)]
    try:
        requests[0].start()
        wait_until(lambda: reads.active == 1, 30)
        for t in requests[1:]:
            t.start()
        wait_until(lambda: snapshot.waiting == n - 1, 30)
        reads.clock[0] += seconds
    finally:
        reads.gate.set()
        for t in requests:
            if t.is_alive():
                t.join(30)
    reads.gate = None
    return outcomes


def test_requests_that_wait_for_a_read_longer_than_max_age_share_it() -> None:
    """``status_max_age`` below a read's duration: the requests that arrived during the read get its report (no
    read could be fresher) instead of each finding it expired and reading again, one after another."""
    snapshot, reads, _ = snapshot_over(5)
    assert concurrent_requests(snapshot, reads, 4, seconds=10.0) == [("report", 1, 0.0)] * 4
    assert reads.calls == snapshot.computed == 1
    after: Any = snapshot.get()
    assert after == ("report", 2, 10.0)  # a request after it: that read started 10 s ago, so it reads


def test_the_requests_that_waited_for_a_failed_read_get_its_error_and_the_next_one_reads_again() -> None:
    snapshot, reads, _ = snapshot_over(5)
    reads.fail = True
    errors = concurrent_requests(snapshot, reads, 3)
    assert [str(e) for e in errors] == ["database unreachable (read 1)"] * 3 and reads.calls == 1
    reads.fail = False
    after: Any = snapshot.get()
    assert after == ("report", 2, 0.0)  # a failed read is not kept


class SnapshotMachine(RuleBasedStateMachine):
    """Any sequence of requests, failures, clock steps and reads that take time while other requests arrive: a
    request gets a snapshot whose read started less than max_age ago, or the outcome of the read under way when it
    arrived (however long that read takes), or a read of its own; a read starts exactly when there is neither; one
    read runs at a time."""

    MAX_AGE = 5.0

    def __init__(self) -> None:
        super().__init__()
        self.snapshot, self.reads, self.clock = snapshot_over(self.MAX_AGE)
        self.kept: Any = None  # the model: the last successful read, if any
        self.slow: list[tuple[threading.Thread, list[Any]]] = []  # requests in the read under way, and what they got

    def fresh(self) -> bool:
        return self.kept is not None and self.clock[0] - self.kept[2] < self.MAX_AGE

    def request_in_thread(self) -> None:
        outcome: list[Any] = []

        def request() -> None:
            try:
                outcome.append(self.snapshot.get())
            except ConnectionError as exc:
                outcome.append(exc)

        thread = threading.Thread(target=request)
        self.slow.append((thread, outcome))
        thread.start()

    @precondition(lambda self: not self.slow and not self.fresh())
    @rule(fails=st.booleans())
    def a_read_that_takes_time_starts(self, fails: bool) -> None:
        self.reads.fail, self.reads.gate = fails, threading.Event()
        self.request_in_thread()
        wait_until(lambda: self.reads.active == 1, 30)
        self.under_way = ("report", self.reads.calls, self.clock[0])  # what the read returns if it does not fail

    @precondition(lambda self: bool(self.slow))
    @rule()
    def a_request_arrives_during_the_read(self) -> None:
        self.request_in_thread()
        wait_until(lambda: self.snapshot.waiting == len(self.slow) - 1, 30)

    @precondition(lambda self: bool(self.slow))
    @rule(seconds=st.sampled_from([0.0, 2.5, 5.0, 12.0]))
    def the_read_ends(self, seconds: float) -> None:
        reads = self.reads.calls
        self.clock[0] += seconds
        assert self.reads.gate is not None
        self.reads.gate.set()
        for thread, _ in self.slow:
            thread.join(30)
        outcomes = [outcome for _, (outcome,) in self.slow]
        self.slow, self.reads.gate = [], None
        if self.reads.fail:
            assert all(isinstance(o, ConnectionError) and o is outcomes[0] for o in outcomes), outcomes
            self.kept = None
        else:
            assert outcomes == [self.under_way] * len(outcomes)
            self.kept = outcomes[0]
        assert self.reads.calls == reads  # the requests that waited read nothing themselves

    @rule(seconds=st.sampled_from([0.0, 0.5, 2.5, 4.99, 5.0, 7.0]))
    def time_passes(self, seconds: float) -> None:
        self.clock[0] += seconds

    @precondition(lambda self: not self.slow)
    @rule(fails=st.booleans())
    def request(self, fails: bool) -> None:
        self.reads.fail = fails
        fresh = self.fresh()
        before = self.reads.calls
        try:
            got: Any = self.snapshot.get()
        except ConnectionError:
            assert not fresh and fails and self.reads.calls == before + 1
            self.kept = None
            return
        if fresh:
            assert got is self.kept and self.reads.calls == before
        else:
            assert got == ("report", before + 1, self.clock[0])
            self.kept = got

    @invariant()
    def every_read_is_counted(self) -> None:
        assert self.snapshot.computed == self.reads.calls

    @invariant()
    def one_read_at_a_time(self) -> None:
        assert self.reads.most_active <= 1

    def teardown(self) -> None:
        if self.reads.gate is not None:  # a failed example: let its requests end
            self.reads.gate.set()
        for thread, _ in self.slow:
            thread.join(30)


TestSnapshotMachine = SnapshotMachine.TestCase
TestSnapshotMachine.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)
