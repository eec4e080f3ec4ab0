"""The indexed matching of checks against a partition listing equals the obvious scan, and stays fast."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from sensors.batch import answer_checks
from sensors.checks import PartitionCheck
from sensors.errors import PermanentCheckError

VALUES = st.sampled_from(["a", "b", "c", "a/b", "%", "é"])
PARTITION = st.fixed_dictionaries({"ds": VALUES, "hr": VALUES})


def scan(listing: list[dict[str, str]], check: PartitionCheck) -> bool | type:
    spec = dict(check.spec)
    if check.exact and listing and set(spec) != set(listing[0]):
        return PermanentCheckError
    if check.exact:
        return any(p == spec for p in listing)
    return any(all(p.get(k) == v for k, v in spec.items()) for p in listing)


@settings(max_examples=300, deadline=None)
@given(listing=st.lists(PARTITION, max_size=12),
       specs=st.lists(st.tuples(st.dictionaries(st.sampled_from(["ds", "hr"]), VALUES, max_size=2), st.booleans()),
                      max_size=8))
def test_indexed_answers_equal_the_scan(listing: list[dict[str, str]], specs: list) -> None:
    checks = [PartitionCheck("db", "t", tuple(sorted(s.items())), exact) for s, exact in specs]
    answers = answer_checks("db", "t", listing, checks)
    for check in checks:
        expected = scan(listing, check)
        if expected is PermanentCheckError:
            assert isinstance(answers[check], PermanentCheckError), check
        else:
            assert answers[check] == expected, check


def test_unknown_column_is_permanent() -> None:
    check = PartitionCheck("db", "t", (("region", "eu"),), False)
    assert isinstance(answer_checks("db", "t", [{"ds": "1"}], [check])[check], PermanentCheckError)


def test_partial_partition_name_is_permanent_not_a_silent_wait() -> None:
    check = PartitionCheck("db", "t", (("ds", "1"),), True)
    answer = answer_checks("db", "t", [{"ds": "1", "hr": "0"}], [check])[check]
    assert isinstance(answer, PermanentCheckError) and "['ds', 'hr']" in str(answer)


def test_linear_not_quadratic() -> None:
    n = 10_000
    listing = [{"ds": f"d{i:05d}", "hr": "00"} for i in range(n)]
    checks = [PartitionCheck("db", "t", (("ds", f"d{n + i:05d}"), ("hr", "00")), True) for i in range(n)]
    started = time.perf_counter()
    answers = answer_checks("db", "t", listing, checks)
    assert not any(answers.values())
    assert time.perf_counter() - started < 2.0  # a scan would be ~10 s here
