"""The request counts /metrics shows: labels from bounded sets whatever a client sends, and counts that stay exact
while several threads count and another reads them."""

from __future__ import annotations

import threading
import time

from smartsensor.api.request_counts import OTHER, RequestCounts


def test_a_method_or_status_outside_the_known_ones_is_other() -> None:
    counts = RequestCounts()
    for method in ("GET", "POST", "OPTIONS", "get", "BREW", "M" * 10_000, ""):
        counts.count(method, "/api/v1/status", 200)
    for status in (200, 404, 599, 999, 0):
        counts.count("GET", None, status)
    assert counts.snapshot() == {
        ("GET", "/api/v1/status", "200"): 1,
        ("POST", "/api/v1/status", "200"): 1,
        ("OPTIONS", "/api/v1/status", "200"): 1,
        (OTHER, "/api/v1/status", "200"): 4,
        ("GET", OTHER, "200"): 1,
        ("GET", OTHER, "404"): 1,
        ("GET", OTHER, OTHER): 3,
    }


def test_counting_threads_and_a_reading_thread_lose_nothing_and_fail_nothing() -> None:
    counts = RequestCounts()
    writers, each = 4, 20_000
    reads: list[int] = []
    failures: list[RuntimeError] = []

    def write(n: int) -> None:
        for i in range(each):
            counts.count(("GET", "POST", "PUT", "BREW")[i % 4], f"/r{n}", (200, 404)[i % 2])

    def read() -> None:
        try:
            while True:
                done = written.is_set()  # read before the snapshot: the last snapshot follows every write
                reads.append(sum(counts.snapshot().values()))
                if done:
                    return
        except RuntimeError as exc:  # "dictionary changed size during iteration", had a read no lock
            failures.append(exc)

    written = threading.Event()
    writing = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    reader = threading.Thread(target=read)
    reader.start()
    for thread in writing:
        thread.start()
    deadline = time.monotonic() + 120
    for thread in writing:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    written.set()
    reader.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not any(thread.is_alive() for thread in [*writing, reader]), "threads still running after 120 s"
    assert failures == []
    assert reads == sorted(reads) and reads[-1] == writers * each  # each read a consistent total
    kinds = (("GET", "200"), ("POST", "404"), ("PUT", "200"), (OTHER, "404"))
    assert counts.snapshot() == {(m, f"/r{n}", code): each // 4 for n in range(writers) for m, code in kinds}
