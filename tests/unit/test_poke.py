"""Which checks start Spark: rounds over the production answerer (``adapters.catalog.backends.answerer_factory``) on the
default catalog backend, with a Spark provider that counts its calls and fails as on a host without Java.
No database, no JVM."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from smartsensor.adapters.catalog.backends import answerer_factory
from smartsensor.adapters.memory import InMemoryStore
from smartsensor.domain.rows import TaskRow
from smartsensor.domain.states import State
from smartsensor.sensors import BaseSensor, SuccessFileSensor
from smartsensor.service.round.range_rounds import RangeRounds, run_round
from smartsensor.standalone.registration import build_row
from tests.support.catalog_doubles import Clock
from tests.support.common import DAY, make_cfg, named
from tests.support.custom_sensors import READY, KeySensor, SparkSensor


@pytest.fixture
def cfg(tmp_path: Path) -> Any:
    """The default catalog backend (no metastore_uris: spark), with the shared user sensors enabled."""
    cfg = make_cfg(
        tmp_path,
        f"sqlite:///{tmp_path / 'unused.db'}",
        smart_sensor__sensor_modules="tests.support.custom_sensors",
        smart_sensor__sensors_enabled="NamedHivePartitionSensor, SuccessFileSensor, KeySensor, SparkSensor",
    )
    assert cfg.resolved_catalog_backend == "spark"
    return cfg


class NoJava:
    """A Spark provider on a host without Java: counts the starts it was asked for."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> Any:
        self.calls += 1
        raise RuntimeError("Java gateway process exited before sending its port number")


def one_round(cfg: Any, clock: Clock, tasks: dict[str, BaseSensor], spark: NoJava) -> tuple[Any, dict[str, TaskRow]]:
    """One round over ``tasks`` (dag_id: sensor): its result, and each task's row afterwards by dag_id."""
    store = InMemoryStore()
    for dag_id, sensor in tasks.items():
        store.add_task(build_row(sensor, dag_id, DAY, cfg)[0])
    result = run_round(
        [RangeRounds(store, cfg, 0, cfg.shard_code_upper_limit, clock=clock)], answerer_factory(cfg, spark)
    )
    return result, {key.dag_id: row for key, row in store.tasks.items()}


def test_file_paths_and_user_pokes_never_start_spark(cfg: Any, clock: Clock, tmp_path: Path) -> None:
    """issue 22, defect 2: on the spark backend such a round started Spark, and failed where Java is missing."""
    (tmp_path / "_SUCCESS").write_text("")
    READY.add("landed")
    spark = NoJava()
    result, rows = one_round(
        cfg,
        clock,
        {
            "here": SuccessFileSensor(task_id="w", path=(tmp_path / "_SUCCESS").as_uri()),
            "not_yet": SuccessFileSensor(task_id="w", path=f"file://{tmp_path}/nope/_SUCCESS"),
            "poked": KeySensor(task_id="w", key="landed"),
        },
        spark,
    )
    assert spark.calls == 0 and result.transient_errors == 0, result.transient_example
    assert {d: (r.state, r.error) for d, r in rows.items()} == {
        "here": (State.SUCCESS, None),
        "not_yet": (State.SMART_RUNNING, None),
        "poked": (State.SUCCESS, None),
    }


def test_checks_that_need_spark_start_it_once_a_round_and_wait_without_it(
    cfg: Any, clock: Clock, tmp_path: Path
) -> None:
    """A partition (spark backend), a path that is not file:// and a user sensor reading context['spark'] ask for
    Spark; without Java they wait (a transient error) while a file:// check in the same round still lands."""
    (tmp_path / "_SUCCESS").write_text("")
    spark = NoJava()
    result, rows = one_round(
        cfg,
        clock,
        {
            "partition": named("w", "db.t/ds=1"),
            "hdfs": SuccessFileSensor(task_id="w", path="hdfs://nn/data/_SUCCESS"),
            "user_spark": SparkSensor(task_id="w", key="k"),
            "local": SuccessFileSensor(task_id="w", path=(tmp_path / "_SUCCESS").as_uri()),
        },
        spark,
    )
    assert spark.calls == 1  # one attempt a round, not one per check
    assert result.transient_errors == 3 and result.transient_example.startswith("Spark unavailable: "), result
    assert {d: r.state for d, r in rows.items()} == {
        "partition": State.SMART_RUNNING,
        "hdfs": State.SMART_RUNNING,
        "user_spark": State.SMART_RUNNING,
        "local": State.SUCCESS,
    }
