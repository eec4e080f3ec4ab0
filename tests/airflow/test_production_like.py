"""Airflow as a platform team runs it, with smartsensor as the README sets it up: no sensor task is failed by a
race, whenever its partition lands; and the drop-ins end as Airflow's own sensors do.

Airflow: the real scheduler and triggerer (3.x: also the dag-processor and the api-server), LocalExecutor, its
database on the suite's PostgreSQL (2.x: also its webserver), runs triggered through the REST API. smartsensor:
PostgreSQL, a Hive metastore service, ``serve`` with a token, ``workers -n 2`` on the thrift backend, landing
signals from the pipeline. One such deployment per Airflow version serves every test of this module.

The race, at scale: SCALE_DAGS DAGs × SCALE_SENSORS Hive sensors (tests/support/airflow_race.py) per strategy
(airflow_scale.STRATEGIES), each run playing the three cases of airflow_race.CASES for a new day, and what each
costs Airflow. Airflow 3.3.2 (apache/airflow#67287, #72716) failed 2-13 of 60 such tasks per run when the sensors
resumed on a worker right after deferring; the drop-ins now start in the triggerer and end there, and not one may
fail. CI runs 300 sensors that start in the triggerer and 300 parked ones (issue 55: the parking attendant runs
beside the scheduler), once. ``SMARTSENSOR_SCALE_RUNS`` repeats the cases,
``SMARTSENSOR_SCALE_DAGS``/``SMARTSENSOR_SCALE_SENSORS`` size them, ``SMARTSENSOR_SCALE_STRATEGIES`` picks the
strategies (the others, among them the provider's older ways to end, are measured, not asserted on, in the closing
notes). The race's slow variant: ``SMARTSENSOR_SCALE_RUNS=3 ./scripts/test.sh tests/airflow/test_production_like.py
-k at_scale -s``.

The semantics: one DAG (airflow_race.SEMANTICS) puts each drop-in rule beside Airflow's own sensor
(``PythonSensor``, the same BaseSensorOperator rules as the Hive provider's sensors) with the same arguments; each
test compares how the two ended (state, tries).

The cluster policy (tests/support/airflow_policy.py), last: DAG files written for Airflow's Hive provider,
unchanged, run through smartsensor; with the service out of reach they still succeed (the safety valve); with the
policy off they run as plain Airflow. Airflow's own sensors reach the same metastore through ``metastore_default``
(thrift), as the safety valve and the classic runs do. The scale test's "Airflow's own (reschedule)" DAGs are tagged
``smartsensor:off``, so that the policy leaves them as they are.
"""

from __future__ import annotations

import os
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator

import pytest

from scripts.airflow.stack import version_of
from scripts.harness.usage import group_usage, process_rss
from smartsensor.config import Config
from tests.support import airflow_policy as policy
from tests.support.airflow_databases import AirflowDatabases
from tests.support.airflow_deployment import Deployment, deployed, metastore_connection, tmp_for
from tests.support.airflow_helpers import airflow_venvs
from tests.support.airflow_race import (
    CASES,
    TABLES,
    TaskEnd,
    dag_file,
    p,
    run_case,
    run_semantics,
    semantics_file,
    table,
)
from tests.support.airflow_scale import (
    STRATEGIES,
    BusyElsewhere,
    ScaleRun,
    SlotSampler,
    StatsdSink,
    pickup_rate,
    scale_table,
)

pytestmark = pytest.mark.slow

TEAMS = 3
SEMANTICS_DAY = "2026-09-01"
CALLBACKS = {2: "callback_request", 3: "callback"}  # the table of callback requests, by Airflow major version
ON_WORKERS = "on_workers_"  # the same teams' DAGs, their tries on the execute path (the savings report reads them)
# Sensors per on-workers DAG: each try is a task process on a worker (two Python processes importing Airflow on
# 2.10), the costliest thing the module does per task; four per team (both classes, the quarter's options and the
# rest) still give the report three teams sharing two checks.
ON_WORKERS_SENSORS = 4
# The cluster policy's tests (tests/support/airflow_policy.py) run last, on days of their own: after the savings
# report (it counts every Hive sensor task of this Airflow), and the policy-off one restarts Airflow.
POLICY_DAYS = ("2026-07-01", "2026-07-02", "2026-07-03", "2026-07-04", "2026-07-12")


