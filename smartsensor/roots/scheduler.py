"""The ``smartsensor scheduler`` process's parts, built in one place: the scheduler over the SQL scheduler store,
under the process's one ``StopRequest``; and a classic run (``smartsensor run-task``, the child it starts) over the
SQL classic-run store."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Engine

from smartsensor.adapters.lifecycle import StopRequest
from smartsensor.adapters.sql.classic_store import SqlClassicRunStore
from smartsensor.adapters.sql.scheduler_store import SqlSchedulerStore
from smartsensor.config import Config
from smartsensor.standalone.classic import RunResult, run_task
from smartsensor.standalone.scheduler import Scheduler


def build_scheduler(engine: Engine, cfg: Config, cli_args: list[str], stop: StopRequest | None = None) -> Scheduler:
    """The scheduler: retries, classic `run-task` children (their command lines carry ``cli_args``), zombies."""
    return Scheduler(SqlSchedulerStore(engine), cfg, cli_args, stop=stop or StopRequest())


def run_classic(
    engine: Engine, cfg: Config, dag_id: str, task_id: str, execution_date: datetime, claimed: bool
) -> RunResult:
    """One task instance run the classic way until it ends, or until SIGTERM/SIGINT hand it back."""
    stop = StopRequest()
    with stop.signals():
        return run_task(SqlClassicRunStore(engine), cfg, dag_id, task_id, execution_date, claimed=claimed, stop=stop)
