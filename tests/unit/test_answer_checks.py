"""The indexed matching of checks against a partition listing equals the obvious scan, and stays fast."""

from __future__ import annotations

import time

from hypothesis import given, settings, strategies as st

from smartsensor.adapters.catalog.batch import answer_checks
from smartsensor.adapters.catalog.partition_types import PartitionTypes
from smartsensor.sensors.checks import PartitionCheck
from smartsensor.sensors.errors import PermanentCheckError

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
@given(
    listing=st.lists(PARTITION, max_size=12),
    specs=st.lists(
        st.tuples(st.dictionaries(st.sampled_from(["ds", "hr"]), VALUES, max_size=2), st.booleans()), max_size=8
    ),
)
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
    started = time.thread_time()  # this thread's CPU: other work on a busy machine does not count
    answers = answer_checks("db", "t", listing, checks)
    assert not any(answers.values())
    assert time.thread_time() - started < 2.0  # a scan would be ~10 s here


def test_null_partition_and_string_columns_need_no_spark() -> None:
    types = PartitionTypes(spark=None)  # a cast would need Spark: none may happen here
    specs = [(("hr", "__HIVE_DEFAULT_PARTITION__"),), (("region", "00"), ("hr", "__HIVE_DEFAULT_PARTITION__"))]
    assert types.normalize("db", "t", {"hr": "int", "region": "varchar(8)"}, specs) == specs
    assert types.cast_queries == 0
    [odd] = types.normalize("db", "t", {"hr": "struct<a:int>"}, [(("hr", "1"),)])
    assert isinstance(odd, PermanentCheckError) and "unsupported type" in str(odd)


def test_partition_types_expire_and_can_be_forgotten() -> None:
    now = [0.0]
    types = PartitionTypes(spark=None, ttl=300, clock=lambda: now[0])
    types._types[("db", "t")] = (0.0, {"hr": "int"})
    assert types.cached("db", "t") == {"hr": "int"}
    now[0] = 301.0
    assert types.cached("db", "t") is None
    now[0] = 0.0
    types.forget("db", "t")
    assert types.cached("db", "t") is None
