"""A sensor on a file (e.g. ``_SUCCESS``) in the Spark JVM's Hadoop FileSystem."""

from __future__ import annotations

import re
from typing import Any

from smartsensor.sensors.base import BaseSensor, smart_eligible
from smartsensor.sensors.checks import Check, PathCheck
from smartsensor.sensors.errors import SensorDefinitionError

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


@smart_eligible
class SuccessFileSensor(BaseSensor):
    """Waits until ``path`` exists (file://, hdfs://, s3a://... as configured in Spark)."""

    persist_fields = ("path",)

    def __init__(self, task_id: str, path: str, **kwargs: Any) -> None:
        super().__init__(task_id=task_id, **kwargs)
        self.path = path
        self._validate_unless_templated()

    def validate_fields(self, partial: bool = False) -> None:
        path = self.path
        if self._skip(path, partial):
            return
        if not isinstance(path, str) or not path.strip():
            raise SensorDefinitionError(f"field 'path': must be a non-empty string, got {path!r}")
        if _CONTROL.search(path):
            raise SensorDefinitionError(f"field 'path': contains a control character: {path!r}")
        if not (path.startswith("/") or _SCHEME.match(path)):
            raise SensorDefinitionError(
                f"field 'path': must be absolute or a URI (file://, hdfs://, s3a://), got {path!r}"
            )
        # A bare absolute path resolves against the cluster's fs.defaultFS, as in Spark itself.
        self.path = path

    def checks(self) -> list[Check]:
        return [PathCheck(self.path)]
