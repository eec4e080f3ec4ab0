"""The client host of the several-host bed (tests/process/test_hosts.py), playing Airflow with the provider's own
code: each try registered by ``register_try`` with a held answer (``?wait=``), as a task's ``execute`` does, then,
for those still waiting, their end awaited through the shared ``StatesPoller`` (``?wait=`` states polls), as the
triggerer does. One JSON line per event on stdout:

- ``{"event": "registered", "i", "state", "seconds"}``: a try's registration answered (``seconds`` since start);
- ``{"event": "register_failed", "i", "error", "seconds"}``: it gave up (patience spent, or refused);
- ``{"event": "polling", "keys"}``: the poller starts on the tries still waiting;
- ``{"event": "answer", "i", "state", "seconds"}``: the poller heard a try's end;
- ``{"event": "done", "seconds"}``.

Run as ``python -m tests.support.airflow_client_host '<json>'`` with the keys ``base_url``, ``token``,
``partitions`` (one try per partition name), ``first`` (the number of the first: try i is DAG ``af<i>``),
``wait``, ``timeout``, ``patience``, ``interval``, ``grace``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from typing import Any

from smartsensor_airflow.client import TERMINAL, Endpoint, register_try
from smartsensor_airflow.poller import shared_poller
from smartsensor_airflow.wire import AskedTry, Registered, TryKey

STARTED = time.monotonic()


_OUT = threading.Lock()  # registrations answer in threads of their own: one whole line at a time


def emit(**fields: Any) -> None:
    line = json.dumps({**fields, "seconds": round(time.monotonic() - STARTED, 3)}) + "\n"
    with _OUT:
        sys.stdout.write(line)
        sys.stdout.flush()


def key(i: int) -> TryKey:
    return TryKey(f"af{i}", "wait", "hosts", -1, 1)


async def main(args: dict[str, Any]) -> None:
    endpoint = Endpoint(args["base_url"], args["token"])

    def register(i: int, partition: str) -> tuple[int, Registered | None]:
        try:
            answer = register_try(
                endpoint,
                key(i),
                "NamedHivePartitionSensor",
                {"partition_names": [partition]},
                {"poke_interval": 0.5, "timeout": 900},
                None,
                timeout=args["timeout"],
                patience=args["patience"],
                wait=args["wait"],
            )
        except Exception as exc:  # noqa: BLE001 - reported: the test decides
            emit(event="register_failed", i=i, error=f"{type(exc).__name__}: {exc}")
            return i, None
        emit(event="registered", i=i, state=answer.state)
        return i, answer

    answers = await asyncio.gather(
        *(asyncio.to_thread(register, i, p) for i, p in enumerate(args["partitions"], start=args["first"]))
    )
    waiting = [i for i, answer in answers if answer is not None and answer.state not in TERMINAL]
    emit(event="polling", keys=waiting)

    async def lookup() -> Endpoint:
        return endpoint

    poller = shared_poller("hosts", lookup)

    async def hear(i: int) -> None:
        try:
            answer = await poller.wait(AskedTry(key(i)), args["interval"], args["grace"])
        except Exception as exc:  # noqa: BLE001 - reported: the test decides
            emit(event="answer", i=i, state=None, error=f"{type(exc).__name__}: {exc}")
            return
        emit(event="answer", i=i, state=answer.state)

    await asyncio.gather(*(hear(i) for i in waiting))
    emit(event="done")


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
