"""Finance: hourly checks on demo.clicks with the Hive provider's HivePartitionSensor and a partition filter (20%)."""

from datetime import datetime

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, task

from demo_scale import HOURS, names

# from airflow.providers.apache.hive.sensors.hive_partition import HivePartitionSensor
from smartsensor_airflow.sensors import HivePartitionSensor

CHECKS = names(0.20, ["revenue", "fraud", "refunds", "fees", "payouts"])

with DAG("finance_hourly", schedule=None, start_date=datetime(2026, 11, 1), catchup=False, tags=["team:finance"]):

    @task
    def close_books() -> str:
        return "books closed"

    done = close_books()
    for hour in range(HOURS):
        waits = [
            HivePartitionSensor(
                task_id=f"{check}_h{hour:02d}",
                schema="demo",
                table="clicks",
                partition=f"ds='{{{{ ds }}}}' AND hr='{hour:02d}'",
                poke_interval=5,
                timeout=1800,
            )
            for check in CHECKS
        ]
        waits >> EmptyOperator(task_id=f"reconcile_h{hour:02d}") >> done
