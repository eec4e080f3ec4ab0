"""The layout holds: imports run one way between layers, no module imports itself back through others,
and no module grows past what a newcomer can follow (ARCHITECTURE.md draws the layers).

What is measured is complexity, not length, so that one concept can stay in one file however much it
documents itself:

- per function: ruff's C901 (``max-complexity`` in pyproject.toml, run by ``./scripts/lint.sh``) is the one gate;
  there is no second count here.
- ``MAX_STATEMENTS`` per module: every statement, nested ones included; docstrings count one, comments and
  blank or wrapped lines none. The largest module today has about 250 (``service/round/range_rounds``); 350 leaves room
  for a concept to grow in its own file and still catches a module that has become two.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.common import ROOT

# Source folders and the package each installs as (setup.cfg package_dir).
PACKAGES = {
    "smartsensor": ROOT / "smartsensor",
    "smartsensor.sensors": ROOT / "sensors",
    "smartsensor.schema": ROOT / "schema",
    "smartsensor.hive_filter": ROOT / "providers" / "airflow" / "smartsensor_airflow" / "hive_filter",
}

# Lower number = lower layer. A module may import its own layer or lower ones, never a higher one.
ENTRY, SERVICE, ADAPTERS, PORTS, DOMAIN = 4, 3, 2, 1, 0
MAX_STATEMENTS = 350


def layer_of(module: str) -> int:
    if module.startswith(("smartsensor.cli", "smartsensor.api")):
        return ENTRY
    if module.startswith("smartsensor.service"):
        return SERVICE
    if module.startswith(("smartsensor.adapters", "smartsensor.schema")):
        return ADAPTERS
    if module == "smartsensor.ports":
        return PORTS
    return DOMAIN  # smartsensor.domain, .config, the sensor library (smartsensor.sensors), .hive_filter


def modules() -> dict[str, Path]:
    out = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([package, *parts])] = path
    return out


def imports_of(path: Path, name: str, known: set[str]) -> set[str]:
    """Modules of ours that ``path`` imports anywhere in it (lazy imports inside functions included)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        for t in targets:
            while t and t not in known:
                t = t.rsplit(".", 1)[0] if "." in t else ""
            if t and t != name:
                found.add(t)
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(path, name, known) for name, path in mods.items()}


def test_every_import_runs_down_the_layers() -> None:
    upward = [
        f"{a} (layer {layer_of(a)}) imports {b} (layer {layer_of(b)})"
        for a, deps in graph().items()
        for b in deps
        if layer_of(b) > layer_of(a) and not (a.startswith(b + ".") or b == "smartsensor")
    ]
    assert upward == []


def test_no_import_cycles() -> None:
    g = graph()
    # a package's __init__ re-exporting its submodules is not a cycle between modules
    edges = {a: {b for b in deps if not a.startswith(b + ".") and not b.startswith(a + ".")} for a, deps in g.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert cycles == []


def test_modules_stay_readable() -> None:
    statements = {
        name: sum(isinstance(node, ast.stmt) for node in ast.walk(ast.parse(path.read_text())))
        for name, path in modules().items()
    }
    large = {name: n for name, n in statements.items() if n > MAX_STATEMENTS}
    assert large == {}


def test_the_layer_rule_sees_real_violations() -> None:
    """The checker itself: an upward import is found."""
    assert (
        layer_of("smartsensor.domain.timing")
        < layer_of("smartsensor.service.round.range_rounds")
        < layer_of("smartsensor.cli")
    )
    assert layer_of("smartsensor.adapters.catalog.batch") == ADAPTERS and layer_of("smartsensor.sensors.hive") == DOMAIN
    g = graph()
    assert "smartsensor.ports" in g["smartsensor.adapters.catalog.batch"]  # a backend lists through the port
    assert "smartsensor.ports" in g["smartsensor.service.round.range_rounds"]
    assert "smartsensor.domain.transitions" in g["smartsensor.ports"]
