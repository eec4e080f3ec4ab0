"""The trigger a smartsensor sensor defers to: it waits, through the process's shared poller, until the
service says this try of the task reached a terminal state.

How it ends the task (README: "Airflow versions, and no task failed by a race"):

- ``success`` and ``skipped`` end the task from the triggerer (``TaskSuccessEvent`` / ``TaskSkippedEvent``,
  Airflow 2.10+), unless ``end_from_trigger`` is off. The task is never queued again, so Airflow's deferral race
  (apache/airflow#67287, #72716: a trigger that fires before the scheduler has processed the exit of the try
  that deferred gets the task failed) cannot touch it, and no worker slot is spent on a resume.
- Everything else (a timeout, a check error, an unknown try, the try's ``execution_timeout``) resumes the task on
  a worker, whose ``execute_complete`` raises what Airflow's own sensor would (``AirflowSensorTimeout`` for a
  timeout: no retries; ``AirflowTaskTimeout`` for execution_timeout: retries apply). Such an event is not fired
  before ``RESUME_SETTLE`` seconds after the trigger started, so that the scheduler has taken the deferral in
  first.
- A service out of reach (no answer, 502/503/504, a body that is not its JSON, or the connection's look-up failing:
  ``poller.py``) for longer than ``fallback_grace`` seconds resumes the task with ``unreachable``: its
  ``execute_complete`` checks on its own (the safety valve, ``fallback.py``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator

from smartsensor_airflow._compat import BaseHook, BaseTrigger, TaskSkippedEvent, TaskSuccessEvent, TriggerEvent
from smartsensor_airflow.client import ApiError, Endpoint, endpoint_from_connection
from smartsensor_airflow.poller import KEY_FIELDS, ServiceUnreachable, shared_poller

CLASSPATH = "smartsensor_airflow.triggers.SmartSensorTrigger"
# Seconds a resume event waits after the trigger started: the scheduler processes the executor's report of the
# deferring try within a loop or two (1 s heartbeats), and a resume before that is what the race needs.
RESUME_SETTLE = 5.0
UNREACHABLE = "unreachable"  # the event state of a try whose service was out of reach past its grace


async def connection_endpoint(conn_id: str) -> Endpoint:
    """The endpoint of an Airflow connection, looked up without blocking the triggerer's event loop."""
    aget = getattr(BaseHook, "aget_connection", None)  # Airflow 3.1+
    if aget is not None:
        conn = await aget(conn_id)
    else:
        from asgiref.sync import sync_to_async  # shipped with Airflow 2.x

        conn = await sync_to_async(BaseHook.get_connection)(conn_id)
    return endpoint_from_connection(conn, conn_id)


class SmartSensorTrigger(BaseTrigger):
    """Fires once when the try ``key`` is terminal in smartsensor: a task-end event for success or skipped (with
    ``end_from_trigger``), else ``{"state", "error", "hashcode", "key"}`` for the task's ``execute_complete``
    (``state`` ``"error"`` when the service rejects the request for good, ``"unreachable"`` when it was out of
    reach for longer than ``fallback_grace`` seconds). Triggers serialized before ``end_from_trigger`` or
    ``fallback_grace`` existed resume on a worker and never fall back, as they did."""

    def __init__(
        self,
        key: dict[str, Any],
        conn_id: str = "smartsensor_default",
        poll_interval: float = 10.0,
        end_from_trigger: bool = False,
        settle: float = RESUME_SETTLE,
        deadline: float | None = None,
        fallback_grace: float | None = None,
    ) -> None:
        super().__init__()
        missing = [f for f in KEY_FIELDS if f not in key]
        if missing:
            raise ValueError(f"trigger key is missing {missing}")
        self.key = {f: key[f] for f in KEY_FIELDS}
        self.conn_id = conn_id
        self.poll_interval = float(poll_interval)
        self.end_from_trigger = bool(end_from_trigger)
        self.settle = float(settle)
        self.deadline = None if deadline is None else float(deadline)  # epoch seconds: the try's execution_timeout
        # None or below 0: wait for the service however long it is away.
        self.fallback_grace = None if fallback_grace is None or fallback_grace < 0 else float(fallback_grace)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return CLASSPATH, {
            "key": dict(self.key),
            "conn_id": self.conn_id,
            "poll_interval": self.poll_interval,
            "end_from_trigger": self.end_from_trigger,
            "settle": self.settle,
            "deadline": self.deadline,
            "fallback_grace": self.fallback_grace,
        }

    async def run(self) -> AsyncIterator[TriggerEvent]:
        started = time.monotonic()
        poller = shared_poller(self.conn_id, lambda: connection_endpoint(self.conn_id))
        try:
            waiting = poller.wait(self.key, self.poll_interval, self.fallback_grace)
            if self.deadline is None:
                answer = await waiting
            else:
                answer = await asyncio.wait_for(waiting, max(0.0, self.deadline - time.time()))
        except asyncio.TimeoutError:
            await self._settle(started)
            yield TriggerEvent(
                {"state": "execution_timeout", "error": "execution_timeout reached", "hashcode": None, "key": self.key}
            )
            return
        except ServiceUnreachable as exc:
            await self._settle(started)
            self.log.warning("smartsensor: %s; the task resumes to check on its own", exc)
            yield TriggerEvent({"state": UNREACHABLE, "error": str(exc), "hashcode": None, "key": self.key})
            return
        except ApiError as exc:
            await self._settle(started)
            yield TriggerEvent({"state": "error", "error": str(exc), "hashcode": None, "key": self.key})
            return
        state = answer["state"]
        if self.end_from_trigger and state in ("success", "skipped"):
            self.log.info(
                "smartsensor: %s (hash %s)%s; the task ends from the triggerer",
                state,
                answer.get("hashcode"),
                f": {answer['error']}" if answer.get("error") else "",
            )
            yield TaskSuccessEvent() if state == "success" else TaskSkippedEvent()
            return
        await self._settle(started)
        yield TriggerEvent(
            {
                "state": answer["state"],
                "error": answer.get("error"),
                "hashcode": answer.get("hashcode"),
                "key": self.key,
            }
        )

    async def _settle(self, started: float) -> None:
        """Hold a resume event until ``settle`` seconds after the trigger started (the race guard)."""
        left = self.settle - (time.monotonic() - started)
        if left > 0:
            await asyncio.sleep(left)
