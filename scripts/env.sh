#!/usr/bin/env bash
# Shared set-up, sourced by test.sh, demo.sh and bench.sh: make sure Java 17+ exists (and, for test.sh,
# Chromium and faketime; for test.sh and bench.sh --postgres, the PostgreSQL JDBC driver), then create or reuse
# .venv with the package, its Spark extra and its test extras installed (re-installed when setup.cfg changes).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SMARTSENSOR_VENV:-$ROOT/.venv}"
PYTHON_BIN="${PYTHON:-python3}"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else return 1; fi; }

ensure_java() {
  if command -v java >/dev/null 2>&1; then return 0; fi
  log "java not found: installing openjdk-17-jre-headless (PySpark needs Java 17+)"
  as_root apt-get update -qq && as_root apt-get install -y -qq openjdk-17-jre-headless >/dev/null \
    || { log "cannot install Java; install a JDK 17+ and re-run"; exit 1; }
}

# Debian's headless Chromium renders the status page in tests/process/test_status_page.py. Not fatal here:
# without it that test fails, saying so, and the rest of the suite still runs.
ensure_chromium() {
  if command -v chromium >/dev/null 2>&1; then return 0; fi
  log "chromium not found: installing Debian's chromium (the status page test renders the page with it)"
  { as_root apt-get install -y -qq chromium >/dev/null 2>&1 \
      || { as_root apt-get update -qq && as_root apt-get install -y -qq chromium >/dev/null; }; } \
    || log "cannot install chromium: tests/process/test_status_page.py will fail until it is installed"
}

# The PostgreSQL JDBC driver, for the metastore service on PostgreSQL ([metastore] database_url): the tests'
# pg_service and the bench with --postgres. Not fatal here: without it `metastore start` on PostgreSQL says so.
PG_JDBC_JAR=/usr/share/java/postgresql.jar
ensure_pg_jdbc() {
  if [ -f "$PG_JDBC_JAR" ]; then return 0; fi
  log "$PG_JDBC_JAR not found: installing libpostgresql-jdbc-java (the metastore service on PostgreSQL needs it)"
  { as_root apt-get install -y -qq libpostgresql-jdbc-java >/dev/null 2>&1 \
      || { as_root apt-get update -qq && as_root apt-get install -y -qq libpostgresql-jdbc-java >/dev/null; }; } \
    || log "cannot install libpostgresql-jdbc-java: the metastore service cannot run on PostgreSQL until it is installed"
}

# libfaketime steps the wall clock of one process (not the machine's) for tests/process/test_clock_step.py: a worker
# whose clock NTP steps an hour back or forward. Not fatal here: without it that test fails, saying so.
ensure_faketime() {
  if compgen -G "/usr/lib/*/faketime/libfaketime.so.1" >/dev/null; then return 0; fi
  log "libfaketime not found: installing faketime (the clock-step test steps a worker's wall clock with it)"
  { as_root apt-get install -y -qq faketime >/dev/null 2>&1 \
      || { as_root apt-get update -qq && as_root apt-get install -y -qq faketime >/dev/null; }; } \
    || log "cannot install faketime: tests/process/test_clock_step.py will fail until it is installed"
}

ensure_venv() {
  local stamp="$VENV/.smartsensor-installed" want
  want="$(cat "$ROOT/setup.cfg" "$ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1)"
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating virtualenv $VENV"
    "$PYTHON_BIN" -m venv "$VENV"
  fi
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    log "installing smartsensor and its dependencies into $VENV (first time: ~1 min, PySpark is large)"
    "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
    "$VENV/bin/python" -m pip install -q -e "$ROOT[test,spark]" >"$VENV/install.log" 2>&1 \
      || { cat "$VENV/install.log" >&2; log "installing smartsensor into $VENV failed"; exit 1; }
    echo "$want" > "$stamp"
  fi
  export PATH="$VENV/bin:$PATH"
  export SPARK_LOCAL_IP=127.0.0.1
  export PYSPARK_PYTHON="$VENV/bin/python"
}
