"""End parked tries in an Airflow process, through the provider's ``end_parked``: run with an Airflow venv's Python
(its settings and database from the environment, as the scheduler has them) by scripts/bench/parking.py and
tests/airflow/test_parking.py. Reads JSON on stdin: ``pool``, ``batch`` (tries a transaction) and ``ends`` (each
``dag_id``, ``run_id``, ``task_id``, ``map_index``, ``try_number``, ``state``, ``note``). Prints JSON: each batch's
seconds, the ends applied (their keys), and this process's CPU seconds spent ending them (Airflow's import
and its first use excluded)."""

from __future__ import annotations

import json
import resource
import sys
import time


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    job = json.load(sys.stdin)
    from airflow.utils.session import create_session
    from sqlalchemy import text
    from sqlalchemy.orm import configure_mappers

    from smartsensor_airflow._compat import load_note_models
    from smartsensor_airflow.parking import ParkedEnd, end_parked, in_batches

    ends = [ParkedEnd(**end) for end in job["ends"]]
    # As in a long-running Airflow process: the ORM's mappers configured, a connection in the pool.
    load_note_models()
    configure_mappers()
    with create_session() as session:
        session.execute(text("SELECT 1"))
    cpu = cpu_seconds()
    seconds: list[float] = []
    applied: list[list[object]] = []
    for batch in in_batches(ends, int(job["batch"])):
        started = time.monotonic()
        with create_session() as session:
            applied += [[*end.key, end.try_number] for end in end_parked(batch, job["pool"], session)]
        seconds.append(time.monotonic() - started)
    json.dump({"seconds": seconds, "applied": applied, "cpu": cpu_seconds() - cpu}, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
