"""Answering checks from one table's listing: the index in smartsensor.adapters.catalog.batch.answer_checks vs a scan
per check.

Pure Python, no catalog: it times only the matching step that follows the one listing per table.
    python -m scripts.bench.matching --partitions 10000 --checks 10000
"""

from __future__ import annotations

import argparse
import sys
import time

from smartsensor.adapters.catalog.batch import answer_checks
from smartsensor.sensors.checks import PartitionCheck


def scan(listing: list[dict[str, str]], checks: list[PartitionCheck]) -> dict[PartitionCheck, bool]:
    """The previous algorithm: every check walks the whole listing."""
    out = {}
    for c in checks:
        spec = dict(c.spec)
        out[c] = (
            any(p == spec for p in listing)
            if c.exact
            else any(all(p.get(k) == v for k, v in spec.items()) for p in listing)
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--checks", type=int, default=10_000)
    parser.add_argument("--scan-sample", type=int, default=1_000, help="Checks timed with the scan (extrapolated).")
    args = parser.parse_args()
    n = args.partitions
    listing = [{"ds": f"d{i:05d}", "hr": "00"} for i in range(n)]
    # Waiting checks (partitions not landed yet): the steady state, and the scan's worst case.
    half = args.checks // 2
    checks = [PartitionCheck("db", "t", (("ds", f"d{n + i:05d}"), ("hr", "00")), True) for i in range(half)]
    checks += [PartitionCheck("db", "t", (("ds", f"d{n + i:05d}"),), False) for i in range(args.checks - half)]
    started = time.perf_counter()
    indexed = answer_checks("db", "t", listing, checks)
    t_index = time.perf_counter() - started
    sample = checks[:half][: args.scan_sample // 2] + checks[half:][: args.scan_sample // 2]
    started = time.perf_counter()
    scanned = scan(listing, sample)
    t_scan = (time.perf_counter() - started) * len(checks) / len(sample)
    assert all(indexed[c] == scanned[c] for c in sample)
    print(
        f"{n:,} partitions x {len(checks):,} waiting checks: indexed {t_index:.3f} s, "
        f"scan {t_scan:.2f} s (extrapolated from {len(sample):,} checks), ratio {t_scan / t_index:.0f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
