"""The savings report's rules without a database: what a Hive sensor's rendered fields say it waited for, rounds
over the union of waits, and what one try costs (service/airflow_partitions.py, service/savings.py)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from smartsensor.domain.airflow_history import Poke, SensorTry, TiKey
from smartsensor.service.airflow_partitions import Partition, partitions_of
from smartsensor.service.savings import rounds, try_cost

T = datetime(2026, 11, 22, 10, 0, tzinfo=timezone.utc)
NAMED, HIVE, METASTORE = "NamedHivePartitionSensor", "HivePartitionSensor", "MetastorePartitionSensor"


def _exact(table: str, spec: str) -> Partition:
    db, name = table.split(".")
    return Partition(db, name, spec, True)


FILTER_TERMS = "ds = '2026-11-22'  and `hr`=\"00\""
CASES = {
    "named: case, key order": (
        NAMED,
        {"partition_names": ["DB.Events/hr=00/ds=2026-11-22"]},
        {_exact("db.events", "ds=2026-11-22/hr=00")},
    ),
    "named: one string, default db": (
        NAMED,
        {"partition_names": "events/ds=2026-11-22"},
        {_exact("default.events", "ds=2026-11-22")},
    ),
    "named: a list stored as text": (
        NAMED,
        {"partition_names": "['db.a/ds=1', 'db.b/ds=1']"},
        {_exact("db.a", "ds=1"), _exact("db.b", "ds=1")},
    ),
    "hive: db.table wins over schema, equalities": (
        HIVE,
        {"schema": "x", "table": "db.clicks", "partition": FILTER_TERMS},
        {Partition("db", "clicks", "ds=2026-11-22/hr=00", False)},
    ),
    "hive: another filter is kept as text": (
        HIVE,
        {"schema": "db", "table": "clicks", "partition": "ds >  '2026-11-22'"},
        {Partition("db", "clicks", "ds > '2026-11-22'", False)},
    ),
    "hive: no schema, a number": (
        HIVE,
        {"table": "clicks", "partition": "hr=7"},
        {Partition("default", "clicks", "hr=7", False)},
    ),
    "metastore": (
        METASTORE,
        {"schema": "db", "table": "t", "partition_name": "ds=2026-11-22/sub=a"},
        {_exact("db.t", "ds=2026-11-22/sub=a")},
    ),
    "named equals metastore": (NAMED, {"partition_names": "db.t/ds=1"}, {_exact("db.t", "ds=1")}),
    "fields gone": (NAMED, None, None),
    "no table": (HIVE, {"partition": "ds='1'"}, None),
}


@pytest.mark.parametrize("operator, rendered, expected", list(CASES.values()), ids=list(CASES))
def test_what_a_sensor_waited_for(operator: str, rendered: object, expected: set[Partition] | None) -> None:
    assert partitions_of(operator, rendered) == (None if expected is None else frozenset(expected))


def _at(seconds: float) -> datetime:
    return T + timedelta(seconds=seconds)


def test_rounds_cover_the_union_of_waits() -> None:
    assert rounds([], 5) == 0
    assert rounds([(_at(0), _at(0))], 5) == 1
    assert rounds([(_at(0), _at(12))], 5) == 3  # 0, 5, 10
    assert rounds([(_at(0), _at(10)), (_at(5), _at(20)), (_at(20), _at(24))], 5) == 5  # one stretch of 24 s
    assert rounds([(_at(0), _at(4)), (_at(30), _at(34))], 5) == 2  # two stretches


def _try(
    start: float,
    end: float | None,
    state: str = "success",
    queued: float | None = None,
    next_method: str | None = None,
    pokes: list[Poke] | None = None,
) -> SensorTry:
    return SensorTry(
        TiKey("d", "t", "r", -1),
        1,
        NAMED,
        state,
        _at(start),
        None if end is None else _at(end),
        _at(start - 1 if queued is None else queued),
        next_method,
        pokes or [],
    )


def test_a_poke_mode_try_holds_its_slot_throughout() -> None:
    cost = try_cost(_try(0, 400), 180, True, _at(1000))
    assert (cost.kind, cost.slot_seconds, cost.deferred_seconds, cost.pokes) == ("poke", 400, 0, 3)


def test_a_try_still_running_counts_up_to_now() -> None:
    cost = try_cost(_try(0, None, state="running"), 180, True, _at(100))
    assert (cost.window, cost.slot_seconds, cost.pokes) == ((_at(0), _at(100)), 100, 1)


def test_deferred_time_is_not_slot_time() -> None:
    resumed = try_cost(_try(0, 600, queued=597), 180, True, _at(1000))
    assert (resumed.kind, resumed.slot_seconds, resumed.deferred_seconds, resumed.pokes) == ("deferred", 3, 597, 4)
    from_trigger = try_cost(_try(0, 600, next_method="execute_complete"), 180, True, _at(1000))
    assert (from_trigger.slot_seconds, from_trigger.deferred_seconds) == (0, 600)


@pytest.mark.parametrize("recorded, slot", [(True, 1 + 2 + 3 + 4), (False, 4 * 4)], ids=["2.x", "3.x"])
def test_a_reschedule_try_holds_a_slot_per_poke(recorded: bool, slot: float) -> None:
    pokes = [Poke(_at(s), _at(s + d), _at(s + d + 60)) for s, d in ((0, 1), (61, 2), (123, 3))]
    one = _try(186, 190, pokes=pokes)  # the last poke: 4 s, on the task instance's own row
    cost = try_cost(one, 60, recorded, _at(1000))
    assert (cost.kind, cost.slot_seconds, cost.pokes, cost.window) == ("reschedule", slot, 4, (_at(0), _at(190)))
    waiting = try_cost(_try(123, 126, state="up_for_reschedule", pokes=pokes), 60, recorded, _at(1000))
    assert waiting.pokes == 3
