#!/usr/bin/env bash
# Sourced by test.sh: one cached virtualenv per pinned Airflow version, each with smartsensor's provider
# (providers/airflow) beside it, for the end-to-end tests in tests/airflow. Airflow cannot share .venv:
# 2.10 pins SQLAlchemy < 2, smartsensor needs 2. The venvs live outside the checkout, so every clone reuses
# them: ${SMARTSENSOR_CACHE:-~/.cache/smartsensor}/airflow-<version>. First build ~20-120 s per version
# (pip cache warm or cold); afterwards only a changed provider is re-installed (~3 s). Each venv also gets the
# drivers for an Airflow database on PostgreSQL, as production runs it (psycopg2; asyncpg for 3.x's api-server),
# and statsd, for the scale test's scheduler loop times (Airflow's own metrics); and hypothesis, for the stateful
# model of parked tries that runs inside Airflow (tests/airflow/inside/parking_model.py).

AIRFLOW_VERSIONS="${SMARTSENSOR_AIRFLOW_VERSIONS:-2.10.5 3.3.2}"
AIRFLOW_CACHE="${SMARTSENSOR_CACHE:-$HOME/.cache/smartsensor}"
AIRFLOW_DRIVERS="psycopg2-binary>=2.9,<3 asyncpg>=0.29,<1 statsd>=4,<5 hypothesis>=6.100,<7"
# Airflow's own Hive sensors, for the cluster policy's tests (DAG files that import them unchanged) and the
# safety valve (a sensor that checks through the Hive hook when the service is out of reach). pip picks the
# newest release that the pinned Airflow admits.
AIRFLOW_PROVIDERS="apache-airflow-providers-apache-hive"

# Where this checkout's copy of providers/airflow is installed for Airflow <version> (scripts/airflow/stack.py
# names the same folder).
airflow_provider_overlay() {
  echo "$ROOT/.airflow-provider/$1"
}

ensure_airflow_venvs() {
  local version venv want
  want="$( (cd "$ROOT/providers/airflow" && find . -name '*.py' -o -name pyproject.toml | sort | xargs cat) | sha256sum | cut -d' ' -f1)"
  for version in $AIRFLOW_VERSIONS; do
    venv="$AIRFLOW_CACHE/airflow-$version"
    if [ ! -f "$venv/.airflow-installed" ]; then
      log "building the Airflow $version venv for tests/airflow in $venv (first time: 1-2 min)"
      rm -rf "$venv"
      "$PYTHON_BIN" -m venv "$venv"
      "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1
      "$venv/bin/python" -m pip install -q "apache-airflow==$version" 2>&1 | grep -v '^WARNING: Location' >&2 || true
      "$venv/bin/python" -c "import airflow" || { log "installing apache-airflow==$version failed"; exit 1; }
      touch "$venv/.airflow-installed"
    fi
    if [ "$(cat "$venv/.drivers-installed" 2>/dev/null)" != "$AIRFLOW_DRIVERS" ]; then
      "$venv/bin/python" -m pip install -q $AIRFLOW_DRIVERS 2>&1 | grep -v '^WARNING: Location' >&2 || true
      "$venv/bin/python" -c "import psycopg2, asyncpg, statsd, hypothesis" || { log "installing $AIRFLOW_DRIVERS into $venv failed"; exit 1; }
      echo "$AIRFLOW_DRIVERS" > "$venv/.drivers-installed"
    fi
    if [ "$(cat "$venv/.providers-installed" 2>/dev/null)" != "$AIRFLOW_PROVIDERS" ]; then
      "$venv/bin/python" -m pip install -q "apache-airflow==$version" $AIRFLOW_PROVIDERS 2>&1 | grep -v '^WARNING: Location' >&2 || true
      "$venv/bin/python" -c "import airflow.providers.apache.hive.sensors.named_hive_partition" \
        || { log "installing $AIRFLOW_PROVIDERS into $venv failed"; exit 1; }
      echo "$AIRFLOW_PROVIDERS" > "$venv/.providers-installed"
    fi
    if [ -f "$venv/.provider-installed" ]; then
      # Once: the provider no longer lives in the shared venv, where two checkouts running at once (a CI clone and
      # a working tree) replaced each other's copy mid-run.
      "$venv/bin/python" -m pip uninstall -q -y smartsensor-airflow >/dev/null 2>&1 || true
      rm -f "$venv/.provider-installed"
    fi
    # This checkout's provider, in a folder of its own that scripts/airflow/stack.airflow_env puts on PYTHONPATH
    # (a copy, not editable: Airflow finds it by its entry point, as a provider installed by pip).
    overlay="$(airflow_provider_overlay "$version")"
    if [ "$(cat "$overlay/.installed" 2>/dev/null)" != "$want" ]; then
      rm -rf "$overlay"
      mkdir -p "$overlay"
      "$venv/bin/python" -m pip install -q --no-deps --target "$overlay" "$ROOT/providers/airflow" \
        >"$overlay.log" 2>&1 \
        || { cat "$overlay.log" >&2; log "installing providers/airflow into $overlay failed"; exit 1; }
      echo "$want" > "$overlay/.installed"
    fi
  done
  export SMARTSENSOR_AIRFLOW_VENVS=""
  for version in $AIRFLOW_VERSIONS; do
    SMARTSENSOR_AIRFLOW_VENVS="$SMARTSENSOR_AIRFLOW_VENVS $AIRFLOW_CACHE/airflow-$version"
  done
  export SMARTSENSOR_AIRFLOW_VENVS="${SMARTSENSOR_AIRFLOW_VENVS# }"
}
