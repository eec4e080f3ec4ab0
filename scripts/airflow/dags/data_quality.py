"""Data quality: the same hourly partitions of demo.events as marketing, spelled `Demo.Events` (20%). Names are
case-insensitive in Hive, so smartsensor checks them as the same partitions: no extra metastore calls."""

from datetime import datetime

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

from demo_scale import HOURS, names

# from airflow.providers.apache.hive.sensors.named_hive_partition import NamedHivePartitionSensor
from smartsensor_airflow.sensors import NamedHivePartitionSensor

CHECKS = names(0.20, ["row_count", "null_ids", "freshness", "schema_drift", "duplicates"])

with DAG("data_quality", schedule=None, start_date=datetime(2026, 11, 1), catchup=False, tags=["team:quality"]):
    for hour in range(HOURS):
        waits = [
            NamedHivePartitionSensor(
                task_id=f"{check}_h{hour:02d}",
                partition_names=[f"Demo.Events/ds={{{{ ds }}}}/hr={hour:02d}"],
                poke_interval=10,
                timeout=1800,
            )
            for check in CHECKS
        ]
        waits >> EmptyOperator(task_id=f"score_h{hour:02d}")
