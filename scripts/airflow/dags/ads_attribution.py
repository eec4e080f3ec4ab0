"""Ads attribution: joins events and clicks per hour, so each task waits for both partitions of its hour (20%)."""

from datetime import datetime

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, task

from demo_scale import HOURS, names

# from airflow.providers.apache.hive.sensors.named_hive_partition import NamedHivePartitionSensor
from smartsensor_airflow.sensors import NamedHivePartitionSensor

MODELS = names(0.20, ["last_click", "first_click", "linear", "time_decay", "position", "data_driven"])

with DAG("ads_attribution", schedule=None, start_date=datetime(2026, 11, 1), catchup=False, tags=["team:ads"]):

    @task
    def publish() -> str:
        return "attribution tables published"

    done = publish()
    for hour in range(HOURS):
        waits = [
            NamedHivePartitionSensor(
                task_id=f"{model}_h{hour:02d}",
                partition_names=[
                    f"demo.events/ds={{{{ ds }}}}/hr={hour:02d}",
                    f"demo.clicks/ds={{{{ ds }}}}/hr={hour:02d}",
                ],
                poke_interval=15,
                timeout=1800,
                mode="reschedule",
            )
            for model in MODELS
        ]
        waits >> EmptyOperator(task_id=f"attribute_h{hour:02d}") >> done
