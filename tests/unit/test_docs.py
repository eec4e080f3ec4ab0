"""The documents a newcomer reads hold together (issue 34, item 7): README stays short, its relative links and
those of docs/ lead somewhere, every module path ARCHITECTURE.md names exists, and the reference pages the site
generates from the code cover every configuration key and every command. The site itself is built with warnings as
errors by ``./scripts/docs.sh`` (``.ci/run``), which also checks the links between pages and their anchors."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import click

from scripts.docs import gen_reference
from tests.support.common import ROOT

README_MAX_LINES = 200
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
# A path-like name: folders separated by "/" (`service/round/`, `adapters/sql/tasks.in_range`), or a file `x.py`.
PATH = re.compile(
    r"(?<![\w/.$-])(?:[a-z_][a-z0-9_.-]*/)+(?:[a-z_][A-Za-z0-9_.-]*)?|(?<![\w/.$-])[a-z_][a-z0-9_]*\.py\b"
)
# Pages the site adds at build time (scripts/docs/gen_reference.py): linked from docs/, never on disk.
GENERATED = {*gen_reference.INCLUDED.values(), gen_reference.OPENAPI_PAGE}


def slug(heading: str) -> str:
    """A heading's anchor as mkdocs (and, for plain headings, GitHub) makes it."""
    text = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.M)}


def broken_links(page: Path) -> list[str]:
    """The relative links of ``page`` whose file (or, in a Markdown file, heading) does not exist."""
    broken = []
    for match in LINK.finditer(page.read_text(encoding="utf-8")):
        target = match.group("target")
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if dest.relative_to(ROOT.resolve()).as_posix() in {f"docs/{g}" for g in GENERATED}:
            continue
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(target)
    return broken


def test_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move the detail to docs/"


def test_readme_and_docs_links_resolve() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    broken = {p.relative_to(ROOT).as_posix(): b for p in pages if (b := broken_links(p))}
    assert not broken
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "(docs/index.md)" in readme and "./scripts/demo.sh" in readme and "./scripts/test.sh" in readme


def path_names(text: str) -> list[list[str]]:
    """The path-like names of each block of ``text``: a fenced block (a drawing) whole; elsewhere the code spans
    of each paragraph, list item and table row."""
    blocks: list[list[str]] = []
    for i, chunk in enumerate(re.split(r"^```.*$", text, flags=re.M)):
        if i % 2:
            blocks.append([m.group(0) for m in PATH.finditer(chunk)])
            continue
        for para in re.split(r"\n\s*\n|\n(?=- |\| |#)", chunk):
            blocks.append([m.group(0) for span in re.findall(r"`([^`\n]+)`", para) for m in PATH.finditer(span)])
    return blocks


def resolves(name: str, bases: list[Path]) -> bool:
    """``name`` is a file or folder under one of ``bases``; ``module.attr`` and ``module`` mean ``module.py``."""
    name = name.rstrip("/.")
    candidates = [name, f"{name}.py"]
    if "." in name.rsplit("/", 1)[-1]:
        module = name.rsplit(".", 1)[0]
        candidates += [module, f"{module}.py"]
    return any((base / c).exists() for base in bases for c in candidates)


def test_architecture_names_existing_modules() -> None:
    """Every path ARCHITECTURE.md names exists: relative to the repository root, to smartsensor/, or to a folder
    the same paragraph (list item, table row, drawing) named before it (`scripts/` … `bench/`)."""
    missing = []
    checked = 0
    for names in path_names((ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")):
        bases = [ROOT, ROOT / "smartsensor"]
        for name in names:
            checked += 1
            found = next((b / name.rstrip("/") for b in bases if resolves(name, [b])), None)
            if found is None:
                missing.append(name)
            elif found.is_dir():
                bases.append(found)
    assert checked > 50  # the extraction still finds the module paths
    assert not missing, f"ARCHITECTURE.md names paths that do not exist: {missing}"


def test_generated_reference_covers_the_code() -> None:
    from smartsensor.cli import main
    from smartsensor.config_keys import KEYS

    config = gen_reference.config_reference()
    assert all(f"`{key.name}`" in config for key in KEYS)
    cli = gen_reference.cli_reference()
    ctx = click.Context(main, info_name="smartsensor")
    assert all(f"### `{c.command_path}`" in cli for _, c in gen_reference._commands(main, ctx))
    page = gen_reference.expand("<!-- generated: config -->")
    assert "`[smart_sensor]`" in page
    link = gen_reference.rewrite_links("[a](../../ARCHITECTURE.md#x) [b](../cli.md)", "reference/http-api.md")
    assert link == "[a](../architecture.md#x) [b](../cli.md)"


def test_architecture_draws_every_port() -> None:
    """Each Protocol of smartsensor/ports/ is named on ARCHITECTURE.md's ports layer (and nothing else is)."""
    protocols = {
        node.name
        for path in (ROOT / "smartsensor" / "ports").glob("*.py")
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.ClassDef) and any(getattr(base, "id", None) == "Protocol" for base in node.bases)
    }
    text = (ROOT / "ARCHITECTURE.md").read_text()
    layer = text[text.index(" ports          smartsensor/ports/") : text.index(" domain         smartsensor/domain/")]
    drawn = set(re.findall(r"\b[A-Z][A-Za-z]+\b", layer)) - {"Protocols"}
    assert "RoundStore" in protocols and drawn == protocols, (sorted(protocols), sorted(drawn))
