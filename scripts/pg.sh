#!/usr/bin/env bash
# Start a throwaway PostgreSQL 15 on 127.0.0.1 (sourced). Sets SMARTSENSOR_TEST_PG_URL and PG_TMP;
# call stop_pg to stop and delete it. initdb refuses root, so as root it runs as user `postgres`.
set -euo pipefail

find_pg_bin() {
  local d
  for d in /usr/lib/postgresql/15/bin /usr/lib/postgresql/*/bin /usr/local/pgsql/bin; do
    if [ -x "$d/initdb" ]; then echo "$d"; return 0; fi
  done
  if command -v initdb >/dev/null; then dirname "$(command -v initdb)"; return 0; fi
  return 1
}

start_pg() {
  local bin port run_as=()
  if ! bin="$(find_pg_bin)"; then
    log "PostgreSQL binaries not found: installing postgresql-15"
    as_root apt-get update -qq && as_root apt-get install -y -qq postgresql-15 >/dev/null
    bin="$(find_pg_bin)"
  fi
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    run_as=(runuser -u postgres --)
  fi
  PG_TMP="$(mktemp -d /tmp/smartsensor-pg.XXXXXX)"
  chmod 755 "$PG_TMP"
  [ "$(id -u)" = 0 ] && chown postgres "$PG_TMP"
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  "${run_as[@]}" "$bin/initdb" -D "$PG_TMP/data" -U postgres --auth=trust --no-sync -E UTF8 >"$PG_TMP/initdb.log" 2>&1 \
    || { cat "$PG_TMP/initdb.log" >&2; return 1; }
  local opts="-c listen_addresses=127.0.0.1 -p $port -k $PG_TMP -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=500"
  "${run_as[@]}" "$bin/pg_ctl" -D "$PG_TMP/data" -l "$PG_TMP/server.log" -w -t 30 start -o "$opts" >/dev/null \
    || { cat "$PG_TMP/server.log" >&2; return 1; }
  export SMARTSENSOR_TEST_PG_OPTS="$opts"
  PG_BIN="$bin"; PG_RUN_AS=("${run_as[@]}")
  "${run_as[@]}" "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -q -c "CREATE DATABASE smartsensor_test" >/dev/null
  export SMARTSENSOR_TEST_PG_URL="postgresql+psycopg2://postgres@127.0.0.1:$port/smartsensor_test"
  export SMARTSENSOR_TEST_PG_ADMIN_URL="postgresql+psycopg2://postgres@127.0.0.1:$port/postgres"
  export SMARTSENSOR_TEST_PG_DATA="$PG_TMP/data" SMARTSENSOR_TEST_PG_BIN="$bin"
  log "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port (data $PG_TMP)"
}

stop_pg() {
  if [ -n "${PG_TMP:-}" ] && [ -d "$PG_TMP/data" ]; then
    "${PG_RUN_AS[@]}" "$PG_BIN/pg_ctl" -D "$PG_TMP/data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$PG_TMP"
  fi
}
