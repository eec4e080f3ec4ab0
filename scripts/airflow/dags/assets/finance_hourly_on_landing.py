"""Finance, scheduled on the landing itself (scripts/airflow/demo.py --assets): finance_hourly without its
sensors. One run per partition of demo.clicks that lands (smartsensor's workers publish it as an asset event with
its partition key), reading which one from ``dag_run.partition_key``."""

import os
from datetime import datetime

from airflow.sdk import DAG, Asset, PartitionedAssetTimetable, task

# hive://host:port/ of the demo's metastore (the driver sets it; smartsensor's [landings] asset_uri_prefix)
HIVE = os.environ.get("DEMO_HIVE_ASSETS", "hive://metastore:10000/")
CLICKS = Asset(f"{HIVE}demo/clicks")

with DAG(
    "finance_hourly_on_landing",
    schedule=PartitionedAssetTimetable(assets=CLICKS),
    start_date=datetime(2026, 11, 1),
    tags=["team:finance", "schedule-on-landing"],
):

    @task
    def reconcile(partition: str) -> str:
        ds, hr = partition.split("|")
        return f"finance reconciled {partition} ({ds} {hr}:00)"

    reconcile("{{ dag_run.partition_key }}")
