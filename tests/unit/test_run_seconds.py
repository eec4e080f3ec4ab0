"""The run's test seconds and CPU seconds by group, folder, module and test (tests.support.run_seconds.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support import run_seconds
from tests.support.run_seconds import (
    CPU_PROPERTY,
    UNGROUPED,
    PhaseCpu,
    RunSeconds,
    Stat,
    TreeCpu,
    cpu_property,
    parse_stat,
)


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


def test_cpu_seconds_are_summed_by_group_folder_module_and_test() -> None:
    seconds = RunSeconds()
    a = "tests/process/test_bench.py::test_bench[W1]@tests.process.test_bench"
    seconds.add(a, "setup", 2.0, cpu_seconds=30.0)
    seconds.add(a, "call", 100.0, cpu_seconds=120.5)
    seconds.add(a, "teardown", 1.0, cpu_seconds=0.5)
    seconds.add("tests/process/test_bench.py::test_other@tests.process.test_bench", "call", 3.0, cpu_seconds=4.0)
    seconds.add("tests/unit/test_z.py::test_c[a@b]", "call", 1.0, cpu_seconds=0.25)
    seconds.add("tests/unit/test_z.py::test_d", "call", 1.0)  # not measured: wall seconds only
    assert seconds.cpu_by_group == {"tests.process.test_bench": 155.0, UNGROUPED: 0.25}
    assert seconds.cpu_by_folder == {"tests/process": 155.0, "tests/unit": 0.25}
    assert seconds.cpu_by_module == {"tests/process/test_bench.py": 155.0, "tests/unit/test_z.py": 0.25}
    assert seconds.cpu_by_test == {
        "tests/process/test_bench.py::test_bench[W1]": 151.0,  # the three phases, the xdist group left off
        "tests/process/test_bench.py::test_other": 4.0,
        "tests/unit/test_z.py::test_c[a@b]": 0.25,
    }
    lines = seconds.lines(top_tests=2)
    cpu = lines[
        lines.index("CPU seconds: 155 in all (the test processes and their descendants; wall seconds beside)") :
    ]
    assert cpu[1:4] == [
        "by xdist group:",
        "       155      106  tests.process.test_bench (2 tests)",
        "         0        2  (ungrouped) (2 tests)",
    ]
    assert cpu[4:7] == ["by folder:", "       155      106  tests/process", "         0        2  tests/unit"]
    assert cpu[-3:] == [
        "top 2 tests (setup + call + teardown):",
        "     151.0  tests/process/test_bench.py::test_bench[W1]",
        "       4.0  tests/process/test_bench.py::test_other",
    ]


def test_no_cpu_section_when_no_phase_was_measured() -> None:
    seconds = RunSeconds()
    seconds.add("tests/unit/test_z.py::test_d", "call", 1.0)
    assert not any(line.startswith("CPU seconds") for line in seconds.lines())


def test_a_reports_cpu_seconds_are_found_among_its_user_properties() -> None:
    assert cpu_property([("other", "x"), (CPU_PROPERTY, 1.5)]) == 1.5
    assert cpu_property([["other", 1], [CPU_PROPERTY, 2]]) == 2.0  # type: ignore[list-item]  # as xdist hands them on
    assert cpu_property([("other", 1.0)]) is None


def test_each_lap_is_the_cpu_since_the_last_reading_and_never_negative() -> None:
    readings = iter([10.0, 12.5, 40.0, 39.0])
    phases = PhaseCpu(read=lambda: next(readings))
    assert phases.lap() is None  # no test begun
    phases.begin()
    assert phases.lap() == 2.5  # setup
    assert phases.lap() == 27.5  # call
    assert phases.lap() == 0.0  # a descendant left the tree (daemonised): its time went with it


def test_a_stat_line_is_read_past_a_command_name_with_spaces_and_parentheses() -> None:
    fields = ["S", "4321"] + ["0"] * 9 + ["150", "25", "7", "3"] + ["20", "0", "1", "0", "98765", "0"]
    assert parse_stat("1234 (java (x) y) " + " ".join(fields)) == Stat(ppid=4321, own=175, reaped=10, start=98765)


def _fake_proc(root: Path, tree: dict[int, tuple[int, int, int]], children_files: bool = True) -> None:
    """A /proc of ``tree`` (pid: (ppid, own ticks, reaped ticks); the pid is its start time) with one thread per
    process, replacing what was there."""
    shutil.rmtree(root, ignore_errors=True)
    for pid, (ppid, own, reaped) in tree.items():
        task = root / str(pid) / "task" / str(pid)
        task.mkdir(parents=True)
        times = [str(own), "0", str(reaped), "0"]
        stat = f"{pid} (p {pid}) S {ppid} " + " ".join(["0"] * 9 + times + ["20", "0", "1", "0", str(pid), "0"])
        (root / str(pid) / "stat").write_text(stat)
        (task / "stat").write_text(stat)
        if children_files:
            (task / "children").write_text(" ".join(str(c) for c, (p, _, _) in tree.items() if p == pid) + " ")


@pytest.mark.parametrize("children_files", [True, False], ids=["children-files", "ppid-scan"])
def test_the_descendants_are_every_process_below_the_root_and_no_other(tmp_path: Path, children_files: bool) -> None:
    tree = {1: (0, 5, 0), 100: (1, 1, 0), 200: (100, 7, 0), 201: (100, 11, 2), 300: (201, 13, 0), 400: (1, 17, 0)}
    _fake_proc(tmp_path, tree, children_files)
    assert {pid: st.ticks for pid, st in run_seconds._descendants(100, tmp_path).items()} == {
        200: 7,
        201: 13,
        300: 13,
    }
    assert run_seconds._descendants(300, tmp_path) == {}


def test_the_tree_counts_what_leaves_it_alive_and_what_init_reaps(tmp_path: Path) -> None:
    rusage = [1.0, 0.0]  # the root's own seconds, and its reaped children's
    tree = TreeCpu(root=10, rusage=lambda: (rusage[0], rusage[1]), proc=tmp_path, ticks=100)
    # the root (10) runs a CLI (100) that starts a JVM (200)
    _fake_proc(tmp_path, {1: (0, 0, 0), 10: (1, 100, 0), 100: (10, 50, 0), 200: (100, 30, 0)})
    assert tree.read() == pytest.approx(1.8)
    # the CLI exits and the root reaps it (60 ticks in all); the JVM, orphaned to init, works on
    _fake_proc(tmp_path, {1: (0, 0, 0), 10: (1, 100, 0), 200: (1, 40, 0)})
    rusage[1] = 0.6
    assert tree.read() == pytest.approx(2.0)  # 1 + 0.6 + the JVM's 0.4, once
    # the JVM ends and init reaps it: its time stays counted; a new child (300) starts
    _fake_proc(tmp_path, {1: (0, 0, 0), 10: (1, 100, 0), 300: (10, 5, 0)})
    assert tree.read() == pytest.approx(2.05)
    # the new child runs a short command it reaps (3 ticks), then the root reaps the child: nothing counted twice
    _fake_proc(tmp_path, {1: (0, 0, 0), 10: (1, 100, 0), 300: (10, 6, 3)})
    assert tree.read() == pytest.approx(2.09)
    _fake_proc(tmp_path, {1: (0, 0, 0), 10: (1, 100, 0)})
    rusage[1] = 0.6 + 0.09
    assert tree.read() == pytest.approx(2.09)
