"""The storage seam's rows (``domain.rows``) are the tables' columns: a row is made from a result row by position
(``_make``), so a column added, renamed or moved in the models must move in the row too."""

from __future__ import annotations

from smartsensor.domain.keys import TaskKey, VigilKey
from smartsensor.domain.rows import ExternalRow, RetryRow, TaskRow, ZombieRow
from smartsensor.schema.models import external_task, task_instance
from tests.support.common import DAY


def test_rows_hold_their_tables_columns_in_order() -> None:
    assert TaskRow._fields == tuple(task_instance.c.keys())
    assert ExternalRow._fields == tuple(external_task.c.keys())
    for partial in (RetryRow, ZombieRow):
        assert set(partial._fields) < set(TaskRow._fields), partial


def test_a_row_names_its_task_and_its_check() -> None:
    values: dict[str, object] = {name: None for name in TaskRow._fields}
    values.update(dag_id="d", task_id="t", execution_date=DAY, hashcode=7, classpath="c.S", attr_dict="{}")
    row = TaskRow(**values)  # type: ignore[arg-type]  # the columns that do not matter here are NULL
    assert row.key == TaskKey("d", "t", DAY) and row.vigil == VigilKey(7, "c.S", "{}")
    assert row.columns() == values
    ext = ExternalRow("d", "t", "run", -1, 1, None, "t", DAY, DAY)
    assert ext.ti_key == TaskKey("d", "t", DAY)
