"""The run's test seconds by group and folder (tests.support.run_seconds.py)."""

from __future__ import annotations

from tests.support.run_seconds import UNGROUPED, RunSeconds


def test_seconds_are_summed_by_xdist_group_and_folder() -> None:
    seconds = RunSeconds()
    seconds.add("tests/airflow/test_x.py::test_a[3.3.2]@airflow-3.3.2", "setup", 30.0)
    seconds.add("tests/airflow/test_x.py::test_a[3.3.2]@airflow-3.3.2", "call", 10.0)
    seconds.add("tests/airflow/test_y.py::test_b[3.3.2]@airflow-3.3.2", "call", 5.0)
    seconds.add("tests/unit/test_z.py::test_c[a@b]", "call", 1.5)  # an @ in a parameter, no group
    assert seconds.by_group == {"airflow-3.3.2": 45.0, UNGROUPED: 1.5}
    assert seconds.by_folder == {"tests/airflow": 45.0, "tests/unit": 1.5}
    assert seconds.tests == {"airflow-3.3.2": 2, UNGROUPED: 1}
    lines = seconds.lines()
    assert lines[0] == "test seconds: 46 in all"
    assert lines[2] == "        45  airflow-3.3.2 (2 tests)"
    assert lines[-1] == "         2  tests/unit"
