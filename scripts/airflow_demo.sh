#!/usr/bin/env bash
# One command to a running Airflow 3 + smartsensor stack: a throwaway PostgreSQL (smartsensor's metadata DB), a
# Hive metastore service, `smartsensor serve` and leased workers, a real Airflow 3.3.2 (api-server, dag-processor,
# scheduler, triggerer) with the provider installed, the DAGs of scripts/airflow/dags and the landing
# pipeline; prints Airflow's task states against the expected ones and the figures, then stops everything.
# First run builds .venv and the Airflow venv (~/.cache/smartsensor, a few minutes). Arguments go to
# scripts/airflow/demo.py: --sensors N, --partitions P, --every S, --keep, --deadline S, --home DIR (see --help).
# --policy runs the same demo with the DAG files left as Airflow's own (its Hive sensors' imports) and the cluster
# policy (smartsensor_airflow.policy.task_policy in AIRFLOW_HOME/config/airflow_local_settings.py) routing them.
# --assets (with or without --policy) also schedules on the landings themselves (issue 44, docs/airflow.md "Schedule
# on landings"): the workers run with [landings] publish on, posting each landed partition to the stack's Airflow as
# an asset event with its partition key; the DAGs of scripts/airflow/dags/assets are PartitionedAssetTimetable
# consumers of hive://127.0.0.1:<metastore port>/demo/events and …/demo/clicks, whose task reads
# {{ dag_run.partition_key }}, and the pipeline also lands in demo.raw_events, an asset no DAG is scheduled on. The
# summary adds, per consumer, the partitions landed, the runs started and their keys, landed -> posted and landed ->
# run queued (p50 / max), what reached demo.raw_events (nothing), and the outbox (`smartsensor status --json`); it
# exits 1 when a partition started no run, or two.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export SMARTSENSOR_AIRFLOW_VERSIONS="${SMARTSENSOR_DEMO_AIRFLOW_VERSION:-3.3.2}"  # build only the demo's version
source "$HERE/env.sh"
source "$HERE/pg.sh"
source "$HERE/airflow_env.sh"

ensure_java
ensure_venv
ensure_airflow_venvs
trap stop_pg EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
start_pg
cd "$ROOT"
# Not exec: this shell stays to stop PostgreSQL when the driver ends, however it ends (the driver stops the rest).
python -m scripts.airflow.demo --db-url "$SMARTSENSOR_TEST_PG_URL" "$@"
