"""Ads attribution: joins events and clicks per hour; each task waits for both (72 sensor tasks)."""

from smartsensor.sensors import NamedHivePartitionSensor

MODELS = ["last_click", "first_click", "linear", "time_decay", "position", "data_driven"]

tasks = [
    NamedHivePartitionSensor(
        task_id=f"{model}_h{hour:02d}",
        partition_names=[f"demo.events/ds={{{{ ds }}}}/hr={hour:02d}", f"demo.clicks/ds={{{{ ds }}}}/hr={hour:02d}"],
        poke_interval=10,
        timeout=600,
    )
    for model in MODELS
    for hour in range(12)
]
