"""`pip install .` ships the migrations, the status page's templates and the console script."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.support.common import ROOT
from tests.support.packaging import build_wheel, source_copy


def test_wheel_contains_packages_migrations_and_entry_point(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    assert "smartsensor/schema/migrations/env.py" in names
    assert "smartsensor/schema/migrations/script.py.mako" in names
    assert any(n.startswith("smartsensor/schema/migrations/versions/0001_") for n in names)
    assert "smartsensor/sensors/hive.py" in names and "smartsensor/cli/__init__.py" in names
    assert "smartsensor/hive_filter/__init__.py" in names  # the provider's grammar, shipped by both distributions
    assert "smartsensor/wire/__init__.py" in names  # the shapes that cross HTTP, the provider's too
    assert "smartsensor/hive_filter/names.py" in names  # and its partition-name grammar
    for package in (ROOT / "smartsensor").rglob("__init__.py"):  # every package of the source tree is shipped
        assert f"{package.relative_to(ROOT).as_posix()}" in names, package
    # one namespace: nothing installs as a top-level `sensors` or `schema` that could clash with another distribution
    top_level = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert top_level == {"smartsensor"}, top_level
    assert "smartsensor/adapters/log4j2.properties" in names
    for template in ("status.html", "status.css", "login.html"):  # the status page's assets, served from the wheel
        assert f"smartsensor/api/templates/{template}" in names
    assert "smartsensor/schema/migrations/versions/0005_marking_indexes.py" in names
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "smartsensor = smartsensor.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()
    assert not any(n.startswith("tests/") for n in names)


def test_both_distributions_build_as_wheels_with_one_version(tmp_path: Path) -> None:
    """`python -m build` makes both wheels; their versions are one number, the CHANGELOG's newest entry."""
    out = tmp_path / "dist"
    # smartsensor's backend (setuptools) is in the test venv; the provider's (hatchling) comes through isolation
    for project, isolation in ((source_copy(tmp_path), ["--no-isolation"]), (ROOT / "providers" / "airflow", [])):
        subprocess.run(
            [sys.executable, "-m", "build", "--wheel", *isolation, "--outdir", str(out), str(project)],
            check=True,
            timeout=300,
            capture_output=True,
        )
    wheels = sorted(p.name for p in out.glob("*.whl"))
    versions = {name.split("-")[1] for name in wheels}
    assert [name.split("-")[0] for name in wheels] == ["smartsensor", "smartsensor_airflow"], wheels
    newest = next(line for line in (ROOT / "CHANGELOG.md").read_text().splitlines() if line.startswith("## "))
    assert versions == {newest.split()[1]}, (wheels, newest)


def test_building_the_provider_leaves_its_source_folder_as_it_was(tmp_path: Path) -> None:
    """`pip install ./providers/airflow` must not write build/ or *.egg-info into the checkout."""
    source = tmp_path / "airflow"
    shutil.copytree(ROOT / "providers" / "airflow", source, ignore=shutil.ignore_patterns("__pycache__"))
    before = sorted(p.relative_to(source) for p in source.rglob("*"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "wheels"), str(source)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    assert list((tmp_path / "wheels").glob("smartsensor_airflow-*.whl"))
    after = sorted(p.relative_to(source) for p in source.rglob("*") if "__pycache__" not in p.parts)
    assert after == before, sorted(set(after) - set(before))
