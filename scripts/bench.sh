#!/usr/bin/env bash
# Run the benchmark, scripts/bench/bench.py (as the module scripts.bench.bench, from the repository root), in the
# project venv. With --postgres first, a throwaway PostgreSQL 15 is started for the metadata DB (stopped on exit),
# and the Hive metastore service keeps its tables in a database of its own there too (--metastore derby: not). That
# server loads pg_stat_statements (when its library is installed), so the bench can tell what the metastore's
# database executed per round. Other arguments go to the benchmark, e.g.
#   ./scripts/bench.sh --postgres --workload W1 --json bench-results/w1.json
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/env.sh"
ensure_java
ensure_venv
extra=()
if [ "${1:-}" = "--postgres" ]; then
  shift
  source "$HERE/pg.sh"
  ensure_pg_jdbc
  trap stop_pg EXIT INT TERM
  start_pg
  if [ -f "$(dirname "$PG_BIN")/lib/pg_stat_statements.so" ]; then
    # A preloaded library needs a restart (pg_ctl restart keeps the options the server was started with); its
    # own settings are known only once it is loaded.
    psql_pg() { "${PG_RUN_AS[@]}" "$PG_BIN/psql" -h 127.0.0.1 -p "$(sed -n 4p "$PG_TMP/data/postmaster.pid")" \
      -U postgres -q -v ON_ERROR_STOP=1 "$@" >/dev/null; }
    psql_pg -c "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'"
    "${PG_RUN_AS[@]}" "$PG_BIN/pg_ctl" -D "$PG_TMP/data" -l "$PG_TMP/server.log" -w -t 30 restart >/dev/null \
      || { cat "$PG_TMP/server.log" >&2; exit 1; }
    psql_pg -c "ALTER SYSTEM SET pg_stat_statements.track_planning = on" -c "SELECT pg_reload_conf()"
  else
    log "no pg_stat_statements library under $(dirname "$PG_BIN")/lib: the metastore database's time is not measured"
  fi
  extra=(--db-url "$SMARTSENSOR_TEST_PG_URL")
fi
cd "$ROOT"
python -m scripts.bench.bench "${extra[@]}" "$@"
