"""A partner feed that never arrives today: tasks time out by their own rules, and two classic-mode tasks.

- 20 tasks retry once, then fail; 10 are soft_fail and end skipped.
- ClassicEventsSensor is not marked @smart_eligible, so its tasks run the classic way (`run-task`).
"""

from smartsensor.sensors import HivePartitionSensor, NamedHivePartitionSensor


class ClassicEventsSensor(NamedHivePartitionSensor):
    """A user's subclass that was never marked smart-eligible: it runs in classic mode."""


partner = [
    HivePartitionSensor(
        task_id=f"partner_{i:02d}",
        table="demo.partner_feed",
        partition={"ds": "{{ next_ds }}"},
        poke_interval=4,
        timeout=25,
        retries=0 if i >= 20 else 1,
        retry_delay=2,
        soft_fail=i >= 20,
    )
    for i in range(30)
]

classic = [
    ClassicEventsSensor(
        task_id=f"classic_events_h{hour:02d}",
        partition_names=[f"demo.events/ds={{{{ ds }}}}/hr={hour:02d}"],
        poke_interval=3,
        timeout=600,
    )
    for hour in (0,)
]
