"""One namespace, and the 0.1 import names kept working: ``sensors`` is an alias, never a second copy,
and never hides another distribution's own ``sensors`` package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import smartsensor.sensors
from smartsensor.compat import current_classpath


def test_the_old_import_name_gives_the_same_modules_and_classes() -> None:
    import sensors
    import sensors.hive
    assert sensors.hive is smartsensor.sensors.hive
    assert sensors.HivePartitionSensor is smartsensor.sensors.HivePartitionSensor
    assert sensors.hive.__spec__.name == "smartsensor.sensors.hive"  # the real spec, not the alias's


def test_stored_class_paths_of_the_old_form_map_to_the_new_one() -> None:
    assert current_classpath("sensors.hive.NamedHivePartitionSensor") == "smartsensor.sensors.hive.NamedHivePartitionSensor"
    assert current_classpath("my_company.sensors.Mine") == "my_company.sensors.Mine"
    assert current_classpath("sensorsx.Mine") == "sensorsx.Mine"


def test_another_distributions_sensors_package_wins(tmp_path: Path) -> None:
    (tmp_path / "sensors").mkdir()
    (tmp_path / "sensors" / "__init__.py").write_text("OWNER = 'somebody else'\n")
    code = "import smartsensor, sensors; print(getattr(sensors, 'OWNER', 'ours'))"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "somebody else"


def test_without_another_sensors_package_the_old_name_still_imports(tmp_path: Path) -> None:
    code = ("from sensors import NamedHivePartitionSensor as N; import smartsensor.sensors as s; "
            "print(N is s.NamedHivePartitionSensor)")
    out = subprocess.run([sys.executable, "-c", "import smartsensor; " + code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"
