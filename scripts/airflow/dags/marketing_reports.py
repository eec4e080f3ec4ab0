"""Marketing: hourly reports, each waiting for its hour of demo.events (30% of the demo's sensors)."""

from datetime import datetime

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, task

from demo_scale import HOURS, names

# from airflow.providers.apache.hive.sensors.named_hive_partition import NamedHivePartitionSensor
from smartsensor_airflow.sensors import NamedHivePartitionSensor

REPORTS = names(0.30, ["traffic", "funnel", "retention", "cohorts", "campaigns", "geo", "devices", "referrers"])

with DAG("marketing_reports", schedule=None, start_date=datetime(2026, 11, 1), catchup=False, tags=["team:marketing"]):

    @task
    def publish() -> str:
        return "marketing dashboards refreshed"

    done = publish()
    for hour in range(HOURS):
        waits = [
            NamedHivePartitionSensor(
                task_id=f"{report}_h{hour:02d}",
                partition_names=[f"demo.events/ds={{{{ ds }}}}/hr={hour:02d}"],
                metastore_conn_id="metastore_default",
                poke_interval=10,
                timeout=1800,
            )
            for report in REPORTS
        ]
        waits >> EmptyOperator(task_id=f"report_h{hour:02d}") >> done
