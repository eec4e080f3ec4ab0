"""The repository's own tools, by purpose: ``bench/`` (the benchmarks), ``demo/`` (the demo without Airflow and its
landing pipeline), ``airflow/`` (a real Airflow beside smartsensor: the quickstart, and the runner tests/airflow
share). Not installed with the package. The shell entry points beside this file run them as modules from the
repository root (``python -m scripts.bench.bench``), so they import each other and smartsensor by full name."""
