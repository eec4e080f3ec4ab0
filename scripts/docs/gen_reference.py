"""The reference pages generated from the code, for the documentation site (mkdocs-material, ``mkdocs.yml``).

mkdocs loads this file as a hook (``hooks:`` in ``mkdocs.yml``), so ``mkdocs build`` needs no step before it and
nothing generated is ever written into ``docs/``:

- ``on_files`` adds ``architecture.md`` and ``changelog.md`` (ARCHITECTURE.md and CHANGELOG.md, which stay at the
  repository root) and ``reference/openapi.json`` (the HTTP API's OpenAPI document) to the site;
- ``on_page_markdown`` replaces a page's ``<!-- generated: config -->``, ``<!-- generated: cli -->`` and
  ``<!-- generated: http-api -->`` markers with the configuration keys (``smartsensor.config_keys.KEYS``), every
  command of the click group ``smartsensor.cli.main`` with its help and options, and every route of the app
  ``smartsensor.roots.serve.create_app`` builds; and it points links to ``../ARCHITECTURE.md`` and ``../CHANGELOG.md``
  (which work when docs/ is read on GitHub) at the included pages.

``python -m scripts.docs.gen_reference OUT_DIR`` writes the three generated sections as Markdown files into OUT_DIR,
to read them without building the site.
"""

from __future__ import annotations

import functools
import inspect
import json
import posixpath
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import click

ROOT = Path(__file__).resolve().parents[2]

# Files kept at the repository root that the site includes as pages: root name -> page in the site.
INCLUDED = {"ARCHITECTURE.md": "architecture.md", "CHANGELOG.md": "changelog.md"}
OPENAPI_PAGE = "reference/openapi.json"
MARKER = re.compile(r"<!-- generated: ([a-z-]+) -->")
LINK = re.compile(r"\]\((?P<target>[^)\s#]+)(?P<anchor>#[^)\s]*)?\)")


def prose(text: str) -> str:
    """Help text as Markdown: ``<`` escaped, so that ``<home>`` is not taken for an HTML tag."""
    return text.replace("&", "&amp;").replace("<", "&lt;")


def cell(text: str) -> str:
    """Text for one Markdown table cell: pipes escaped, on one line."""
    return " ".join(text.replace("|", "\\|").split())


def config_reference() -> str:
    """Every configuration key, one table per section, from ``smartsensor.config_keys.KEYS``."""
    from smartsensor.config import ENV_PREFIX
    from smartsensor.config_keys import KEYS

    lines: list[str] = []
    section = None
    for key in KEYS:
        if key.section != section:
            section = key.section
            lines += ["", f"### `[{section}]`", "", "| key | default | allowed | what it sets |", "|---|---|---|---|"]
        default = f"`{cell(key.default)}`" if key.default != "" else "(empty)"
        allowed = f"{key.bounds[0]:.10g} to {key.bounds[1]:.10g}" if key.bounds else ""
        env = f"{ENV_PREFIX}{key.section.upper()}__{key.name.upper()}"
        lines.append(f"| `{key.name}` | {default} | {allowed} | {prose(cell(key.help))} (env `{env}`) |")
    return "\n".join(lines).lstrip("\n") + "\n"


def _commands(group: click.Group, ctx: click.Context) -> list[tuple[click.Command, click.Context]]:
    """Every command under ``group``, depth first in the order ``--help`` lists them, with its context."""
    found: list[tuple[click.Command, click.Context]] = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        sub = click.Context(command, info_name=name, parent=ctx)
        found.append((command, sub))
        if isinstance(command, click.Group):
            found += _commands(command, sub)
    return found


def _command_section(command: click.Command, ctx: click.Context) -> list[str]:
    lines = ["", f"### `{ctx.command_path}`", "", "```text", command.get_usage(ctx), "```", ""]
    if command.help:
        text = inspect.cleandoc(command.help.split("\f", 1)[0])
        lines += [prose("\n".join(line for line in text.splitlines() if line.strip() != "\b")), ""]
    records = [p.get_help_record(ctx) for p in command.get_params(ctx)]
    options = [r for r in records if r is not None]
    if options:
        lines += ["| option | what it does |", "|---|---|"]
        lines += [f"| `{cell(opts)}` | {prose(cell(text)) or ' '} |" for opts, text in options]
    return lines


