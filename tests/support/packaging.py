"""The smartsensor wheel of this working tree, built from a copy of it: a build in the checkout itself would
write build/ and *.egg-info there."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.common import ROOT


def source_copy(tmp_path: Path) -> Path:
    """What smartsensor's build reads, copied to ``tmp_path/src``."""
    src = tmp_path / "src"
    for name in ("smartsensor", "sensors", "schema"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    grammar = Path("providers", "airflow", "smartsensor_airflow", "hive_filter")  # smartsensor.hive_filter
    shutil.copytree(ROOT / grammar, src / grammar, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    return src


def build_wheel(tmp_path: Path) -> Path:
    """Build smartsensor's wheel (no dependencies, no build isolation) into ``tmp_path/dist``; returns its path."""
    src = source_copy(tmp_path)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "-q",
            "--disable-pip-version-check",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
            str(src),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return next((tmp_path / "dist").glob("smartsensor-*.whl"))
