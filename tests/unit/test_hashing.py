"""Stable hashes: equal across processes, key order irrelevant, class-sensitive, shardcode in range."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from datetime import datetime, timezone

from hypothesis import given, settings, strategies as st

from smartsensor.domain.hashing import canonical_json, check_hashcode, shardcode_for
from smartsensor.sensors import HivePartitionSensor, NamedHivePartitionSensor
from smartsensor.standalone.registration import build_row
from tests.support.common import make_cfg

SNIPPET = """
import json, sys
from datetime import datetime, timezone
from smartsensor.sensors import NamedHivePartitionSensor
from smartsensor.config import load_config
from smartsensor.standalone.registration import build_row
cfg = load_config(environ={"SMARTSENSOR_HOME": sys.argv[1]})
s = NamedHivePartitionSensor(task_id="t", partition_names=["Demo.Events/ds={{ ds }}/hr=00", "demo.users/ds={{ ds }}"])
row, _ = build_row(s, "dag", datetime(2026, 11, 22, tzinfo=timezone.utc), cfg)
print(json.dumps([row.hashcode, row.shardcode, hash("salted")]))
"""


def test_hash_equal_across_processes_with_different_hash_seeds(tmp_path) -> None:
    results = []
    for seed in ("1", "2", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run(
            [sys.executable, "-c", SNIPPET, str(tmp_path)], env=env, capture_output=True, text=True, check=True
        )
        results.append(json.loads(out.stdout))
    assert len({(h, s) for h, s, _ in results}) == 1, results
    # The control: Python's own hash() really does differ between these processes.
    assert len({salted for _, _, salted in results}) == 3


def test_key_order_and_spelling_irrelevant(tmp_path) -> None:
    cfg = make_cfg(tmp_path, "sqlite://")
    day = datetime(2026, 11, 22, tzinfo=timezone.utc)
    a = HivePartitionSensor(task_id="a", table="Demo.Events", partition={"ds": "{{ ds }}", "hr": "00"})
    b = HivePartitionSensor(task_id="b", table="demo.events", partition={"HR": "00", "ds": "2026-11-22"})
    c = HivePartitionSensor(task_id="c", table="demo.events", partition="hr=00/ds=2026-11-22")
    hashes = {build_row(s, "d", day, cfg)[0].hashcode for s in (a, b, c)}
    assert len(hashes) == 1
    n1 = NamedHivePartitionSensor(task_id="n1", partition_names=["x.t/ds=1/hr=2", "default.u/ds=1"])
    n2 = NamedHivePartitionSensor(task_id="n2", partition_names=["u/ds=1", "X.T/hr=2/ds=1", "x.t/ds=1/hr=2"])
    assert build_row(n1, "d", day, cfg)[0].hashcode == build_row(n2, "d2", day, cfg)[0].hashcode


def test_different_classes_with_equal_fields_hash_differently() -> None:
    attr = canonical_json({"path": "/data/_SUCCESS"})
    assert check_hashcode("smartsensor.sensors.filesystem.SuccessFileSensor", attr) != check_hashcode(
        "my.OtherSensor", attr
    )


def test_different_dates_hash_differently(tmp_path) -> None:
    cfg = make_cfg(tmp_path, "sqlite://")
    s = HivePartitionSensor(task_id="a", table="d.t", partition={"ds": "{{ ds }}"})
    assert (
        build_row(s, "d", datetime(2026, 11, 22, tzinfo=timezone.utc), cfg)[0].hashcode
        != build_row(s, "d", datetime(2026, 11, 23, tzinfo=timezone.utc), cfg)[0].hashcode
    )


def test_canonical_json_is_order_free() -> None:
    assert canonical_json({"b": 1, "a": [1, {"y": 2, "x": 1}]}) == '{"a":[1,{"x":1,"y":2}],"b":1}'


@settings(max_examples=500, deadline=None)
@given(st.text(), st.integers(min_value=1, max_value=10**9))
def test_shardcode_always_in_range(payload: str, limit: int) -> None:
    h = check_hashcode("cls", payload)
    assert -(1 << 63) <= h < (1 << 63)
    assert 0 <= shardcode_for(h, limit) < limit


def test_hash_spreads_over_shards() -> None:
    rng = random.Random(7)
    counts = [0] * 10
    for _ in range(10000):
        h = check_hashcode("c", canonical_json({"p": f"db.t/ds={rng.random()}"}))
        counts[shardcode_for(h, 10)] += 1
    assert min(counts) > 850, counts
