#!/usr/bin/env bash
# Run the benchmark, scripts/bench/bench.py (as the module scripts.bench.bench, from the repository root), in the
# project venv. With --postgres first, a throwaway PostgreSQL 15 is started for the metadata DB (stopped on exit),
# and the Hive metastore service keeps its tables in a database of its own there too (--metastore derby: not).
# Other arguments go to the benchmark, e.g.
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
  extra=(--db-url "$SMARTSENSOR_TEST_PG_URL")
fi
cd "$ROOT"
python -m scripts.bench.bench "${extra[@]}" "$@"
