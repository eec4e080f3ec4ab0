"""What the tests' JVM options (scripts/test.sh's JAVA_TOOL_OPTIONS) save: one Spark session with Hive support that
creates a partitioned table, then adds and lists 20 partitions, run with the JVM's defaults and with the options,
side by side; the JVM's own CPU seconds read from /proc before it stops.

    .venv/bin/python -m scripts.bench.jvm_options [--runs 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

COMPILE_AND_COLLECT = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"  # C1 only, one GC thread
# scripts/test.sh's default: also no bytecode verification of the jars' classes, no perf-data file
TEST_OPTIONS = f"{COMPILE_AND_COLLECT} -XX:+UnlockDiagnosticVMOptions -XX:-BytecodeVerificationRemote -XX:-UsePerfData"

WORKLOAD = r"""
import os, tempfile
from pyspark.sql import SparkSession
home = tempfile.mkdtemp()
spark = (SparkSession.builder.master("local[1]").config("spark.sql.warehouse.dir", home + "/warehouse")
         .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={home}")
         .config("spark.ui.enabled", "false").enableHiveSupport().getOrCreate())
spark.sql("CREATE TABLE t (x INT) PARTITIONED BY (ds STRING) STORED AS PARQUET")
for i in range(20):
    spark.sql(f"ALTER TABLE t ADD PARTITION (ds='{i}')")
    spark.sql("SHOW PARTITIONS t").collect()
fields = open(f"/proc/{spark.sparkContext._gateway.proc.pid}/stat").read().rsplit(")", 1)[1].split()
print("JVM_CPU", (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
spark.stop()
"""


def jvm_cpu(options: str) -> float:
    """The JVM's CPU seconds for the workload, run with JAVA_TOOL_OPTIONS=``options``."""
    out = subprocess.run(
        [sys.executable, "-c", WORKLOAD],
        env={**os.environ, "JAVA_TOOL_OPTIONS": options},
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    return float(next(line for line in out.splitlines() if line.startswith("JVM_CPU")).split()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2, help="runs of each, alternating (default 2)")
    args = parser.parse_args()
    cases = {
        "JVM defaults": "",
        "C1 only, one GC thread": COMPILE_AND_COLLECT,
        "test.sh's: also no verification, no perf data": TEST_OPTIONS,
    }
    seen: dict[str, list[float]] = {label: [] for label in cases}
    for _ in range(args.runs):
        for label, options in cases.items():
            seen[label].append(jvm_cpu(options))
    base = min(seen["JVM defaults"])
    print(f"{'JAVA_TOOL_OPTIONS':<47} {'JVM CPU s per run':<22} ratio")
    for label, values in seen.items():
        print(f"{label:<47} {', '.join(f'{v:.1f}' for v in values):<22} {min(values) / base:.2f}")


if __name__ == "__main__":
    main()
