"""The import names smartsensor had before it became one namespace, kept working for users' code.

Up to 0.1 the sensor library installed as the top-level package ``sensors``; it is now
``smartsensor.sensors``. DAG files and sensor modules written as ``from sensors import
HivePartitionSensor`` keep working: ``sensors`` and ``sensors.*`` are aliases of the same module
objects (one class, one registry), never a second copy. If another installed distribution provides
its own top-level ``sensors``, that one wins and no alias is made: this shim must never hide
somebody else's package. Stored class paths of the old form are mapped by ``current_classpath``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from pathlib import Path
from types import ModuleType
from typing import Sequence

LEGACY_PACKAGE = "sensors"
PACKAGE = "smartsensor.sensors"


def current_classpath(classpath: str) -> str:
    """``sensors.hive.X`` (stored by 0.1) → ``smartsensor.sensors.hive.X``; any other path unchanged."""
    if classpath.startswith(LEGACY_PACKAGE + "."):
        return PACKAGE + classpath[len(LEGACY_PACKAGE):]
    return classpath


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, real: ModuleType) -> None:
        self.real = real
        self.real_spec = real.__spec__

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return self.real

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.real_spec  # the import system stamped the alias spec on it: put the real one back


class LegacySensorsFinder(importlib.abc.MetaPathFinder):
    """Resolves ``sensors`` / ``sensors.x`` to the modules of ``smartsensor.sensors``."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != LEGACY_PACKAGE and not fullname.startswith(LEGACY_PACKAGE + "."):
            return None
        if fullname == LEGACY_PACKAGE and _someone_elses_sensors():
            return None
        real = importlib.import_module(PACKAGE + fullname[len(LEGACY_PACKAGE):])
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(real), is_package=hasattr(real, "__path__"))


def _someone_elses_sensors() -> bool:
    """True if a top-level ``sensors`` other than our own library folder is on sys.path."""
    spec = importlib.machinery.PathFinder.find_spec(LEGACY_PACKAGE)
    if spec is None or spec.origin is None:
        return False
    ours = Path(importlib.import_module(PACKAGE).__file__ or "").resolve().parent
    return Path(spec.origin).resolve().parent != ours


def install() -> None:
    """Put the finder first on sys.meta_path (idempotent): it must win over a plain path lookup, which
    would load a source checkout's ``sensors/`` folder a second time under another name."""
    if not any(isinstance(f, LegacySensorsFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, LegacySensorsFinder())

