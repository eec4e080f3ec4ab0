"""The trigger a smartsensor sensor defers to: it waits, through the process's shared poller, until the
service says this try of the task reached a terminal state."""

from __future__ import annotations

from typing import Any, AsyncIterator

from smartsensor_airflow._compat import BaseHook, BaseTrigger, TriggerEvent
from smartsensor_airflow.client import ApiError, Endpoint, endpoint_from_connection
from smartsensor_airflow.poller import KEY_FIELDS, shared_poller

CLASSPATH = "smartsensor_airflow.triggers.SmartSensorTrigger"


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
    """Fires once with ``{"state", "error", "hashcode", "key"}`` when the try ``key`` is terminal in smartsensor
    (``state`` ``"error"`` when the service rejects the request for good)."""

    def __init__(self, key: dict[str, Any], conn_id: str = "smartsensor_default", poll_interval: float = 10.0) -> None:
        super().__init__()
        missing = [f for f in KEY_FIELDS if f not in key]
        if missing:
            raise ValueError(f"trigger key is missing {missing}")
        self.key = {f: key[f] for f in KEY_FIELDS}
        self.conn_id = conn_id
        self.poll_interval = float(poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return CLASSPATH, {"key": dict(self.key), "conn_id": self.conn_id, "poll_interval": self.poll_interval}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        poller = shared_poller(self.conn_id, lambda: connection_endpoint(self.conn_id))
        try:
            answer = await poller.wait(self.key, self.poll_interval)
        except ApiError as exc:
            yield TriggerEvent({"state": "error", "error": str(exc), "hashcode": None, "key": self.key})
            return
        yield TriggerEvent(
            {
                "state": answer["state"],
                "error": answer.get("error"),
                "hashcode": answer.get("hashcode"),
                "key": self.key,
            }
        )
