"""`pip install .` ships the migrations and the console script."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_contains_packages_migrations_and_entry_point(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(ROOT)], check=True, timeout=300)
    wheel = next(tmp_path.glob("smartsensor-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "schema/migrations/env.py" in names
    assert "schema/migrations/script.py.mako" in names
    assert any(n.startswith("schema/migrations/versions/0001_") for n in names)
    assert "sensors/hive.py" in names and "smartsensor/cli.py" in names
    assert "smartsensor/log4j2.properties" in names
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "smartsensor = smartsensor.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()
    assert not any(n.startswith("tests/") for n in names)
