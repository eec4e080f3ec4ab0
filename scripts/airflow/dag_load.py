"""What Airflow 3.3's triggerer spends per try that starts there: it loads the task's serialized DAG (to build the
template context), once per try. Run with an Airflow venv's python from the repository root:

    ~/.cache/smartsensor/airflow-3.3.2/bin/python -m scripts.airflow.dag_load [--sizes 20,100,1000] [--copies 100]

For DAGs of N drop-in sensors it prints the serialized size, the CPU to load one copy and the memory a loaded copy
keeps (what each waiting trigger holds through its task instance), side by side.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import tempfile
import time
from datetime import datetime
from typing import Any

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="dag-load-"))


def rss_mb() -> float:
    """This process's resident memory, MB."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def sensor_dag(size: int) -> Any:
    """A DAG of ``size`` drop-in sensors, half by name, half by filter, as the race test's teams write them."""
    from airflow import DAG

    from smartsensor_airflow.sensors import HivePartitionSensor, NamedHivePartitionSensor

    with DAG(f"sensors_{size}", start_date=datetime(2026, 1, 1), schedule=None) as dag:
        for i in range(size):
            if i % 2:
                NamedHivePartitionSensor(
                    task_id=f"named_{i}", partition_names=["db.events/ds={{ ds }}"], poke_interval=30, timeout=900
                )
            else:
                HivePartitionSensor(
                    task_id=f"filter_{i}", table="clicks", schema="db", partition="ds='{{ ds }}'", poke_interval=30
                )
    return dag


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="20,100,1000", help="sensor tasks per DAG, comma-separated")
    parser.add_argument("--copies", type=int, default=100, help="loaded copies per size (as many waiting triggers)")
    args = parser.parse_args()
    from airflow.serialization.serialized_objects import DagSerialization

    print(f"{'tasks per DAG':>14}{'serialized KB':>15}{'load ms CPU':>13}{'MB per copy':>13}")
    for size in (int(s) for s in args.sizes.split(",")):
        data = DagSerialization.to_dict(sensor_dag(size))
        gc.collect()
        before, started = rss_mb(), time.process_time()
        kept = [DagSerialization.from_dict(data).get_task("named_1") for _ in range(args.copies)]
        cpu_ms = (time.process_time() - started) / args.copies * 1000
        per_copy = (rss_mb() - before) / args.copies
        print(f"{size:>14}{len(json.dumps(data)) / 1024:>15.0f}{cpu_ms:>13.1f}{per_copy:>13.2f}")
        del kept


if __name__ == "__main__":
    main()
