#!/usr/bin/env bash
# The checks .ci/run runs before the tests: ruff (lint, then the format check) and mypy, as configured in
# pyproject.toml, over smartsensor/, sensors/, schema/, providers/, scripts/ and tests/. Runs all three and fails if
# any fails. To fix what ruff can: .venv/bin/ruff check --fix . && .venv/bin/ruff format .
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/env.sh"

ensure_venv  # the pinned ruff and mypy come with the test extra
cd "$ROOT"

# mypy has no package_dir: sensors/, schema/ and the provider's hive_filter/ and wire/ install as smartsensor.sensors,
# smartsensor.schema, smartsensor.hive_filter and smartsensor.wire, so they are
# linked where mypy_path finds them under those names (build/ is ignored by git).
view=build/typecheck/smartsensor
mkdir -p "$view"
ln -sfn ../../../sensors "$view/sensors"
ln -sfn ../../../schema "$view/schema"
ln -sfn ../../../providers/airflow/smartsensor_airflow/hive_filter "$view/hive_filter"
ln -sfn ../../../providers/airflow/smartsensor_airflow/wire "$view/wire"

status=0
log "ruff check"
ruff check --output-format concise . || status=1
log "ruff format --check"
ruff format --check . || status=1
log "mypy"
mypy || status=1
exit $status
