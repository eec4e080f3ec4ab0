"""The benchmark (``scripts/bench/``, and the set-up it shares with the tests: ``scripts/harness/``) drives the product
through its public seams only (ARCHITECTURE.md, "scripts/"): what it may import from smartsensor is listed here, by
module, and nothing private (a ``_name``) is imported, read off a smartsensor module or overridden in a subclass of a
smartsensor class. A micro-benchmark whose subject is one
component may import that component too (``SUBJECTS``). The bench's own set-up of its throwaway database is its own
SQL on the schema, ``scripts/bench/sql.py``.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.common import ROOT
from tests.unit.test_layers import modules

BENCH = ROOT / "scripts" / "bench"
HARNESS = ROOT / "scripts" / "harness"  # the set-up the benchmarks share with tests/support: held to the same seams


def _files() -> list[Path]:
    return sorted([*BENCH.glob("*.py"), *HARNESS.glob("*.py")])


# What any file of the benchmark may import from smartsensor.
SEAMS = {
    # the vocabulary every layer shares: settings, keys, rows and states, the ports (and the table names they take),
    # the sensor library, the schema
    "smartsensor.config",
    "smartsensor.domain.keys",
    "smartsensor.domain.rows",
    "smartsensor.domain.states",
    "smartsensor.ports",
    "smartsensor.hive_filter.names",
    "smartsensor.sensors",
    "smartsensor.sensors.checks",
    "smartsensor.sensors.errors",
    "smartsensor.schema.models",
    # the service entry points the CLI calls: submit, worker, signal, status
    "smartsensor.standalone.registration",
    "smartsensor.service.round.range_rounds",
    "smartsensor.service.round.report",
    "smartsensor.service.signals",
    "smartsensor.service.status",
    # a worker process's composition root (its served ranges and loop, built as `worker` builds them)
    "smartsensor.roots.worker",
    # the CLI itself, as a process, and a process's one stop
    "smartsensor.adapters.process",
    "smartsensor.adapters.lifecycle",
    # the adapters the entry points wire behind the ports (the registration, signal and status stores, the catalog
    # backends), and the processes and engines they start (the metadata DB, Spark, the metastore service)
    "smartsensor.adapters.sql.engine",
    "smartsensor.adapters.sql.signals",
    "smartsensor.adapters.sql.registration_store",
    "smartsensor.adapters.sql.status_store",
    "smartsensor.adapters.catalog.batch",
    "smartsensor.adapters.catalog.thrift_catalog",
    "smartsensor.adapters.catalog.metastore_db",
    "smartsensor.adapters.catalog.partition_feed",
    "smartsensor.adapters.spark",
    "smartsensor.adapters.metastore_service",
    "smartsensor.adapters.metastore_service_process",
    "smartsensor.adapters.metastore_db_setup",
}

# A micro-benchmark's subject: the component it times, which only that file may import.
SUBJECTS = {
    "prune.py": {"smartsensor.service.retention"},  # what retention deletes, in how long, and the size it leaves
    "landings.py": {  # what publishing landings costs the metastore, per way of learning them, on its own clock
        "smartsensor.service.landings",
        "smartsensor.adapters.sql.landings",
        "smartsensor.adapters.catalog.table_listings",
        "smartsensor.adapters.periodic",
        "smartsensor.domain.landings",
    },
    "templates.py": {"smartsensor.sensors.templating"},  # rendering templates
    "status_scrape.py": {  # what one `status` costs, query by query
        "smartsensor.adapters.sql.status",
        "smartsensor.adapters.sql.leases",
        "smartsensor.adapters.sql.tasks",
    },
}

# Private names still used, with why. --profile's EXPLAIN records the statement MetastoreDbCatalog sends by
# overriding its _rows: a public hook on it is still to come.
PRIVATE = {("metastore_load.py", "_rows")}


def _ours(module: str) -> bool:
    return module == "smartsensor" or module.startswith("smartsensor.")


def _module_of(node: ast.ImportFrom | ast.Import, known: set[str]) -> list[tuple[str, str]]:
    """(module, name) of each smartsensor import: the module ``from A import b`` reads (A.b when that is a module)."""
    if isinstance(node, ast.Import):
        return [(a.name, a.asname or a.name.split(".")[0]) for a in node.names if _ours(a.name)]
    base = node.module or ""
    if node.level or not _ours(base):
        return []
    return [(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base, a.asname or a.name) for a in node.names]


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def violations(source: str, filename: str, known: set[str]) -> list[str]:
    """What ``filename`` (a file of scripts/bench) imports or uses of smartsensor beyond its seams."""
    tree = ast.parse(source)
    allowed = SEAMS | SUBJECTS.get(filename, set())
    out, bound = [], set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for module, name in _module_of(node, known):
                bound.add(name)
                if module not in allowed:
                    out.append(f"{filename} imports {module}")
                if isinstance(node, ast.ImportFrom) and _is_private(name) and (filename, name) not in PRIVATE:
                    out.append(f"{filename} imports {module}.{name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
            if _is_private(node.attr) and (filename, node.attr) not in PRIVATE:
                out.append(f"{filename} reads {node.value.id}.{node.attr}")
        if isinstance(node, ast.ClassDef) and any(isinstance(b, ast.Name) and b.id in bound for b in node.bases):
            out += [
                f"{filename}: {node.name} uses {name} of a smartsensor class"
                for name in _private_in_subclass(node)
                if (filename, name) not in PRIVATE
            ]
    return out


def _private_in_subclass(node: ast.ClassDef) -> list[str]:
    """The private names a subclass of a smartsensor class overrides (``def _x``) or reaches (``super()._x``)."""
    found = []
    for item in ast.walk(node):
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_private(item.name):
            found.append(item.name)
        elif isinstance(item, ast.Attribute) and _is_private(item.attr) and not isinstance(item.value, ast.Name):
            found.append(item.attr)  # super()._x, or a private attribute of what a call returned
    return found


def test_the_benchmark_uses_only_the_public_seams() -> None:
    known = set(modules())
    found = [v for path in _files() for v in violations(path.read_text(), path.name, known)]
    assert found == []


def test_the_seams_are_real_modules_and_used() -> None:
    """Every module listed exists, and every one is imported by some file of the bench (no stale entries)."""
    known = set(modules())
    listed = SEAMS | set().union(*SUBJECTS.values())
    assert listed - known == set()
    used = {
        module
        for path in _files()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for module, _ in _module_of(node, known)
    }
    assert listed - used == set()
    assert {filename for filename, _ in PRIVATE} | set(SUBJECTS) <= {p.name for p in BENCH.glob("*.py")}


def test_the_seam_rule_sees_real_violations() -> None:
    """The checker itself: a named query, a private name imported, read off a module or overridden, and another
    file's subject are each found; the seams are not."""
    known = set(modules())
    source = """
from smartsensor.adapters.sql import tasks as task_sql
from smartsensor.service.round import range_rounds
from smartsensor.service.round.range_rounds import _finish_all, run_round
from smartsensor.sensors.templating import render_value
from smartsensor.adapters.catalog.metastore_db import MetastoreDbCatalog
import smartsensor.adapters.sql.leases

range_rounds._finish_all = None

class Recording(MetastoreDbCatalog):
    def _rows(self, kind):
        return super()._rows(kind)
"""
    assert sorted(violations(source, "bench.py", known)) == [
        "bench.py imports smartsensor.adapters.sql.leases",
        "bench.py imports smartsensor.adapters.sql.tasks",
        "bench.py imports smartsensor.sensors.templating",
        "bench.py imports smartsensor.service.round.range_rounds._finish_all",
        "bench.py reads range_rounds._finish_all",
        "bench.py: Recording uses _rows of a smartsensor class",
        "bench.py: Recording uses _rows of a smartsensor class",
    ]
    # a subject is allowed in its own file only, a listed private name in its own file only
    assert violations("from smartsensor.sensors.templating import render_value\n", "templates.py", known) == []
    assert sorted(violations(source, "metastore_load.py", known)) == [
        "metastore_load.py imports smartsensor.adapters.sql.leases",
        "metastore_load.py imports smartsensor.adapters.sql.tasks",
        "metastore_load.py imports smartsensor.sensors.templating",
        "metastore_load.py imports smartsensor.service.round.range_rounds._finish_all",
        "metastore_load.py reads range_rounds._finish_all",
    ]