# The scale test: SCALE_DAGS DAGs of SCALE_SENSORS sensors per strategy (airflow_scale.STRATEGIES), the three cases
# SCALE_RUNS times. The extended tier runs the tries that start in the triggerer and the parked ones at 300 sensors,
# once (CI deploys none of them); the slow variant compares the strategies at 3,000:
# SMARTSENSOR_SCALE_DAGS=30 \
# SMARTSENSOR_SCALE_STRATEGIES="start in triggerer,parked,execute path,Airflow's own (reschedule)"
SCALE_RUNS = int(os.environ.get("SMARTSENSOR_SCALE_RUNS", "1"))
SCALE_DAGS = int(os.environ.get("SMARTSENSOR_SCALE_DAGS", "3"))
SCALE_SENSORS = int(os.environ.get("SMARTSENSOR_SCALE_SENSORS", "100"))
SCALE_STRATEGIES = [
    name.strip() for name in os.environ.get("SMARTSENSOR_SCALE_STRATEGIES", "start in triggerer,parked").split(",")
]
SCALE_FIRST_DAY = date(2026, 8, 1)
# Issue 55's goals for parked tries: end p95 in each case, by how many sensors wait (up to). The machines that run
# this are shared: a case that misses its goal is measured again (a new day), up to PARKED_AGAIN times, and its best
# run must meet it; every run is printed.
PARKED_GOALS = ((300, 2.0), (3000, 5.0))
PARKED_AGAIN = 2
# A goal is a property of the deployment on an otherwise idle machine: a case whose every run shared the machine with
# this much other work (cores on average: CI runs other tests beside this one) is reported, not failed.
BUSY_ELSEWHERE = 0.75
TRIGGERER_CAPACITY = 10_000  # one triggerer holds every waiting sensor of the slow variant
# DAGs per DAG file: Airflow imports a file within [core] dagbag_import_timeout (30 s), whatever the scale (the
# 20,000-sensor run: 200 DAGs of 100 sensors).
DAGS_PER_FILE = 10


@pytest.fixture(scope="module")
def statsd() -> Iterator[StatsdSink]:
    """Where Airflow sends its metrics (the scale test reads the scheduler's loop time)."""
    sink = StatsdSink()
    try:
        yield sink
    finally:
        sink.close()


@pytest.fixture(scope="module", params=airflow_venvs(), ids=version_of)
def deployment(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    service: Config,
    airflow_databases: AirflowDatabases,
    statsd: StatsdSink,
) -> Iterator[Deployment]:
    """smartsensor and Airflow (request.param's venv) as a platform team deploys them (airflow_deployment)."""
    venv: Path = request.param
    db = "race_" + version_of(venv).replace(".", "_")  # one metastore service for the module: a database each
    base = tmp_for(tmp_path_factory, venv)
    marks = base / "marks"  # where the semantics DAG's success callback writes
    marks.mkdir()
    dags = {
        "teams_on_workers.py": dag_file(TEAMS, ON_WORKERS_SENSORS, "execute", db, prefix=ON_WORKERS),
        "semantics.py": semantics_file(db, marks, SEMANTICS_DAY),
        "policy_teams.py": policy.dag_source(db),
    }
    dag_ids = [
        *(f"{ON_WORKERS}{t}" for t in range(TEAMS)),
        "semantics",
        *policy.DAG_IDS,
    ]
    # The scale test's DAGs only when it runs (the extended tier): otherwise the dag-processor would parse their
    # hundreds of sensors at the start and again every [scheduler] min_file_process_interval for the whole module.
    scale = any(getattr(item, "originalname", None) == "test_at_scale" for item in request.session.items)
    for strategy in SCALE_STRATEGIES if scale else []:
        option, prefix = STRATEGIES[strategy]
        for first in range(0, SCALE_DAGS, DAGS_PER_FILE):
            teams = range(first, min(first + DAGS_PER_FILE, SCALE_DAGS))
            dags[f"{prefix}dags_{first}.py"] = dag_file(teams, SCALE_SENSORS, option, db, prefix=prefix)
        dag_ids += [f"{prefix}{d}" for d in range(SCALE_DAGS)]
    with deployed(
        venv,
        airflow_databases,
        base,
        service,
        db,
        TABLES,
        dags,
        dag_ids,
        local_settings=policy.LOCAL_SETTINGS,
        rest=True,  # runs triggered as a platform team's clients do; 2.x's CLI would take seconds of CPU per run
        parse_timeout=max(300.0, len(dag_ids) * SCALE_SENSORS / 20),  # 20,000 sensors: 1,000 s
        airflow_env={
            **policy.AIRFLOW_ENV,
            # Each strategy says where its tries go: the parked one per task (smartsensor_park), the others start in
            # the triggerer even while the scale test's attendant runs (park = auto would park them too).
            "AIRFLOW__SMARTSENSOR__PARK": "False",
            "AIRFLOW__TRIGGERER__CAPACITY": str(TRIGGERER_CAPACITY),  # 3.x
            "AIRFLOW__TRIGGERER__DEFAULT_CAPACITY": str(TRIGGERER_CAPACITY),  # 2.10
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(statsd.port),
            # Airflow's own Hive sensors (the scale test's reschedule strategy) ask the metastore service.
            **metastore_connection(service),
        },
    ) as running:
        if scale and "parked" in SCALE_STRATEGIES:
            running.start_attendant()
        yield running


