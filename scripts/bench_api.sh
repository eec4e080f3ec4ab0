#!/usr/bin/env bash
# Run scripts/bench/api.py (load on `smartsensor serve`; as the module scripts.bench.api, from the repository root)
# in the project venv, on a throwaway PostgreSQL 15 that is started here and stopped on exit. With --sqlite first,
# or with --db-url, no PostgreSQL is started. Other arguments go to it, e.g.
#   ./scripts/bench_api.sh --json bench-results/api.json
#   ./scripts/bench_api.sh --sqlite --tasks 2000 --poll-seconds 10
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/env.sh"
ensure_venv
extra=()
if [ "${1:-}" = "--sqlite" ]; then
  shift
elif [[ " $* " != *" --db-url "* && " $* " != *" --db-url="* ]]; then
  source "$HERE/pg.sh"
  trap stop_pg EXIT INT TERM
  start_pg
  extra=(--db-url "$SMARTSENSOR_TEST_PG_URL")
fi
cd "$ROOT"
python -m scripts.bench.api "${extra[@]}" "$@"
