"""``service.status_snapshot``: one status read shared by a server's requests for ``[api] status_max_age``."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from smartsensor.service.status_snapshot import StatusSnapshot


class Reads:
    """A stand-in for ``collect_status``: each call returns a new token of when it started, or fails when told."""

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.calls = 0
        self.fail = False

    def __call__(self) -> Any:
        self.calls += 1
        if self.fail:
            raise ConnectionError("database unreachable")
        return ("report", self.calls, self.clock[0])


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


class SnapshotMachine(RuleBasedStateMachine):
    """Any sequence of requests, failures and clock steps: a request gets either a fresh read or a snapshot whose
    read started less than max_age ago; a read happens exactly when there is no such snapshot."""

    MAX_AGE = 5.0

    def __init__(self) -> None:
        super().__init__()
        self.snapshot, self.reads, self.clock = snapshot_over(self.MAX_AGE)
        self.kept: Any = None  # the model: the last successful read, if any

    @rule(seconds=st.sampled_from([0.0, 0.5, 2.5, 4.99, 5.0, 7.0]))
    def time_passes(self, seconds: float) -> None:
        self.clock[0] += seconds

    @rule(fails=st.booleans())
    def request(self, fails: bool) -> None:
        self.reads.fail = fails
        fresh = self.kept is not None and self.clock[0] - self.kept[2] < self.MAX_AGE
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


TestSnapshotMachine = SnapshotMachine.TestCase
TestSnapshotMachine.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)
