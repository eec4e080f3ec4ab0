"""The smartsensor wheel of this working tree, built from a copy of it: a build in the checkout itself would
write build/ and *.egg-info there; and a venv with that wheel installed, whose dependencies come from a venv kept
under ~/.cache/smartsensor (``SMARTSENSOR_CACHE``) while the wheel declares the same ones."""

from __future__ import annotations

import email
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from tests.support.common import ROOT


def source_copy(tmp_path: Path) -> Path:
    """What smartsensor's build reads, copied to ``tmp_path/src``."""
    src = tmp_path / "src"
    for name in ("smartsensor", "sensors", "schema"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for shared in ("hive_filter", "wire"):  # smartsensor.hive_filter and smartsensor.wire: the provider's folders
        folder = Path("providers", "airflow", "smartsensor_airflow", shared)
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
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


CACHE = Path(os.environ.get("SMARTSENSOR_CACHE") or Path.home() / ".cache" / "smartsensor")


def requires_dist(wheel: Path) -> list[str]:
    """The ``Requires-Dist`` lines of a wheel's METADATA (its declared dependencies, extras' included), sorted."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        metadata = email.message_from_bytes(archive.read(name))
    return sorted(metadata.get_all("Requires-Dist") or [])


def dependency_key(requirements: list[str]) -> str:
    """What a venv of ``requirements`` depends on, hashed: the requirements and this Python (version, build and
    base installation, which a venv links to)."""
    text = "\n".join([sys.version, sys.implementation.cache_tag or "", sys.base_prefix, *requirements])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _run(args: list[str], timeout: float) -> None:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (args, proc.stdout[-2000:], proc.stderr[-3000:])


def _site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python*/site-packages"))


def dependency_venv(wheel: Path, cache: Path = CACHE) -> Path:
    """A venv holding the default dependencies of ``wheel`` (no extras) but not the wheel itself, built once and kept
    under ``cache`` by ``dependency_key``: when the wheel declares other dependencies, or Python changes, another is
    built beside it. It is built in a temporary folder next to its place and renamed there in one step, so that a run
    never sees half of one; two runs building at once each build theirs and the second rename loses (its copy is
    removed). Only its site-packages is used (``venv_with_wheel``): the renamed venv's own scripts name its
    temporary path."""
    requirements = requires_dist(wheel)
    final = cache / f"thrift-host-deps-{dependency_key(requirements)}"
    if final.is_dir():
        return final
    cache.mkdir(parents=True, exist_ok=True)
    for stale in cache.glob(".thrift-host-deps-*"):  # a build killed half-way (its pip has 10 min at most)
        if time.time() - stale.stat().st_mtime > 3600:
            shutil.rmtree(stale, ignore_errors=True)
    building = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=cache))
    try:
        _run([sys.executable, "-m", "venv", str(building)], timeout=120)
        python = str(building / "bin" / "python")
        # the wheel with its dependencies, as a fresh host installs it, then the wheel itself out again: each run
        # installs its own (venv_with_wheel)
        _run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)], timeout=600)
        _run([python, "-m", "pip", "uninstall", "-q", "-y", "--disable-pip-version-check", "smartsensor"], timeout=120)
        (building / "requires-dist.txt").write_text("\n".join(requirements) + "\n")
        building.chmod(0o755)  # mkdtemp's 0700, as any other folder of the cache
        try:
            building.rename(final)
        except OSError:  # another run renamed its copy first
            if not final.is_dir():
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return final


def venv_with_wheel(wheel: Path, dest: Path, cache: Path = CACHE) -> Path:
    """A new venv at ``dest`` with ``wheel`` installed (``--no-deps --force-reinstall``) and its dependencies from
    the cached ``dependency_venv`` (a .pth file adds its site-packages after the venv's own); ``pip check`` proves
    that they satisfy what the wheel declares. The cache is only read: runs at once, from checkouts whose wheels
    differ, each have their own venv and smartsensor."""
    deps = dependency_venv(wheel, cache)
    _run([sys.executable, "-m", "venv", "--without-pip", str(dest)], timeout=120)
    (_site_packages(dest) / "_smartsensor_dependencies.pth").write_text(f"{_site_packages(deps)}\n")
    python = str(dest / "bin" / "python")
    pip = [python, "-m", "pip", "--disable-pip-version-check"]  # the cached venv's pip
    _run([*pip, "install", "-q", "--no-deps", "--force-reinstall", str(wheel)], timeout=300)
    _run([*pip, "check"], timeout=120)
    return dest
