#!/usr/bin/env bash
# Run the whole suite: venv, a throwaway PostgreSQL 15 and MariaDB (standing in for MySQL), one local SparkSession,
# Chromium for the status page, faketime for the clock-step test, pytest.
# Extra arguments go to pytest (e.g. ./scripts/test.sh -k config -x).
# --fast: the inner loop while working (unit and the integration tests marked neither slow nor spark; no Airflow
# venvs, no SparkSession, no process or Airflow tiers), e.g. ./scripts/test.sh --fast -x.
# --all: the whole suite, the extended tier too (tests/support/tier.py: the older Airflow version's runs, scale,
# benchmarks, the Airflow demo, the several-host matrix, bigger example counts; about 25-30 minutes here). Without a
# flag, CI's run: every test but the extended tier (.ci/run).
# The tests run on SMARTSENSOR_TEST_WORKERS pytest-xdist workers (default 4: most of a test's time is waiting on the
# processes it started); tests/conftest.py keeps the SparkSession's tests, and the tests sharing a module's metastore
# service or Airflow deployment, in one worker each. SMARTSENSOR_TEST_WORKERS=0 runs them in this process (-x, pdb).
set -euo pipefail
FAST=0
case "${1:-}" in
  --fast) FAST=1; shift ;;
  --all) export SMARTSENSOR_TIER=all; shift ;;
esac
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/env.sh"
source "$HERE/pg.sh"
source "$HERE/mysql.sh"
source "$HERE/airflow_env.sh"

ensure_java
ensure_chromium
ensure_pg_jdbc
ensure_faketime
ensure_venv
[ "$FAST" = 1 ] || ensure_airflow_venvs
trap 'stop_pg; stop_mysql' EXIT INT TERM
start_pg
start_mysql
cd "$ROOT"
# Every JVM the tests start (the SparkSession, Spark subprocesses, the metastore services) compiles with C1 only and
# collects with one thread: a test's JVM lives seconds to minutes, and C2's compiler threads and parallel GC cost it
# about half its CPU (scripts/bench/jvm_options.py: a Spark session with Hive, 20 partitions, 0.59 of the CPU). No
# behaviour changes; the suite is CPU-bound on 2 cores. They also skip verifying the bytecode of the classes they load
# from jars (pyspark's own: Spark, Hive, DataNucleus) and keep no perf-data file: 0.50 of the defaults' CPU against
# 0.56 without (the same bench). SMARTSENSOR_TEST_JAVA_OPTS="" runs them as the defaults do.
export JAVA_TOOL_OPTIONS="${SMARTSENSOR_TEST_JAVA_OPTS--XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:+UnlockDiagnosticVMOptions -XX:-BytecodeVerificationRemote -XX:-UsePerfData}"
# Bytecode caches: an environment that sets PYTHONDONTWRITEBYTECODE (this machine's does) makes every Python process
# the suite starts (CLI calls, workers, serve, each pytest worker's assertion rewriting) compile the checkout's modules
# again. The run writes them (__pycache__, gitignored).
unset PYTHONDONTWRITEBYTECODE
workers=(-n "${SMARTSENSOR_TEST_WORKERS:-4}" --dist loadgroup)
# The machine's CPU while the tests ran (every process on it, not only the suite's): busy and total jiffies.
cpu_jiffies() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }
read -r busy0 total0 < <(cpu_jiffies)
started=$SECONDS
set +e
if [ "$FAST" = 1 ]; then
  python -m pytest -p no:cacheprovider "${workers[@]}" -m "not slow and not spark" tests/unit tests/integration "$@"
else
  [ "${SMARTSENSOR_TIER:-ci}" = all ] || log "CI's tier: the tests marked extended are left out (./scripts/test.sh --all runs them)"
  python -m pytest -p no:cacheprovider "${workers[@]}" "$@"
fi
status=$?
set -e
read -r busy1 total1 < <(cpu_jiffies)
# The database servers' share (their own and their ended backends' CPU; the suite's accounting counts only the test
# processes and their descendants): where the rest of the busy core-seconds went.
server_cpu() { [ -r "/proc/$1/stat" ] && awk -v hz="$(getconf CLK_TCK)" '{printf "%.0f", ($14+$15+$16+$17)/hz}' "/proc/$1/stat" || echo "?"; }
log "database servers' CPU seconds: PostgreSQL $(server_cpu "$(head -1 "$PG_TMP/data/postmaster.pid" 2>/dev/null)"), MariaDB $(server_cpu "$(cat "$MYSQL_TMP/mysqld.pid" 2>/dev/null)")"
log "machine CPU while the tests ran: $(awk -v b=$((busy1 - busy0)) -v t=$((total1 - total0)) -v s=$((SECONDS - started)) \
  -v n="$(nproc)" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.0f%% busy over %d s (%.0f of %.0f core-seconds, %d cores)", t ? 100 * b / t : 0, s, b / hz, t / hz, n }')"
exit $status
