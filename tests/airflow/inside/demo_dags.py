"""Run inside an Airflow 3 venv (not by pytest): load the DAG files of ``$AIRFLOW_HOME/dags`` as the dag-processor
does (the folder on sys.path) and print one JSON line: the import errors, and each
DAG's tasks with the module and class of each task's operator."""

from __future__ import annotations

import json
import sys

from airflow import settings
from airflow.dag_processing.dagbag import DagBag

sys.path.insert(0, settings.DAGS_FOLDER)  # as the dag-processor has it: the teams' files import demo_scale.py
bag = DagBag(dag_folder=settings.DAGS_FOLDER)  # examples are off in the environment the test gives
print(
    json.dumps(
        {
            "import_errors": {path: str(error)[-500:] for path, error in bag.import_errors.items()},
            "dags": {
                dag_id: {t.task_id: f"{type(t).__module__}.{type(t).__name__}" for t in dag.tasks}
                for dag_id, dag in bag.dags.items()
            },
        }
    )
)
