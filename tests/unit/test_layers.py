"""The layout holds: imports run one way between layers (entry points → the two doors, standalone and external →
the service core → adapters → ports → domain), the two doors never import each other, no module imports itself
back through others, and no module grows past what a newcomer can follow (ARCHITECTURE.md draws the layers).

What is measured is complexity, not length, so that one concept can stay in one file however much it
documents itself:

- per function: ruff's C901 (``max-complexity`` in pyproject.toml, run by ``./scripts/lint.sh``) is the one gate;
  there is no second count here.
- ``MAX_STATEMENTS`` per module: every statement, nested ones included; docstrings count one, comments and
  blank or wrapped lines none. The largest module today has about 250 (``service/round/range_rounds``); 350 leaves room
  for a concept to grow in its own file and still catches a module that has become two.

SQL transactions live in the adapters: outside ``smartsensor.adapters`` and ``smartsensor.schema`` (the tables' DDL
and the migrations) no module opens a connection or a transaction (``.begin()``, ``.connect()``), executes on an
engine, makes an ORM ``Session`` or writes SQL text (``sqlalchemy.text``); it calls an adapter's operation, which does
(``sql_outside_adapters``). Outside the adapters, the schema and the composition roots (``SQL_ALLOWED``) no module
imports SQLAlchemy at all: they take ports (``sqlalchemy_imports``).
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
    "smartsensor.wire": ROOT / "providers" / "airflow" / "smartsensor_airflow" / "wire",
}

# Lower number = lower layer. A module may import its own layer or lower ones, never a higher one.
ENTRY, DOORS, SERVICE, ADAPTERS, PORTS, DOMAIN = 5, 4, 3, 2, 1, 0
MAX_STATEMENTS = 350
# The two doors a task enters by: one layer, side by side; neither imports the other.
DOOR_PACKAGES = ("smartsensor.standalone", "smartsensor.external")


def layer_of(module: str) -> int:
    if module.startswith(("smartsensor.cli", "smartsensor.api", "smartsensor.roots")):
        return ENTRY  # the commands, the HTTP API, and the composition roots they call
    if door_of(module):
        return DOORS
    if module.startswith("smartsensor.service"):
        return SERVICE
    if module.startswith(("smartsensor.adapters", "smartsensor.schema")):
        return ADAPTERS
    if module == "smartsensor.ports" or module.startswith("smartsensor.ports."):
        return PORTS
    return DOMAIN  # smartsensor.domain, .config, the sensor library (smartsensor.sensors), .hive_filter, .wire


def door_of(module: str) -> str | None:
    """The door package ``module`` is in (``smartsensor.standalone`` or ``smartsensor.external``), else None."""
    return next((door for door in DOOR_PACKAGES if module == door or module.startswith(door + ".")), None)


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


def upward_imports(g: dict[str, set[str]]) -> list[str]:
    """Imports from a layer into a higher one (a package's own ``__init__`` and ``smartsensor`` itself aside)."""
    return [
        f"{a} (layer {layer_of(a)}) imports {b} (layer {layer_of(b)})"
        for a, deps in g.items()
        for b in deps
        if layer_of(b) > layer_of(a) and not (a.startswith(b + ".") or b == "smartsensor")
    ]


def test_every_import_runs_down_the_layers() -> None:
    assert upward_imports(graph()) == []


def door_crossings(g: dict[str, set[str]]) -> list[str]:
    """Imports from one door into the other."""
    return [
        f"{a} imports {b}"
        for a, deps in g.items()
        for b in deps
        if door_of(a) and door_of(b) and door_of(a) != door_of(b)
    ]


def test_the_doors_never_import_each_other() -> None:
    assert door_crossings(graph()) == []


def test_the_doors_stand_between_the_entry_points_and_the_core() -> None:
    g = graph()
    assert layer_of("smartsensor.service.task_rows") < layer_of("smartsensor.standalone.registration") < ENTRY
    assert layer_of("smartsensor.external.registration") == layer_of("smartsensor.standalone.registration") == DOORS
    # both doors build their rows from the core's, and the entry points call the doors
    assert "smartsensor.service.task_rows" in g["smartsensor.standalone.registration"]
    assert "smartsensor.service.task_rows" in g["smartsensor.external.registration"]
    assert "smartsensor.standalone.registration" in g["smartsensor.cli.tasks"]
    assert "smartsensor.external.registration" in g["smartsensor.api.tasks"]


def test_the_door_rules_see_real_violations() -> None:
    """The checkers themselves, on a graph with the imports the layers forbid: a door into the other door (either
    way) and the core into a door."""
    g = {name: set(deps) for name, deps in graph().items()}
    g["smartsensor.external.registration"].add("smartsensor.standalone.registration")
    g["smartsensor.standalone.scheduler"].add("smartsensor.external.states")
    g["smartsensor.service.task_rows"].add("smartsensor.external.registration")
    g["smartsensor.service.round.range_rounds"].add("smartsensor.standalone.classic")
    assert sorted(door_crossings(g)) == [
        "smartsensor.external.registration imports smartsensor.standalone.registration",
        "smartsensor.standalone.scheduler imports smartsensor.external.states",
    ]
    assert sorted(upward_imports(g)) == [
        "smartsensor.service.round.range_rounds (layer 3) imports smartsensor.standalone.classic (layer 4)",
        "smartsensor.service.task_rows (layer 3) imports smartsensor.external.registration (layer 4)",
    ]


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
    assert "smartsensor.domain.transitions" in g["smartsensor.ports.round"]


# Where SQL may be opened and written: the adapters, and the schema (its tables' DDL, the migrations).
SQL_PACKAGES = ("smartsensor.adapters", "smartsensor.schema")


def _dotted(node: ast.expr) -> str:
    """``a.b.c`` for a name or attribute chain, ``f()`` for a call's callee; '' for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return f"{_dotted(node.func)}()"
    return ""


def _sqlalchemy_names(tree: ast.Module) -> tuple[set[str], dict[str, str]]:
    """(names bound to sqlalchemy modules, {name: "text" or "Session"} for those two imported from sqlalchemy)."""
    modules: set[str] = set()
    imported: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] == "sqlalchemy"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sqlalchemy" and not node.level:
            imported |= {a.asname or a.name: a.name for a in node.names if a.name in ("text", "Session")}
    return modules, imported


def _sql_call(call: ast.Call, modules: set[str], imported: dict[str, str]) -> str | None:
    """What SQL ``call`` opens or writes, if any."""
    func, callee = call.func, _dotted(call.func)
    if isinstance(func, ast.Attribute) and func.attr in ("begin", "connect") and not call.args and not call.keywords:
        return f"{callee}(): a connection or transaction opened"
    if isinstance(func, ast.Attribute) and func.attr == "raw_connection":
        return f"{callee}(): a DB-API connection taken from the pool"
    if (
        isinstance(func, ast.Attribute)
        and func.attr == "execute"
        and _dotted(func.value).endswith(("engine", "engine()"))
    ):
        return f"{callee}(): a statement executed on an engine"
    name = imported.get(callee) or (
        func.attr if isinstance(func, ast.Attribute) and callee.split(".")[0] in modules else ""
    )
    if name in ("text", "Session"):
        return f"{callee}(): sqlalchemy.{name}"
    return None


def sql_outside_adapters(sources: dict[str, tuple[str, str]]) -> list[str]:
    """``path:line: what`` for every SQL connection (pooled or raw), transaction, engine execute, ORM Session or
    SQL text in ``sources`` ({module: (path, source)}) outside ``SQL_PACKAGES``."""
    found: list[tuple[str, int, str]] = []
    for module, (path, source) in sorted(sources.items()):
        if module.startswith(tuple(f"{p}." for p in SQL_PACKAGES)) or module in SQL_PACKAGES:
            continue
        tree = ast.parse(source)
        modules, imported = _sqlalchemy_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and (what := _sql_call(node, modules, imported)):
                found.append((path, node.lineno, what))
    return [f"{path}:{line}: {what}" for path, line, what in sorted(found)]


def _sources() -> dict[str, tuple[str, str]]:
    return {name: (str(path.relative_to(ROOT)), path.read_text()) for name, path in modules().items()}


def test_sql_transactions_only_in_the_adapters() -> None:
    """The services, the doors and the entry points call an adapter's operation (``adapters/sql/*``, a port);
    none opens a connection or a transaction, or writes SQL, itself."""
    assert sql_outside_adapters(_sources()) == []


def test_the_sql_rule_sees_real_violations() -> None:
    """The checker itself, on a module of the service with each kind of violation, and an adapter with the same
    (allowed there); a call that only looks alike (a socket's connect, a listener's own begin with arguments) is
    not one."""
    service = """
import sqlalchemy as sa
from sqlalchemy import text as sql_text
from sqlalchemy.orm import Session

def f(engine, app, sock):
    with engine.begin() as conn:
        conn.execute(sql_text("SELECT 1"))
    with app.engine().connect() as conn:
        pass
    engine.execute("DELETE FROM task_instance")
    Session(engine)
    sa.text("SELECT 2")
    sock.connect(("host", 1))
    app.begin(42)
    engine.raw_connection()
"""
    sources = {
        "smartsensor.service.bad": ("smartsensor/service/bad.py", service),
        "smartsensor.adapters.sql.fine": ("smartsensor/adapters/sql/fine.py", service),
        "smartsensor.schema.migrations.env": ("schema/migrations/env.py", service),
    }
    assert sql_outside_adapters(sources) == [
        "smartsensor/service/bad.py:7: engine.begin(): a connection or transaction opened",
        "smartsensor/service/bad.py:8: sql_text(): sqlalchemy.text",
        "smartsensor/service/bad.py:9: app.engine().connect(): a connection or transaction opened",
        "smartsensor/service/bad.py:11: engine.execute(): a statement executed on an engine",
        "smartsensor/service/bad.py:12: Session(): sqlalchemy.Session",
        "smartsensor/service/bad.py:13: sa.text(): sqlalchemy.text",
        "smartsensor/service/bad.py:16: engine.raw_connection(): a DB-API connection taken from the pool",
    ]


# Where SQLAlchemy may be imported: the adapters, the schema (its tables and migrations) and the composition roots,
# which build the SQL adapters from an engine. Every other module reaches storage through the ports only
# (``smartsensor.ports``: a store is passed in): none imports SQLAlchemy, lazily or for type checking only, so none
# can take an ``Engine`` or catch a driver's error (issue 56).
SQL_ALLOWED = ("smartsensor.adapters", "smartsensor.schema", "smartsensor.roots")
PORTS_ONLY = tuple(
    sorted({".".join(m.split(".")[:2]) for m in modules() if not m.startswith(SQL_ALLOWED) and m != "smartsensor"})
)


def sqlalchemy_imports(sources: dict[str, tuple[str, str]], packages: tuple[str, ...] = PORTS_ONLY) -> list[str]:
    """``path:line: imports sqlalchemy…`` for every import of SQLAlchemy in ``sources`` ({module: (path, source)})
    inside ``packages``."""
    found: list[tuple[str, int, str]] = []
    for module, (path, source) in sorted(sources.items()):
        if not any(module == p or module.startswith(p + ".") for p in packages):
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            found += [(path, node.lineno, name) for name in names if name.split(".")[0] == "sqlalchemy"]
    return [f"{path}:{line}: imports {name}" for path, line, name in sorted(found)]


def test_the_ports_only_packages_never_import_sqlalchemy() -> None:
    """The standalone door takes its stores (``ports.RegistrationStore``, ``SchedulerStore``, ``ClassicRunStore``),
    never an engine: the CLI builds the SQL ones. So does the external door (``ports.ExternalTryStore``):
    ``roots.serve`` builds the SQL one."""
    assert sqlalchemy_imports(_sources()) == []


def test_the_sqlalchemy_rule_sees_real_violations() -> None:
    """The checker itself: a top-level, a lazy and a type-checking import in a ports-only package are found; the
    same in an adapter, or a module merely named like SQLAlchemy, is not."""
    door = """
from typing import TYPE_CHECKING
import sqlalchemy.exc as sa_exc
from my_sqlalchemy_helpers import thing

if TYPE_CHECKING:
    from sqlalchemy import Engine

def f():
    from sqlalchemy.exc import OperationalError
"""
    sources = {
        "smartsensor.standalone.bad": ("smartsensor/standalone/bad.py", door),
        "smartsensor.adapters.sql.fine": ("smartsensor/adapters/sql/fine.py", door),
        "smartsensor.standalonely": ("smartsensor/standalonely.py", door),
    }
    assert sqlalchemy_imports(sources) == [
        "smartsensor/standalone/bad.py:3: imports sqlalchemy.exc",
        "smartsensor/standalone/bad.py:7: imports sqlalchemy",
        "smartsensor/standalone/bad.py:10: imports sqlalchemy.exc",
    ]
    one_more = sqlalchemy_imports(sources, (*PORTS_ONLY, "smartsensor.adapters"))  # a package added by one line
    assert [line.split(":")[0] for line in one_more] == ["smartsensor/adapters/sql/fine.py"] * 3 + [
        "smartsensor/standalone/bad.py"
    ] * 3


# Modules (or packages: a prefix) that take ports, not an Engine, and stand further from the database than
# ``PORTS_ONLY``: neither they nor anything of ours they import, however indirectly, imports SQLAlchemy (issue 56:
# the status side).
NO_SQLALCHEMY_REACHED = (
    "smartsensor.service.status",
    "smartsensor.service.status_report",
    "smartsensor.service.status_snapshot",
    "smartsensor.service.history",
    "smartsensor.service.overview",
    "smartsensor.service.retention",
    "smartsensor.service.savings",
    "smartsensor.service.airflow_partitions",
    "smartsensor.api.page",
)


def _imports_sqlalchemy(path: Path) -> bool:
    """Whether the module at ``path`` imports SQLAlchemy itself (lazily or not)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "sqlalchemy" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "sqlalchemy":
            return True
    return False


def sqlalchemy_reached(roots: tuple[str, ...], g: dict[str, set[str]], direct: set[str]) -> list[str]:
    """Each module under ``roots`` (by prefix) from which ``g``'s imports reach a module in ``direct``, with the way."""
    out = []
    for start in sorted(m for m in g if any(m == r or m.startswith(r + ".") for r in roots)):
        ways: dict[str, list[str]] = {start: [start]}
        todo = [start]
        while todo:
            here = todo.pop()
            if here in direct:
                out.append(" → ".join(ways[here]) + " imports sqlalchemy")
                break
            for nxt in sorted(g.get(here, ())):
                if nxt not in ways:
                    ways[nxt] = [*ways[here], nxt]
                    todo.append(nxt)
    return out


def test_no_sqlalchemy_is_reached_from_the_status_side() -> None:
    mods = modules()
    g = graph()
    direct = {name for name, path in mods.items() if _imports_sqlalchemy(path)}
    for entries in (PORTS_ONLY, NO_SQLALCHEMY_REACHED):
        assert all(any(m == r or m.startswith(r + ".") for m in mods) for r in entries), "an entry names nothing"
    assert sqlalchemy_reached(NO_SQLALCHEMY_REACHED, g, direct) == []
    # the rule sees a real one: the SQL adapters the serve root wires do import it
    assert sqlalchemy_reached(("smartsensor.adapters.sql.status_store",), g, direct)