def cli_reference() -> str:
    """Every command of ``smartsensor``: its usage, help and options, as ``--help`` prints them."""
    from smartsensor.cli import main

    root = click.Context(main, info_name="smartsensor")
    lines = _command_section(main, root)
    for command, ctx in _commands(main, root):
        lines += _command_section(command, ctx)
    return "\n".join(lines).lstrip("\n") + "\n"


@functools.cache
def openapi_document() -> dict[str, Any]:
    """The OpenAPI document of the app ``smartsensor serve`` runs, built over an unused in-memory database (once per
    build: the JSON page and the HTTP API page both use it; read-only)."""
    from sqlalchemy import create_engine

    from smartsensor.config import load_config
    from smartsensor.roots.serve import create_app

    with tempfile.TemporaryDirectory() as home:
        env = {"SMARTSENSOR_HOME": home, "SMARTSENSOR__CORE__SQL_ALCHEMY_CONN": "sqlite://"}
        engine = create_engine("sqlite://")
        try:
            return create_app(load_config(environ=env), engine, "docs").openapi()
        finally:
            engine.dispose()


def _schema_name(ref_holder: dict[str, Any]) -> str:
    ref = ref_holder.get("schema", {}).get("$ref", "")
    return ref.rsplit("/", 1)[-1] if ref else ""


def http_reference(document: dict[str, Any]) -> str:
    """Each path and method of ``document``: its summary, description, request body and answers."""
    lines: list[str] = []
    for path, methods in document.get("paths", {}).items():
        for method, op in methods.items():
            lines += ["", f"### `{method.upper()} {path}`", "", f"**{op.get('summary', '')}.**"]
            if op.get("description"):
                lines += ["", prose(" ".join(op["description"].split()))]
            body = op.get("requestBody", {}).get("content", {})
            for media, spec in body.items():
                name = _schema_name(spec)
                lines += ["", f"Request body: `{media}`" + (f", schema `{name}`" if name else "") + "."]
            answers = op.get("responses", {})
            if answers:
                lines += ["", "| answer | meaning |", "|---|---|"]
                for code, answer in answers.items():
                    lines.append(f"| {code} | {prose(cell(answer.get('description', '')))} |")
    schemas = sorted(document.get("components", {}).get("schemas", {}))
    if schemas:
        lines += [
            "",
            "### Schemas",
            "",
            "In [openapi.json](openapi.json): " + ", ".join(f"`{s}`" for s in schemas) + ".",
        ]
    return "\n".join(lines).lstrip("\n") + "\n"


GENERATORS = {"config": config_reference, "cli": cli_reference, "http-api": lambda: http_reference(openapi_document())}


def expand(markdown: str) -> str:
    """``markdown`` with each ``<!-- generated: NAME -->`` marker replaced by its generated section."""
    return MARKER.sub(lambda m: GENERATORS[m.group(1)](), markdown)


def rewrite_links(markdown: str, src_uri: str) -> str:
    """Links from a page in docs/ to a root file the site includes now point at the included page."""
    here = posixpath.dirname(src_uri)

    def fix(m: re.Match[str]) -> str:
        target = posixpath.normpath(posixpath.join("docs", here, m.group("target")))
        if target not in INCLUDED:
            return m.group(0)
        return f"]({posixpath.relpath(INCLUDED[target], here or '.')}{m.group('anchor') or ''})"

    return LINK.sub(fix, markdown)


# mkdocs hooks ---------------------------------------------------------------------------------------------------


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for name, page in INCLUDED.items():
        files.append(File.generated(config, page, content=(ROOT / name).read_text(encoding="utf-8")))
    files.append(File.generated(config, OPENAPI_PAGE, content=json.dumps(openapi_document(), indent=2) + "\n"))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return rewrite_links(expand(markdown), page.file.src_uri)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m scripts.docs.gen_reference OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for name, generate in GENERATORS.items():
        (out / f"{name}.md").write_text(generate(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
