"""The safety valve: when the service has been out of reach for longer than its grace period, a sensor checks on
its own, the way Airflow's own sensor of the same class would (its ``poke``: the Hive hook and the task's own
metastore connection), every ``poke_interval`` until the partition is there or the sensor's ``timeout`` passes.

Only this try does so: the next try of the task (a retry, a rerun) asks the service again. Whatever the service
later says about the try it was registered with is not heard by Airflow any more; Airflow's verdict is the one
that counts.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone
from typing import Any, Callable

from smartsensor_airflow._compat import AirflowSensorTimeout, AirflowSkipException

log = logging.getLogger(__name__)

NEVER = -1.0  # a grace below zero: never fall back (the try fails and Airflow's retries apply)
DEFAULT_GRACE = 120.0


def try_start(start_date: datetime | None, try_started: float | None) -> datetime | None:
    """When the try started: the earlier of ``ti.start_date`` as the resumed task sees it and ``try_started``, the
    epoch seconds its trigger carried from the first start. Airflow 3.3's server keeps a resumed try's start_date,
    but ``airflow dags test`` (3.x) gives the resumed task its resume time: the trigger's copy keeps the valve from
    counting the timeout again from there."""
    if try_started is None:
        return start_date
    carried = datetime.fromtimestamp(float(try_started), timezone.utc)
    if start_date is None:
        return carried
    if start_date.tzinfo is None:
        start_date = start_date.replace(tzinfo=timezone.utc)
    return min(start_date, carried)


def seconds_left(timeout: float, started: datetime | None, now: datetime | None = None) -> float:
    """What is left of a sensor's ``timeout`` counted from the try's start (``try_start``), never below zero. No
    start known: the whole timeout."""
    if started is None:
        return max(0.0, float(timeout))
    now = now or datetime.now(timezone.utc)
    if started.tzinfo is None:
        started = started.replace(tzinfo=timezone.utc)
    return max(0.0, timeout - (now - started).total_seconds())


def wait_classically(
    poke: Callable[[], bool],
    *,
    poke_interval: float,
    left: float,
    soft_fail: bool,
    why: str,
    task: str,
    logger: Any = log,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Call ``poke`` every ``poke_interval`` seconds until it says yes. After ``left`` seconds raise
    AirflowSensorTimeout, or AirflowSkipException with ``soft_fail``, as Airflow's sensors do. Errors of ``poke``
    propagate (Airflow's retries apply)."""
    logger.warning("smartsensor: %s; %s checks on its own as Airflow's sensor would, for up to %.0f s", why, task, left)
    end = clock() + left
    pokes = 0
    while True:
        pokes += 1
        if poke():
            logger.info("smartsensor: %s found its partition on its own (poke %d)", task, pokes)
            return
        remaining = end - clock()
        if remaining <= 0:
            message = f"smartsensor was out of reach ({why}) and the sensor's own checks timed out after {pokes} pokes"
            if soft_fail:
                raise AirflowSkipException(message)
            raise AirflowSensorTimeout(message)
        sleep(min(max(0.1, poke_interval), remaining))
