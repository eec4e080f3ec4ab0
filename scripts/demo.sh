#!/usr/bin/env bash
# The main job on the embedded defaults: SQLite + a local Hive metastore service + local Spark.
# Installs what it needs on first run (.venv, ~1 min). Arguments go to scripts/demo/demo.py (run as the module
# scripts.demo.demo, from the repository root): --workers, --every, --home.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/env.sh"
ensure_java
ensure_venv
cd "$ROOT"
exec python -m scripts.demo.demo "$@"
