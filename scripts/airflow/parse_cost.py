"""What a smartsensor task adds to parsing a DAG file: Airflow reads a task's start arguments (``start.py``) several
times while it builds and serializes a DAG, and each read checks the task's templates. Run with an Airflow venv's
python from the repository root, the provider from this checkout:

    PYTHONPATH=providers/airflow ~/.cache/smartsensor/airflow-3.3.2/bin/python -m scripts.airflow.parse_cost

For DAGs of N drop-in sensors (``--sizes``, default 100,1000; half by name, half by filter) it prints, side by
side, the CPU per task to build the DAG and to serialize it, and the reads of the start arguments per task, with
the templates parsed once per process (the provider) and parsed again on every read (no caches: as before).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from typing import Any, Iterator

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="parse-cost-"))


@contextlib.contextmanager
def strategy(name: str) -> Iterator[dict[str, int]]:
    """Count the reads of the start arguments; for "every read", parse the templates afresh on each."""
    from smartsensor_airflow import _compat, start

    reads = {"n": 0}
    saved = (start.start_trigger_args, start._template_use, start.template_environment)
    original = start.start_trigger_args

    def counted(task: Any, parked: bool = False) -> Any:
        reads["n"] += 1
        if name == "every read":
            start._READABLE.clear()
        return original(task, parked)

    start.start_trigger_args = counted
    if name == "every read":
        start._template_use = start._template_use.__wrapped__  # type: ignore[assignment]
        start.template_environment = _compat.template_environment.__wrapped__  # type: ignore[assignment]
    try:
        yield reads
    finally:
        start.start_trigger_args, start._template_use, start.template_environment = saved
        start._template_use.cache_clear()
        start._READABLE.clear()


def measure(size: int, name: str) -> tuple[float, float, float]:
    """(build ms per task, serialize ms per task, reads per task) for a DAG of ``size`` sensors."""
    from scripts.airflow.dag_load import sensor_dag

    try:  # Airflow 3
        from airflow.serialization.serialized_objects import DagSerialization as Serializer
    except ImportError:  # Airflow 2.10
        from airflow.serialization.serialized_objects import SerializedDAG as Serializer

    with strategy(name) as reads:
        began = time.process_time()
        dag = sensor_dag(size)
        built = time.process_time()
        Serializer.to_dict(dag)
        done = time.process_time()
    return 1000 * (built - began) / size, 1000 * (done - built) / size, reads["n"] / size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000", help="sensor tasks per DAG, comma-separated")
    args = parser.parse_args()
    import airflow

    print(f"Airflow {airflow.__version__}: CPU ms per sensor task to build and serialize a DAG")
    print(f"{'tasks':>6} {'templates parsed':<18} {'build ms':>9} {'serialize ms':>13} {'reads/task':>11}")
    for size in (int(s) for s in args.sizes.split(",")):
        measure(size, "once")  # warm the imports
        rows = {name: measure(size, name) for name in ("every read", "once")}
        for name, (build, serialize, reads) in rows.items():
            print(f"{size:>6} {name:<18} {build:>9.2f} {serialize:>13.2f} {reads:>11.1f}")
        before, after = rows["every read"], rows["once"]
        print(f"{size:>6} {'ratio':<18} {before[0] / after[0]:>8.1f}x {before[1] / after[1]:>12.1f}x")


if __name__ == "__main__":
    main()
