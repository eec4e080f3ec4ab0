"""The Airflow demo's verdicts (scripts/airflow/report.py): what each task must end as, from what landed,
each sensor's own rules and the DAG's dependencies; the computed figures; and, with --assets, one run per landed
partition of each consumer."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from scripts.airflow.report import (
    ConsumerCheck,
    ConsumerRun,
    assets_json,
    check_dag,
    compact_keys,
    figures,
    policy_check,
)

LANDED = {"demo.events/ds=2026-11-22/hr=00"}


def row(task_id: str, names: list[str], soft_fail: bool = False, waited: int = 20) -> dict:
    return {
        "dag_id": "d",
        "task_id": task_id,
        "operator": "NamedHivePartitionSensor",
        "hashcode": hash(tuple(names)),
        "attr_dict": json.dumps({"partition_names": names}),
        "try_number": 1,
        "exec_dict": json.dumps({"poke_interval": 5, "timeout": 30, "soft_fail": soft_fail}),
        "execution_date": "2026-11-23T06:00:00",
        "start_date": "2026-11-23T06:00:00",
        "end_date": f"2026-11-23T06:00:{waited:02d}",
    }


def task(task_id: str, operator: str, downstream: list[str]) -> dict:
    return {
        "task_id": task_id,
        "operator_name": operator,
        "trigger_rule": "all_success",
        "downstream_task_ids": downstream,
    }


def test_expected_states_follow_landings_timeouts_and_dependencies() -> None:
    tasks = [
        task("ok", "NamedHivePartitionSensor", ["after_ok"]),
        task("after_ok", "EmptyOperator", ["last"]),
        task("soft", "NamedHivePartitionSensor", ["after_soft"]),
        task("after_soft", "EmptyOperator", []),
        task("hard", "NamedHivePartitionSensor", ["last"]),
        task("last", "_PythonDecoratedOperator", []),
        task("lost", "HivePartitionSensor", []),
    ]
    rows = {
        ("d", "ok"): row("ok", ["demo.events/ds=2026-11-22/hr=00"]),
        ("d", "soft"): row("soft", ["demo.events/ds=2026-11-22/hr=01"], soft_fail=True),
        ("d", "hard"): row("hard", ["demo.events/ds=2026-11-22/hr=01"]),
    }
    got: dict[str, str | None] = {
        "ok": "success",
        "after_ok": "success",
        "soft": "skipped",
        "after_soft": "skipped",
        "hard": "failed",
        "last": "upstream_failed",
        "lost": "failed",
    }
    check = check_dag("d", tasks, got, rows, LANDED, set())
    assert check.expected == {
        "ok": "success",
        "after_ok": "success",
        "soft": "skipped",
        "after_soft": "skipped",
        "hard": "failed",
        "last": "upstream_failed",
        "lost": "registered with smartsensor",
    }
    assert check.sensors == 4
    assert check.mismatches() == ["d.lost: expected registered with smartsensor, Airflow says failed"]
    got["ok"] = "deferred"  # a run cut short: a task still waiting is no mismatch yet, an ended one still is
    cut_short = check_dag("d", tasks, got, rows, LANDED, set())
    assert cut_short.mismatches(finished_only=True) == [
        "d.lost: expected registered with smartsensor, Airflow says failed"
    ]
    assert "d.ok: expected success, Airflow says deferred" in cut_short.mismatches()


def test_figures_count_classic_pokes_and_per_trigger_polls_from_the_recorded_waits() -> None:
    rows = [
        row("a", ["demo.events/ds=2026-11-22/hr=00"], waited=20),
        row("b", ["demo.events/ds=2026-11-22/hr=00"], waited=20),
        row("c", ["demo.events/ds=2026-11-22/hr=00", "demo.clicks/ds=2026-11-22/hr=00"], waited=9),
    ]
    rounds = [{"catalog_calls": 2, "schema_calls": 1, "fs_calls": 0}, {"catalog_calls": 1, "schema_calls": 0}]
    f = figures(rows, rounds, states_requests=4, sensor_worker_tries=1)
    assert (f.registrations, f.distinct_checks, f.worker_rounds) == (3, 2, 2)
    assert (f.listings, f.schema_reads, f.metastore_calls) == (3, 1, 4)
    assert f.classic_calls == 5 + 5 + 2 * 2  # (20 // 5 + 1) per sensor, x2 tables for c
    assert f.per_task_requests == 5 + 5 + 2  # one per 5 s poll while waiting, plus one
    assert (f.shortest_poll, f.deferred_window, f.states_requests) == (5.0, 20.0, 4)
    assert (f.sensor_worker_tries, f.triggerer_requests) == (1, 3)  # one held request by the try on a worker


def test_the_cluster_policys_sensors_count_as_sensors_and_each_hive_one_must_say_via_smartsensor() -> None:
    tasks = [
        task("routed", "NamedHivePartitionSensor via smartsensor", ["after"]),
        task("after", "EmptyOperator", []),
    ]
    rows = {("d", "routed"): row("routed", ["demo.events/ds=2026-11-22/hr=00"])}
    check = check_dag("d", tasks, {"routed": "success", "after": "success"}, rows, LANDED, set())
    assert (check.sensors, check.expected) == (1, {"routed": "success", "after": "success"})
    routing = policy_check(
        [
            ("d", "routed", "NamedHivePartitionSensor", "NamedHivePartitionSensor via smartsensor"),
            ("d", "own", "HivePartitionSensor", "HivePartitionSensor"),
            ("d", "file", "SuccessFileSensor", "SuccessFileSensor"),  # smartsensor's own: not the policy's
            ("d", "after", "EmptyOperator", "EmptyOperator"),
        ]
    )
    assert (routing.hive_sensors, routing.routed) == (2, 1)
    assert routing.not_routed == [
        "d.own: operator 'HivePartitionSensor', not via smartsensor (the cluster policy left it as Airflow's own)"
    ]


T0 = datetime(2026, 11, 27, 14, 0, tzinfo=timezone.utc)


def consumer(*runs: ConsumerRun) -> ConsumerCheck:
    landed = {"2026-11-22|00": T0, "2026-11-22|01": T0 + timedelta(seconds=10)}
    posted = {"2026-11-22|00": T0 + timedelta(seconds=0.5), "2026-11-22|01": T0 + timedelta(seconds=11)}
    return ConsumerCheck("reports_on_landing", "demo.events", landed, list(runs), posted)


def ran(key: str, after: float, state: str = "success", returned: str | None = None) -> ConsumerRun:
    at = T0 + timedelta(seconds=after)
    return ConsumerRun(key, state, at, f"report for {key}" if returned is None else returned)


def test_one_successful_run_per_landed_partition_that_read_its_key_is_all_right() -> None:
    check = consumer(ran("2026-11-22|00", 1.5), ran("2026-11-22|01", 12.5))
    assert check.problems(finished=True) == []
    assert check.lags() == [1.5, 2.5]
    assert check.post_lags() == [0.5, 1.0]  # smartsensor's share: landed -> Airflow took the event
    data = assets_json([check], finished=True)["reports_on_landing"]
    assert data["runs_per_key"] == {"2026-11-22|00": 1, "2026-11-22|01": 1}
    assert (data["lag_p50"], data["lag_max"], data["post_lag_p50"], data["post_lag_max"]) == (2.0, 2.5, 0.75, 1.0)


def test_a_partition_with_no_run_two_runs_or_a_run_for_nothing_landed_is_a_problem() -> None:
    check = consumer(ran("2026-11-22|00", 1), ran("2026-11-22|00", 30), ran("2026-11-22|05", 3))
    assert check.problems(finished=True) == [
        "reports_on_landing: partition '2026-11-22|01' of demo.events landed, no run started",
        "reports_on_landing: partition '2026-11-22|00' started 2 runs, not one",
        "reports_on_landing: a run for '2026-11-22|05', which did not land",
    ]
    assert check.lags() == [1.0]  # the first run of a key
    # cut short by the deadline: a missing run may still come, a second one is wrong already
    assert len(check.problems(finished=False)) == 2


def test_a_run_that_failed_or_did_not_read_its_partition_key_is_a_problem() -> None:
    check = consumer(ran("2026-11-22|00", 1, state="failed"), ran("2026-11-22|01", 11, returned="report for None"))
    assert check.problems(finished=True) == [
        "reports_on_landing: the run for '2026-11-22|00' ended failed, not success",
        "reports_on_landing: the run for '2026-11-22|01' returned 'report for None', not its partition key",
    ]


def test_the_summary_shows_keys_that_differ_in_their_last_value_as_one_brace_list() -> None:
    keys = ["2026-11-22|01", "2026-11-22|00", "2026-11-23|00", "2026-11-21", "None"]
    assert compact_keys(keys) == "2026-11-21 2026-11-22|{00, 01} 2026-11-23|00 None"
