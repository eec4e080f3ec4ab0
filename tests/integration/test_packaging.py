"""`pip install .` ships the migrations, the status page's templates and the console script."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from tests.support.common import ROOT


def test_wheel_contains_packages_migrations_and_entry_point(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(ROOT)], check=True, timeout=300)
    wheel = next(tmp_path.glob("smartsensor-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "smartsensor/schema/migrations/env.py" in names
    assert "smartsensor/schema/migrations/script.py.mako" in names
    assert any(n.startswith("smartsensor/schema/migrations/versions/0001_") for n in names)
    assert "smartsensor/sensors/hive.py" in names and "smartsensor/cli/__init__.py" in names
    # one namespace: nothing installs as a top-level `sensors` or `schema` that could clash with another distribution
    top_level = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert top_level == {"smartsensor"}, top_level
    assert "smartsensor/adapters/log4j2.properties" in names
    for template in ("status.html", "status.css", "login.html"):  # the status page's assets, served from the wheel
        assert f"smartsensor/api/templates/{template}" in names
    assert "smartsensor/schema/migrations/versions/0004_state_sample.py" in names
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "smartsensor = smartsensor.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()
    assert not any(n.startswith("tests/") for n in names)
