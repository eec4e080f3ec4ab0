"""Marketing: eight hourly reports, each waiting for its hour of demo.events (96 sensor tasks)."""

from smartsensor.sensors import NamedHivePartitionSensor

REPORTS = ["traffic", "funnel", "retention", "cohorts", "campaigns", "geo", "devices", "referrers"]

tasks = [
    NamedHivePartitionSensor(
        task_id=f"{report}_h{hour:02d}",
        partition_names=[f"demo.events/ds={{{{ ds }}}}/hr={hour:02d}"],
        poke_interval=5,
        timeout=600,
    )
    for report in REPORTS
    for hour in range(12)
]
