"""Log lines from the triggerer's event loop that never block it.

Airflow 3.3's trigger runner writes each log line synchronously to a socket that its supervisor drains between
other work. When the supervisor is itself blocked sending the runner a large message (the workloads of tasks that
start in the triggerer carry their serialized DAG), a runner whose event loop is blocked in a log write can never
read that message: both processes wait on each other, and every trigger in the triggerer stops. A burst of lines
(hundreds of sensors answered in the same second) fills the socket. So the provider's lines from the event loop go
through one thread of their own, in order, with the caller's context (Airflow routes a trigger's lines to its task's
log by context variables); the event loop only queues them.
"""

from __future__ import annotations

import asyncio
import contextvars
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Coroutine, TypeVar

T = TypeVar("T")
_WRITER: ThreadPoolExecutor | None = None
# Set while a synchronous caller (a task's execute on a worker) runs a request on a loop of its own: its process may
# end right after, and nothing else shares that loop, so its lines are written at once.
_SYNC_CALLER: contextvars.ContextVar[bool] = contextvars.ContextVar("smartsensor_sync_caller", default=False)


def _writer() -> ThreadPoolExecutor:
    global _WRITER
    if _WRITER is None:
        _WRITER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="smartsensor-log")
    return _WRITER


def log_off_loop(logger: Any, level: str, msg: str, *args: Any) -> None:
    """``logger.<level>(msg, *args)``, written by the log thread when called from a shared running event loop (the
    loop does not wait for it), else at once."""
    method = getattr(logger, level)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        method(msg, *args)
        return
    if _SYNC_CALLER.get():
        method(msg, *args)
        return
    _writer().submit(contextvars.copy_context().run, method, msg, *args)


async def as_sync_caller(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` for a synchronous caller (``client.run_blocking``): its lines are written at once."""
    _SYNC_CALLER.set(True)
    return await coroutine