@pytest.fixture(scope="module")
def semantics(deployment: Deployment) -> dict[str, TaskEnd]:
    """The semantics DAG's run, ended: task_id → how it ended."""
    return run_semantics(deployment.stack, deployment.landing, deployment.engine, SEMANTICS_DAY)


@pytest.mark.parametrize(
    "rule",
    [
        pytest.param("timeout", id="timeout fails the task without retries"),
        pytest.param("soft_fail", id="soft_fail skips"),
        pytest.param("execution_timeout", id="execution_timeout is retried"),
        pytest.param("error", id="an error is retried"),
        pytest.param("missing_param", id="a template naming what the run lacks fails as Airflow renders it"),
    ],
)
@pytest.mark.timeout(900)
def test_a_drop_in_ends_as_airflows_own_sensor(semantics: dict[str, TaskEnd], rule: str) -> None:
    ours, airflows = semantics[rule], semantics[f"airflow_{rule}"]
    assert (ours.state, ours.tries) == (airflows.state, airflows.tries), (rule, ours, airflows)


@pytest.mark.timeout(900)
def test_where_each_try_runs(semantics: dict[str, TaskEnd]) -> None:
    """Tries start in the triggerer (no worker) and end there on success or skip; a worker runs only what must raise
    Airflow's exception (a timeout, an error: one per try), a success callback, a mapped task and the opt-out."""
    on_worker = {task_id: end.worker_tries for task_id, end in semantics.items() if not task_id.startswith("airflow_")}
    assert on_worker == {
        "timeout": 1,  # resumed to raise AirflowSensorTimeout: no retries
        "soft_fail": 0,  # skipped from the triggerer
        "execution_timeout": 2,  # each try resumed to raise its timeout, retried once
        "error": 2,  # "ds > '1'" cannot be checked (and has no template): the execute path fails each try
        "missing_param": 2,  # the trigger's strict rendering fails: each try resumes, and Airflow's rendering fails it
        "whole_list": 0,
        "templated_conn": 0,
        "templated_conn_on_worker": 1,  # smartsensor_start_from_trigger=False
        "params_and_macros": 0,
        "with_callback": 1,  # resumed on a worker to end there, so that its on_success_callback runs
        "mapped": 2,  # a mapped task takes the execute path, one try per map index
    }
    started_there = {task_id: end.started_in_triggerer for task_id, end in semantics.items()}
    assert started_there["execution_timeout"] == [1, 2]  # a retry starts in the triggerer again
    assert started_there["soft_fail"] == started_there["with_callback"] == [1]
    assert started_there["error"] == started_there["mapped"] == started_there["templated_conn_on_worker"] == []
    assert started_there["missing_param"] == []
    assert semantics["missing_param"].registered is None  # no check ("any partition") was ever registered


@pytest.mark.timeout(900)
def test_a_success_callback_runs(semantics: dict[str, TaskEnd], deployment: Deployment) -> None:
    end = semantics["with_callback"]
    assert (end.state, end.tries) == ("success", 1)
    mark = deployment.stack.home.parent / "marks" / "with_callback.done"
    assert mark.is_file(), f"on_success_callback did not run (logs in {deployment.logs})"
    assert semantics["mapped"].state == "success"


