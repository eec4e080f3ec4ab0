"""What each install costs: time and size of a fresh venv per distribution and extra, side by side in one run.

    .venv/bin/python -m scripts.bench.install            # pip cache as it is (warm after ./scripts/test.sh)
    .venv/bin/python -m scripts.bench.install --cold     # --no-cache-dir: every package downloaded (and pyspark built)

Rows: an empty venv (the baseline every size is measured against), `smartsensor` (a service host on the thrift
backend), `smartsensor[spark]` (Spark backend, classic runs, `metastore start`, the demo), and the provider wheel
as it goes into an Airflow venv (`--no-deps`: it needs only apache-airflow and httpx, which Airflow brings).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def tree_bytes(path: Path) -> int:
    """Bytes of the regular files below ``path`` (links not followed)."""
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def build_wheels(out: Path) -> dict[str, Path]:
    """Both distributions' wheels, built as a release would (`python -m build`)."""
    for project in (ROOT, ROOT / "providers" / "airflow"):
        subprocess.run(
            [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(project)],
            check=True,
            capture_output=True,
            timeout=600,
        )
    return {"smartsensor": next(out.glob("smartsensor-*.whl")), "provider": next(out.glob("smartsensor_airflow-*.whl"))}


def timed_venv(where: Path, pip_args: list[str], cold: bool) -> tuple[float, int, int]:
    """(seconds to create the venv and pip-install ``pip_args`` into it, bytes of the venv, bytes of pyspark's jars)."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=300)
    if pip_args:
        cmd = [
            str(where / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            *(["--no-cache-dir"] if cold else []),
            *pip_args,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(pip_args)} failed:\n{proc.stderr[-3000:]}")
    seconds = time.perf_counter() - started
    jars = sum(tree_bytes(p) for p in where.glob("lib/python*/site-packages/pyspark/jars"))
    return seconds, tree_bytes(where), jars


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cold", action="store_true", help="install with pip's --no-cache-dir")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-install-"))
    try:
        wheels = build_wheels(tmp / "dist")
        rows = [
            ("empty venv (baseline)", []),
            ("smartsensor (thrift service host)", [str(wheels["smartsensor"])]),
            ("smartsensor[spark]", [f"{wheels['smartsensor']}[spark]"]),
            ("smartsensor-airflow (--no-deps)", ["--no-deps", str(wheels["provider"])]),
        ]
        results = []
        for i, (name, pip_args) in enumerate(rows):
            print(f"installing {name} ...", file=sys.stderr, flush=True)
            results.append((name, *timed_venv(tmp / f"venv{i}", pip_args, args.cold)))
        base = results[0][2]
        print(
            f"\npip cache: {'off (--no-cache-dir)' if args.cold else 'as it was'}; "
            f"seconds include creating the venv (the baseline row); MB above the empty venv"
        )
        print(f"{'install':36} {'seconds':>8} {'MB added':>9} {'jars MB':>8}")
        for name, seconds, size, jars in results:
            print(f"{name:36} {seconds:>8.1f} {(size - base) / 1e6:>9.1f} {jars / 1e6:>8.1f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
