"""Hive partition sensors, answered in batches through the Spark catalog."""

from __future__ import annotations

from typing import Any, cast

from smartsensor.sensors.base import BaseSensor, smart_eligible
from smartsensor.sensors.checks import Check, PartitionCheck
from smartsensor.sensors.errors import SensorDefinitionError
from smartsensor.sensors.partitions import canonical_spec, format_partition_name, parse_partition_name, parse_table


@smart_eligible
class NamedHivePartitionSensor(BaseSensor):
    """Waits until every named partition exists: ``["db.table/ds=2026-11-22/hr=00", ...]``.

    Values follow Hive's partition-name format: write ``/``, ``=`` and ``%`` inside a value as
    ``%2F``, ``%3D`` and ``%25``.
    """

    persist_fields = ("partition_names",)

    def __init__(self, task_id: str, partition_names: list[str] | str, **kwargs: Any) -> None:
        super().__init__(task_id=task_id, **kwargs)
        if isinstance(partition_names, str):
            partition_names = [partition_names]
        if not isinstance(partition_names, (list, tuple)) or not partition_names:
            raise SensorDefinitionError("field 'partition_names': must be a non-empty list of partition names")
        self.partition_names = list(partition_names)
        self._validate_unless_templated()

    def validate_fields(self, partial: bool = False) -> None:
        canonical = set()
        for name in self.partition_names:
            if self._skip(name, partial):
                canonical.add(name)
                continue
            db, table, spec = parse_partition_name("partition_names", name)
            canonical.add(format_partition_name(db, table, spec))
        # Equivalent sets of names must hash equal: canonical spelling, sorted, no duplicates.
        self.partition_names = sorted(canonical)

    def checks(self) -> list[Check]:
        out: list[Check] = []
        for name in self.partition_names:
            db, table, spec = parse_partition_name("partition_names", name)
            out.append(PartitionCheck(db, table, tuple(spec.items()), exact=True))
        return out


@smart_eligible
class HivePartitionSensor(BaseSensor):
    """Waits until at least one partition of ``table`` matches the (partial) ``partition`` spec.

    ``partition`` is a dict ``{"ds": "{{ ds }}"}``, text ``"ds={{ ds }}/hr=00"`` or, as Airflow's sensor takes it, a
    Hive filter of equalities joined by AND, ``"ds='{{ ds }}' AND hr='00'"`` (text that quotes something is read as a
    filter; one smartsensor cannot check is refused with the reason); an empty spec means "the table has any
    partition".
    """

    persist_fields = ("table", "partition")

    def __init__(self, task_id: str, table: str, partition: dict[str, str] | str | None = None, **kwargs: Any) -> None:
        super().__init__(task_id=task_id, **kwargs)
        self.table = table
        self.partition = {} if partition is None else partition
        self._validate_unless_templated()

    def validate_fields(self, partial: bool = False) -> None:
        if not self._skip(self.table, partial):
            db, table = parse_table("table", self.table)
            self.table = f"{db}.{table}"
        if not self._skip(self.partition, partial):
            self.partition = canonical_spec("partition", self.partition)

    def checks(self) -> list[Check]:
        db, table = self.table.split(".")
        spec = cast(dict[str, str], self.partition)  # validate_fields made it a dict before checks() runs
        return [PartitionCheck(db, table, tuple(spec.items()), exact=False)]