@pytest.mark.timeout(900)
def test_whole_list_templates_modes_and_templated_connections(semantics: dict[str, TaskEnd]) -> None:
    """The check each task registered, rendered in the triggerer (a native template as a list; the Hive provider's
    default partition); a templated connection as the worker renders it, for the safety valve."""
    end = semantics["whole_list"]  # mode="reschedule", deferrable=False, render_template_as_native_obj
    assert (end.state, end.tries) == ("success", 1)
    assert end.registered is not None
    (partition,) = end.registered["partition_names"]
    assert partition.endswith(f".events/ds={SEMANTICS_DAY}")
    end = semantics["templated_conn"]  # partition=None: the run's day, as the Hive provider's
    assert (end.state, end.tries) == ("success", 1)
    assert end.registered is not None and end.registered["partition"] == {"ds": SEMANTICS_DAY}
    end = semantics["params_and_macros"]  # rendered by the trigger (on 2.10: from the run's row)
    assert (end.state, end.tries) == ("success", 1)
    assert end.registered is not None
    names = sorted(name.split(".", 1)[1] for name in end.registered["partition_names"])  # the service sorts them
    assert names == [f"clicks/ds={SEMANTICS_DAY}", f"events/ds={SEMANTICS_DAY}"]
    end = semantics["templated_conn_on_worker"]
    assert (end.state, end.tries) == ("success", 1)
    assert end.rendered["metastore_conn_id"] == "metastore_race"
    assert end.rendered["partition"] == f"ds='{SEMANTICS_DAY}'"


