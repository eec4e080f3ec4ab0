"""Finance: hourly order checks (partial specs) and a daily job waiting for the events _SUCCESS file."""

import os

from smartsensor.sensors import HivePartitionSensor, SuccessFileSensor

WAREHOUSE = os.environ.get("SMARTSENSOR_DEMO_WAREHOUSE", "/tmp/smartsensor-demo/warehouse")

orders = [
    HivePartitionSensor(
        task_id=f"{check}_h{hour:02d}",
        table="demo.orders",
        partition={"ds": "{{ ds }}", "hr": f"{hour:02d}"},
        poke_interval=3 if check == "fraud" else 15,
        timeout=600,
    )
    for check in ("revenue", "fraud", "refunds")
    for hour in range(12)
]

daily = [
    SuccessFileSensor(
        task_id=f"daily_close_{i}",
        path=f"{WAREHOUSE}/demo.db/events/ds={{{{ ds }}}}/_SUCCESS",
        poke_interval=5,
        timeout=600,
    )
    for i in range(10)
]
