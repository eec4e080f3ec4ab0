"""How big the demo is. scripts/airflow/demo.py sets DEMO_SENSORS and DEMO_PARTITIONS from its --sensors and
--partitions; the partitions are hourly, half in demo.events and half in demo.clicks, so the teams below wait
on hours 00 .. HOURS-1 of the same day, many of them on the very same partitions.

Not a workflow file itself: the teams' files import it.
"""

import os

SENSORS = int(os.environ.get("DEMO_SENSORS", "200"))
PARTITIONS = int(os.environ.get("DEMO_PARTITIONS", "20"))
HOURS = max(1, PARTITIONS // 2)


def names(share: float, base: list[str], per_hour: bool = True) -> list[str]:
    """Task name stems for a team that holds ``share`` of all sensors: ``base`` in order, then ``base`` again with
    a number, as many as the team's share needs (per hour when ``per_hour``)."""
    count = max(1, round(SENSORS * share / (HOURS if per_hour else 1)))
    return [base[i % len(base)] + (str(i // len(base) + 1) if i >= len(base) else "") for i in range(count)]
