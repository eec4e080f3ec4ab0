#!/usr/bin/env bash
# Run the whole suite: venv, a throwaway PostgreSQL 15 and MariaDB (standing in for MySQL), one local SparkSession,
# Chromium for the status page, pytest.
# Extra arguments go to pytest (e.g. ./scripts/test.sh -k config -x).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/env.sh"
source "$HERE/pg.sh"
source "$HERE/mysql.sh"
source "$HERE/airflow_env.sh"

ensure_java
ensure_chromium
ensure_pg_jdbc
ensure_venv
ensure_airflow_venvs
trap 'stop_pg; stop_mysql' EXIT INT TERM
start_pg
start_mysql
cd "$ROOT"
set +e
python -m pytest -p no:cacheprovider "$@"
status=$?
set -e
exit $status
