"""The `smartsensor` command line: thin commands that parse arguments, call the service, and print.

``main`` (console script ``smartsensor``) is the group from ``cli.app``; the commands live by subject in
``cli.admin``, ``cli.tasks``, ``cli.workers``, ``cli.serve`` and ``cli.airflow_report``.
"""

from __future__ import annotations

from smartsensor.cli import admin, airflow_report, serve, tasks, workers
from smartsensor.cli.app import main

for _command in (
    admin.db,
    admin.config,
    admin.metastore_service,
    tasks.submit,
    tasks.tasks,
    tasks.set_state_cmd,
    tasks.run_task_cmd,
    tasks.signal_cmd,
    workers.worker,
    workers.workers,
    workers.scheduler,
    workers.status,
    serve.serve,
    airflow_report.airflow,
):
    main.add_command(_command)

__all__ = ["main"]
