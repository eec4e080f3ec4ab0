"""The layout holds: imports run one way between layers, no module imports itself back through others,
and no function or module grows past what a newcomer can follow (ARCHITECTURE.md draws the layers).

What is measured is complexity, not length, so that one concept can stay in one file however much it
documents itself:

- ``MAX_BRANCHES`` per function: its cyclomatic number, 1 + each ``if``/``elif``, conditional expression,
  ``for``, ``while``, ``except``, ``case``, comprehension ``for``/``if`` and each extra operand of ``and``/``or``
  (a nested function or class is measured on its own; a lambda counts in the function around it). 26 is
  the most tangled function today (``service/leases.heartbeat``; next ``service/status.collect_status``, 23):
  nothing may get worse than that, and the limit goes down as those are split. ruff's C901 (at 14, in
  pyproject.toml, counted its own way) checks the same thing in ``./scripts/lint.sh``.
- ``MAX_STATEMENTS`` per module: every statement, nested ones included; docstrings count one, comments and
  blank or wrapped lines none. The largest module today has about 250 (``service/round/worker``); 350 leaves room
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
}

# Lower number = lower layer. A module may import its own layer or lower ones, never a higher one.
ENTRY, SERVICE, ADAPTERS, PORTS, DOMAIN = 4, 3, 2, 1, 0
MAX_BRANCHES = 26
MAX_STATEMENTS = 350
_DECISIONS = (ast.If, ast.IfExp, ast.For, ast.AsyncFor, ast.While, ast.ExceptHandler, ast.match_case)


def layer_of(module: str) -> int:
    if module.startswith(("smartsensor.cli", "smartsensor.api")):
        return ENTRY
    if module.startswith("smartsensor.service"):
        return SERVICE
    if module.startswith(("smartsensor.adapters", "smartsensor.schema")):
        return ADAPTERS
    if module == "smartsensor.ports":
        return PORTS
    return DOMAIN  # smartsensor.domain, .config, the sensor library (smartsensor.sensors)


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


def _own_nodes(function: ast.AST) -> list[ast.AST]:
    """The nodes of a function's own body: nested functions and classes are left to be measured on their own."""
    out, stack = [], list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append(node)
            stack.extend(ast.iter_child_nodes(node))
    return out


def branches(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The function's cyclomatic number, counted as the module docstring says."""
    n = 1
    for node in _own_nodes(function):
        if isinstance(node, _DECISIONS):
            n += 1
        elif isinstance(node, ast.comprehension):
            n += 1 + len(node.ifs)
        elif isinstance(node, ast.BoolOp):
            n += len(node.values) - 1
    return n


def test_functions_stay_simple() -> None:
    tangled = {
        f"{name}.{node.name} (line {node.lineno})": b
        for name, path in modules().items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (b := branches(node)) > MAX_BRANCHES
    }
    assert tangled == {}


def test_modules_stay_readable() -> None:
    statements = {
        name: sum(isinstance(node, ast.stmt) for node in ast.walk(ast.parse(path.read_text())))
        for name, path in modules().items()
    }
    large = {name: n for name, n in statements.items() if n > MAX_STATEMENTS}
    assert large == {}


def test_the_complexity_measure_counts_branches() -> None:
    """The measure itself, on a function with one of each kind of branch."""
    code = """
def f(xs, y):
    def inner(z):
        if z:
            return 1
    if y and xs or not y:
        pass
    elif y:
        pass
    for x in xs:
        while x:
            x = x - 1 if x > 1 else 0
    try:
        pass
    except ValueError:
        pass
    return [x for x in xs if x if not y]
"""
    outer, inner = [n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.FunctionDef)]
    assert branches(inner) == 2
    # 1 + if + and/or (2) + elif + for + while + conditional expression + except + comprehension for + 2 ifs
    assert branches(outer) == 1 + 1 + 2 + 1 + 1 + 1 + 1 + 1 + 1 + 2


def test_the_layer_rule_sees_real_violations() -> None:
    """The checker itself: an upward import is found."""
    assert (
        layer_of("smartsensor.domain.timing")
        < layer_of("smartsensor.service.round.worker")
        < layer_of("smartsensor.cli")
    )
    assert layer_of("smartsensor.adapters.catalog.batch") == ADAPTERS and layer_of("smartsensor.sensors.hive") == DOMAIN
    g = graph()
    assert "smartsensor.ports" in g["smartsensor.adapters.catalog.batch"]  # a backend lists through the port
    assert "smartsensor.ports" in g["smartsensor.service.round.worker"]
    assert "smartsensor.domain.transitions" in g["smartsensor.ports"]
