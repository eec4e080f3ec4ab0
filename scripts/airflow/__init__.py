"""A real Airflow beside smartsensor: ``stack`` runs Airflow's components (shared by tests/airflow and the
quickstart), ``demo`` is the quickstart (./scripts/airflow_demo.sh), ``report`` its verdicts, ``dags/`` its DAGs."""
