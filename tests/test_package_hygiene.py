"""The package's runtime modules keep to their job: no test scaffolding imported at run time."""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "dvpipe"


def _modules():
    """``(path relative to the repository, dotted package of the file, ast)`` of every module of dvpipe."""
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG.parent)
        parts = list(rel.with_suffix("").parts)
        package = parts[:-1]  # the package a relative import starts from (a module's or an __init__'s own)
        yield rel.as_posix(), package, ast.parse(path.read_text(encoding="utf-8"), str(rel))


def _imported(node: ast.AST, package: list[str]) -> list[str]:
    """The absolute module names an import statement names (relative ones resolved against ``package``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        base = package[:len(package) - node.level + 1] if node.level else []
        mod = ".".join(base + ([node.module] if node.module else []))
        return [mod] + [f"{mod}.{a.name}" for a in node.names]
    return []


def test_no_runtime_module_imports_the_test_scaffolding():
    """``dvpipe/testing/`` is test scaffolding: no other module of the package imports it, at module
    level or inside a function."""
    found = []
    for rel, package, tree in _modules():
        if rel.startswith("dvpipe/testing/"):
            continue
        for node in ast.walk(tree):
            for name in _imported(node, package):
                if name == "dvpipe.testing" or name.startswith("dvpipe.testing."):
                    found.append(f"{rel}:{node.lineno}: imports {name}")
    assert not found, "runtime modules import the test scaffolding:\n" + "\n".join(found)


def test_the_import_resolution_sees_a_relative_import_of_the_scaffolding():
    """The check above resolves relative imports: ``from ..testing import dvpp`` in dvpipe/deploy/x.py
    names dvpipe.testing.dvpp."""
    node = ast.parse("from ..testing import dvpp").body[0]
    assert "dvpipe.testing.dvpp" in _imported(node, ["dvpipe", "deploy"])
    node = ast.parse("from .testing.deployments import tiny_rig").body[0]
    assert "dvpipe.testing.deployments" in _imported(node, ["dvpipe"])