@pytest.mark.timeout(900)
def test_the_savings_report_reads_this_airflow_database(deployment: Deployment) -> None:
    """``smartsensor airflow report`` on this Airflow's own database (PostgreSQL): it finds every Hive sensor task
    instance that ran, and 3 teams waiting on the same partitions dedup."""
    import json
    import subprocess
    import sys

    from smartsensor.cli.airflow_report import COMPARE_HEADING, TASKS_HEADING
    from smartsensor.domain.airflow_history import SENSOR_OPERATORS

    def ran(where: str = "") -> int:
        sql = f"SELECT count(*) FROM task_instance WHERE operator IN :ops AND start_date IS NOT NULL {where}"
        return int(deployment.stack.rows(sql, expanding=["ops"], ops=list(SENSOR_OPERATORS))[0][0])

    # The report reads each task's rendered fields, which only a worker writes: the teams whose tries take the
    # execute path run one case here (a try started in the triggerer has none, and the report counts it so).
    dag_ids = [f"{ON_WORKERS}{t}" for t in range(TEAMS)]
    on_workers = run_case(
        deployment.stack, deployment.landing, deployment.engine, CASES[0], "2026-09-15", dag_ids, ON_WORKERS_SENSORS
    )
    print("\n" + table(deployment.stack.version, "execute", [on_workers]))
    assert ran(f"AND dag_id LIKE '{ON_WORKERS}%'") == TEAMS * ON_WORKERS_SENSORS
    no_fields = int(
        deployment.stack.rows(
            "SELECT count(*) FROM task_instance t WHERE t.operator IN :ops AND t.start_date IS NOT NULL AND NOT EXISTS "
            "(SELECT 1 FROM rendered_task_instance_fields r WHERE r.dag_id = t.dag_id AND r.task_id = t.task_id "
            "AND r.run_id = t.run_id AND r.map_index = t.map_index)",
            expanding=["ops"],
            ops=list(SENSOR_OPERATORS),
        )[0][0]
    )
    command = [sys.executable, "-m", "smartsensor.cli", "airflow", "report", "--airflow-db", deployment.stack.db_url]

    def report(*extra: str) -> str:
        proc = subprocess.run([*command, *extra], env=deployment.env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    figures = json.loads(report("--json"))
    human = report()
    print(f"\nAirflow {deployment.stack.version}:\n{human}\n{json.dumps(figures)}")
    assert figures["airflow_schema"] == deployment.stack.major
    assert figures["sensor_tasks"] == ran()
    assert figures["tries"] >= figures["sensor_tasks"]
    assert figures["tasks_without_fields"] == no_fields  # the tries that started in the triggerer
    assert figures["dedup_ratio"] > 1  # three teams wait for the same partitions
    assert figures["airflow_metastore_calls"] >= figures["tries"]  # Airflow's own sensors poke at least once a try
    assert TASKS_HEADING in human and COMPARE_HEADING in human and "Assumptions" in human


@pytest.mark.extended  # minutes of a whole deployment at scale; CI's drop-in, policy and outage tests hold its rules
@pytest.mark.timeout(3600 + 20 * SCALE_DAGS * SCALE_SENSORS * SCALE_RUNS)
def test_at_scale(deployment: Deployment, statsd: StatsdSink) -> None:
    """Many sensors in one Airflow, each strategy in turn through the three cases: what they cost Airflow (worker
    tries and slot-seconds, the triggerer's CPU and memory, the scheduler's loop) beside how fast they end. Tries that
    start in the triggerer take no worker at all while the service is up, and none fails, whenever its partition
    lands (Airflow's deferral race)."""
    stack = deployment.stack
    triggerer = stack.processes.procs["airflow-triggerer"].pid
    scheduler = stack.processes.procs["airflow-scheduler"].pid
    others = {  # the components whose memory growth is reported beside the triggerer's (their main processes)
        name.removeprefix("airflow-"): proc.pid
        for name, proc in stack.processes.procs.items()
        if name in ("airflow-scheduler", "airflow-api-server", "airflow-webserver", "airflow-dag-processor")
    }
    runs: list[ScaleRun] = []
    ours = [proc.pid for proc in stack.processes.procs.values()]  # Airflow, the attendant, serve, the workers
    day = SCALE_FIRST_DAY
    for strategy in SCALE_STRATEGIES:
        option, prefix = STRATEGIES[strategy]
        dag_ids = [f"{prefix}{d}" for d in range(SCALE_DAGS)]
        run = ScaleRun(strategy, SCALE_DAGS * SCALE_SENSORS)
        tri, sched = group_usage(triggerer), group_usage(scheduler)
        callbacks_before = callback_rows(deployment)
        run.triggerer_rss_idle = tri.rss_bytes
        run.rss_idle = {name: process_rss(pid) for name, pid in others.items()}
        statsd.take("scheduler.scheduler_loop_duration")

        def waiting(run: ScaleRun = run) -> None:
            run.triggerer_rss_waiting = group_usage(triggerer).rss_bytes
            run.rss_waiting = {name: process_rss(pid) for name, pid in others.items()}

        with SlotSampler(stack, dag_ids) as slots:
            for case in [*CASES] * SCALE_RUNS:
                smart = option != "airflow reschedule"
                with BusyElsewhere(ours) as busy:
                    outcome = run_case(
                        stack,
                        deployment.landing,
                        deployment.engine,
                        case,
                        day.isoformat(),
                        dag_ids,
                        SCALE_SENSORS,
                        smart=smart,
                        before_landing=waiting,
                    )
                outcome.elsewhere = busy.cores
                run.outcomes.append(outcome)
                day += timedelta(days=1)
        run.slot_seconds = slots.slot_seconds
        run.triggerer_cpu = group_usage(triggerer).cpu_seconds - tri.cpu_seconds
        run.airflow_cpu = group_usage(scheduler).cpu_seconds - sched.cpu_seconds
        run.loop_ms = statsd.take("scheduler.scheduler_loop_duration")
        run.pickup_rate = pickup_rate(run.case("while deferred"), run.sensors)
        run.callback_rows = callback_rows(deployment) - callbacks_before
        runs.append(run)
        print("\n" + table(stack.version, run.strategy, run.outcomes))  # each as it ends: a later one may fail
        print(f"cores busy elsewhere, per case: {[round(o.elsewhere, 2) for o in run.outcomes]}")
        print("\n" + scale_table(stack.version, runs))
        if strategy == "parked" and (goal := parked_goal(run.sensors)) is not None:
            for case in CASES:
                for _ in range(PARKED_AGAIN):
                    if best_p95(run, case) <= goal:
                        break
                    with BusyElsewhere(ours) as busy:
                        again = run_case(
                            stack, deployment.landing, deployment.engine, case, day.isoformat(), dag_ids, SCALE_SENSORS
                        )
                    again.elsewhere = busy.cores
                    run.again.append(again)
                    day += timedelta(days=1)
                    busy_note = f"measured again, {again.elsewhere:.2f} cores busy elsewhere"
                    print("\n" + table(stack.version, f"{run.strategy}, {busy_note}", [again]))
    for run in runs:
        print(
            f"{run.strategy}: callback rows left after {len(run.outcomes) * run.sensors} sensor tasks: "
            f"{run.callback_rows}"
        )
        assert [o.tasks for o in run.outcomes] == [run.sensors] * len(run.outcomes), run.strategy
    started = next((r for r in runs if r.strategy == "start in triggerer"), None)
    if started is not None:
        failed = {f"{o.case} ({o.ds})": o.failures for o in started.outcomes if o.failures}
        assert failed == {}, f"{failed}\n(logs in {deployment.logs})"
        assert [o.worker_tries for o in started.outcomes] == [0] * len(started.outcomes)
        assert [o.by_trigger for o in started.outcomes] == [o.tasks for o in started.outcomes]
        # Airflow 2.10 writes a success-callback request for each task ended from a trigger that nothing fetches:
        # the provider's success event sends none. 3.x's dag-processor takes its own (printed, not asserted).
        if stack.major < 3:
            assert started.callback_rows == 0
    parked = next((r for r in runs if r.strategy == "parked"), None)
    if parked is not None:  # no worker, no trigger, none failed, each case within its p95 goal (issue 55)
        failed = {f"{o.case} ({o.ds})": o.failures for o in parked.outcomes if o.failures}
        assert failed == {}, f"{failed}\n(logs in {deployment.logs})"
        assert [o.worker_tries for o in parked.outcomes] == [0] * len(parked.outcomes)
        assert [o.by_trigger for o in parked.outcomes] == [0] * len(parked.outcomes)
        assert all(o.failures == [] and o.worker_tries == o.by_trigger == 0 for o in parked.again), parked.again
        goal = parked_goal(parked.sensors)
        if goal is not None:
            measured = {
                case: [
                    (round(p(o.to_end, 0.95), 2), round(o.elsewhere, 2))
                    for o in [*parked.outcomes, *parked.again]
                    if o.case == case
                ]
                for case in CASES
                if best_p95(parked, case) > goal
            }
            crowded = {case: runs for case, runs in measured.items() if min(e for _, e in runs) >= BUSY_ELSEWHERE}
            for case, seen in crowded.items():
                print(f"parked, {case}: p95 goal {goal} s not held, the machine busy elsewhere (p95 s, cores): {seen}")
            missed = {case: runs for case, runs in measured.items() if case not in crowded}
            assert missed == {}, (
                f"end p95 above {goal} s at {parked.sensors} parked sensors (p95 s, cores elsewhere): {missed}"
            )


def parked_goal(sensors: int) -> float | None:
    """Issue 55's end p95 goal for ``sensors`` parked sensors, None above the largest size it names."""
    return next((seconds for size, seconds in PARKED_GOALS if sensors <= size), None)


def best_p95(run: ScaleRun, case: str) -> float:
    """The lowest end p95 of ``case`` over the run's outcomes and those measured again."""
    return min(p(o.to_end, 0.95) for o in [*run.outcomes, *run.again] if o.case == case)


def callback_rows(deployment: Deployment) -> int:
    """The rows of Airflow's table of callback requests."""
    return int(deployment.stack.rows(f"SELECT count(*) FROM {CALLBACKS[deployment.stack.major]}")[0][0])


@pytest.mark.timeout(1200)
def test_airflows_own_sensors_run_through_smartsensor_and_share_checks(deployment: Deployment) -> None:
    ds = POLICY_DAYS[0]
    run_ids = deployment.stack.trigger_many([*policy.TEAM_DAGS, "policy_tagged_off"], ds)
    routed = {(d, t) for d in policy.TEAM_DAGS for t in policy.ROUTED}
    policy.wait_deferred(deployment, run_ids, routed)
    deployment.landing.land(ds)
    policy.wait_ended(deployment, run_ids, f"every sensor of {ds} ended")
    seen = policy.tasks_of(deployment, run_ids)
    assert {k: s for k, (s, _, _) in seen.items() if s != "success"} == {}, seen
    for key in routed:  # what the UI shows; 2.10 names a try that no worker ran by its serialized class
        names = {f"{policy.class_of(key[1])} via smartsensor"} | (
            {policy.class_of(key[1])} if deployment.stack.major < 3 else set()
        )
        assert seen[key][1] in names, (key, seen[key])
    for key in [("policy_team_0", "opted_out"), ("policy_tagged_off", "named")]:
        assert seen[key][1] == "NamedHivePartitionSensor", (key, seen[key])
    hashes = policy.registered(deployment, run_ids)
    assert set(hashes) == routed  # the opted-out tasks and the range filter checked on their own
    (team_0_run,) = [
        r
        for (r,) in deployment.stack.rows(
            "SELECT run_id FROM dag_run WHERE dag_id = 'policy_team_0' AND run_id IN :runs",
            expanding=["runs"],
            runs=run_ids,
        )
    ]
    assert "runs as Airflow's own sensor" in policy.task_logs(deployment, "policy_team_0", team_0_run, "range")
    # Nine waits, two checks: by name and by metastore name are one check, by filter the other.
    assert len(set(hashes.values())) == 2, hashes
    assert hashes[("policy_team_0", "named")] == hashes[("policy_team_2", "metastore")]


@pytest.mark.timeout(1200)
def test_with_the_service_out_of_reach_the_tasks_still_succeed(deployment: Deployment) -> None:
    ds = POLICY_DAYS[1]
    (run_id,) = deployment.stack.trigger_many(["policy_valve"], ds)
    valve = {("policy_valve", t) for t in ("named", "filter", "drop_in")}
    policy.wait_deferred(deployment, [run_id], valve)
    deployment.stop_serve()
    try:
        # A run that starts while the service is down: its tries ride out the grace while registering.
        (late_run,) = deployment.stack.trigger_many(["policy_valve"], POLICY_DAYS[4])
        for day in (ds, POLICY_DAYS[4]):
            for table in TABLES:  # no landing signal: nobody would hear it
                deployment.landing.metastore.land(table, day)
        for run in (run_id, late_run):  # one run at a time: tasks_of keys by (dag_id, task_id)
            policy.wait_ended(deployment, [run], f"the valve's sensors of {run} ended (grace {policy.GRACE} s)")
            seen = policy.tasks_of(deployment, [run])
            assert {k: (s, tries) for k, (s, _, tries) in seen.items()} == {k: ("success", 1) for k in valve}, seen
            log = policy.task_logs(deployment, "policy_valve", run)
            assert log.count("checks on its own as Airflow's sensor would") >= len(valve), log[-3000:]
    finally:
        deployment.start_serve()
    # The service is back: a new try uses it again.
    ds = POLICY_DAYS[2]
    (run_id,) = deployment.stack.trigger_many(["policy_valve"], ds)
    policy.wait_deferred(deployment, [run_id], valve)
    deployment.landing.land(ds)
    policy.wait_ended(deployment, [run_id], f"the valve's sensors of {ds} ended")
    assert {s for s, _, _ in policy.tasks_of(deployment, [run_id]).values()} == {"success"}
    assert set(policy.registered(deployment, [run_id])) == valve


# Last of the module: it restarts Airflow with the policy off.
@pytest.mark.timeout(1200)
def test_with_the_policy_off_the_same_dags_run_as_plain_airflow(deployment: Deployment) -> None:
    restarted = datetime.now(timezone.utc)
    # The policy runs where DAG files are parsed: the dag-processor (2.10's scheduler parses them itself) and the task
    # processes of the scheduler's LocalExecutor, which inherit its environment. The api-server and the triggerer
    # parse none: they keep running.
    parsers = [name for name in ("dag-processor", "scheduler") if name in deployment.stack.components()]
    deployment.restart_airflow(*parsers, AIRFLOW__SMARTSENSOR__USE_SMART_SENSOR="False")
    deployment.stack.wait(  # parsed again without the policy: the operator names are Airflow's again
        "the team DAGs serialized again",
        lambda: all(policy.serialized_since(deployment, d, restarted) for d in policy.TEAM_DAGS),
        timeout=600,
    )
    ds = POLICY_DAYS[3]
    deployment.landing.land(ds)
    run_ids = deployment.stack.trigger_many(policy.TEAM_DAGS, ds)
    policy.wait_ended(deployment, run_ids, f"every sensor of {ds} ended")
    seen = policy.tasks_of(deployment, run_ids)
    assert policy.registered(deployment, run_ids) == {}
    assert {k: name for k, (_, name, _) in seen.items()} == {k: policy.class_of(k[1]) for k in seen}
    states = {k: s for k, (s, _, _) in seen.items()}
    # Airflow's own MetastorePartitionSensor reads the metastore's MySQL database, which this deployment lacks:
    # it fails as it would on any Airflow without that connection; the others find their partitions.
    assert states == {k: "failed" if k[1] == "metastore" else "success" for k in seen}, states
