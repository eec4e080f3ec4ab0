"""The key and the reuse of the venv of smartsensor's dependencies that tests/process/test_install.py installs its
wheel beside (tests.support.packaging)."""

from __future__ import annotations

import zipfile
from pathlib import Path

from tests.support.packaging import dependency_key, dependency_venv, requires_dist


def fake_wheel(path: Path, requirements: list[str]) -> Path:
    """A wheel holding only its METADATA (and another file that mentions METADATA)."""
    lines = ["Metadata-Version: 2.1", "Name: smartsensor", "Version: 1.0"]
    lines += [f"Requires-Dist: {r}" for r in requirements]
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("smartsensor/METADATA.py", "")
        archive.writestr("smartsensor-1.0.dist-info/METADATA", "\n".join(lines) + "\n\nREADME text\n")
    return path


def test_the_key_is_the_declared_dependencies_whatever_their_order(tmp_path: Path) -> None:
    one = fake_wheel(tmp_path / "a.whl", ["thrift>=0.16", 'pyspark>=3.5; extra == "spark"', "SQLAlchemy>=2"])
    same = fake_wheel(tmp_path / "b.whl", ["SQLAlchemy>=2", "thrift>=0.16", 'pyspark>=3.5; extra == "spark"'])
    other = fake_wheel(tmp_path / "c.whl", ["SQLAlchemy>=2.1", "thrift>=0.16", 'pyspark>=3.5; extra == "spark"'])
    assert requires_dist(one) == ["SQLAlchemy>=2", 'pyspark>=3.5; extra == "spark"', "thrift>=0.16"]
    assert dependency_key(requires_dist(one)) == dependency_key(requires_dist(same))
    assert dependency_key(requires_dist(one)) != dependency_key(requires_dist(other))  # rebuilt when they change


def test_a_cached_venv_of_the_same_dependencies_is_reused_without_building(tmp_path: Path) -> None:
    wheel = fake_wheel(tmp_path / "a.whl", ["thrift>=0.16"])  # not installable: a build would fail
    cached = tmp_path / "cache" / f"thrift-host-deps-{dependency_key(['thrift>=0.16'])}"
    cached.mkdir(parents=True)
    assert dependency_venv(wheel, tmp_path / "cache") == cached
