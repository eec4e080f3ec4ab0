"""An asset nobody is scheduled on (scripts/airflow/demo.py --assets): the pipeline also lands each hour in
demo.raw_events, and this DAG names the table as its outlet, so Airflow knows the asset; but no DAG is scheduled on
it, so smartsensor does not watch it and publishes nothing for it. Never triggered in the demo."""

import os
from datetime import datetime

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset

HIVE = os.environ.get("DEMO_HIVE_ASSETS", "hive://metastore:10000/")

with DAG("raw_events_export", schedule=None, start_date=datetime(2026, 11, 1), tags=["team:platform"]):
    EmptyOperator(task_id="export", outlets=[Asset(f"{HIVE}demo/raw_events")])
