"""Marketing, scheduled on the landing itself (scripts/airflow/demo.py --assets): marketing_reports without its
sensors. No task waits: smartsensor's workers publish each partition of demo.events that lands as an asset event
with its partition key (``2026-11-22|03`` for ``ds=2026-11-22/hr=03``), and Airflow starts one run per partition,
which reads it from ``dag_run.partition_key`` where the sensor's template read ``ds``."""

import os
from datetime import datetime

from airflow.sdk import DAG, Asset, PartitionedAssetTimetable, task

# hive://host:port/ of the demo's metastore (the driver sets it; smartsensor's [landings] asset_uri_prefix)
HIVE = os.environ.get("DEMO_HIVE_ASSETS", "hive://metastore:10000/")
EVENTS = Asset(f"{HIVE}demo/events")

with DAG(
    "marketing_reports_on_landing",
    schedule=PartitionedAssetTimetable(assets=EVENTS),
    start_date=datetime(2026, 11, 1),
    tags=["team:marketing", "schedule-on-landing"],
):

    @task
    def report(partition: str) -> str:
        ds, hr = partition.split("|")
        return f"marketing report for {partition} ({ds} {hr}:00) published"

    report("{{ dag_run.partition_key }}")
