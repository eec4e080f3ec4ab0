"""What a file both distributions ship (the provider's ``hive_filter`` and ``wire``) may import: the standard
library alone, by absolute names (a relative import would name a different package in each distribution)."""

from __future__ import annotations

import ast
from pathlib import Path


def top_level_imports(path: Path) -> set[str]:
    """The top-level packages ``path`` imports anywhere in it; fails on a relative import."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: a relative import would name a different package in each distribution"
            found.add((node.module or "").split(".")[0])
    return found
