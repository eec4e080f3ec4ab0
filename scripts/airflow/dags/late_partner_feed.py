"""A partner feed that does not arrive today (10%): its sensors end by their own timeout, half of them soft_fail
(skipped), the others failed, and what depends on them does not run."""

from datetime import datetime

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

from demo_scale import names

# from airflow.providers.apache.hive.sensors.hive_partition import HivePartitionSensor
from smartsensor_airflow.sensors import HivePartitionSensor

FEEDS = names(0.10, ["orders", "returns", "stock", "prices"], per_hour=False)

with DAG("late_partner_feed", schedule=None, start_date=datetime(2026, 11, 1), catchup=False, tags=["team:partners"]):
    for i, feed in enumerate(FEEDS):
        soft = i % 2 == 1
        wait = HivePartitionSensor(
            task_id=f"{feed}_{'soft' if soft else 'hard'}",
            table="demo.partner_feed",
            partition="ds='{{ ds }}'",
            poke_interval=5,
            timeout=30,
            soft_fail=soft,
        )
        wait >> EmptyOperator(task_id=f"load_{feed}")
