"""The demo without Airflow (./scripts/demo.sh): ``demo`` drives it, ``pipeline`` lands the partitions, ``dags/``
holds the DAG files it submits."""
