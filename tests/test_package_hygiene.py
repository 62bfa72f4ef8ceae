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


# -- errors in the family --------------------------------------------------------------------------------
#: Files still raising a builtin ``ValueError`` / ``RuntimeError``, to move into the DvpipeError family
#: (their code is being restructured elsewhere). Shrink this list; never grow it.
BUILTIN_RAISE_ALLOWED = frozenset({
    "dvpipe/probe/live.py", "dvpipe/device.py", "dvpipe/deploy/_builtin_exporters.py",
    "dvpipe/deploy/sources/synthetic.py", "dvpipe/deploy/sources/registry.py",
    "dvpipe/knowledge/strides.py", "dvpipe/knowledge/schema.py", "dvpipe/knowledge/checks.py",
})
#: A raise that must stay a builtin (mimicking a third-party API's exception, or control flow caught at
#: once) says so on its line with this marker and the reason.
BUILTIN_MARKER = "# builtin on purpose:"
_BUILTINS = ("ValueError", "RuntimeError")


def _builtin_raises(rel: str, source: str, tree: ast.AST) -> list[str]:
    """``file:line: raise ValueError`` for each raise of a builtin ValueError / RuntimeError (called or
    bare) in ``tree`` whose line lacks :data:`BUILTIN_MARKER`."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Raise) or node.exc is None:
            continue
        exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        if isinstance(exc, ast.Name) and exc.id in _BUILTINS and BUILTIN_MARKER not in lines[node.lineno - 1]:
            found.append(f"{rel}:{node.lineno}: raise {exc.id}")
    return found


def test_the_package_raises_errors_of_the_dvpipe_family():
    """Every error a user can meet derives from ``DvpipeError`` (with the matching builtin as a second
    base, ``ConfigError(DvpipeError, ValueError)``): no ``raise ValueError(...)`` / ``raise RuntimeError(...)``
    in the package outside :data:`BUILTIN_RAISE_ALLOWED` and lines marked :data:`BUILTIN_MARKER`."""
    found = []
    for rel, _package, tree in _modules():
        if rel not in BUILTIN_RAISE_ALLOWED:
            found += _builtin_raises(rel, (PKG.parent / rel).read_text(encoding="utf-8"), tree)
    assert not found, ("raise a dvpipe.errors class (ConfigError for bad arguments or configuration, or a "
                       "DvpipeError subclass of the module) instead of the builtin:\n" + "\n".join(found))


def test_the_raise_scan_finds_builtin_raises_and_honours_the_marker():
    src = ("def f(x):\n"
           "    if x:\n"
           "        raise ValueError(f'bad {x}')\n"
           "    raise RuntimeError\n"
           "def g():\n"
           "    raise ValueError  # builtin on purpose: caught below\n"
           "def h():\n"
           "    raise ConfigError('fine')\n")
    assert sorted(_builtin_raises("m.py", src, ast.parse(src))) == ["m.py:3: raise ValueError", "m.py:4: raise RuntimeError"]


def test_every_public_error_class_derives_from_dvpipe_error():
    """The error classes users catch, wherever they are defined, are in the family."""
    from dvpipe.backends.dvpp._acl import AclError
    from dvpipe.bitstream import HeaderError
    from dvpipe.deploy import DeploymentError
    from dvpipe.deploy.runner import RunError
    from dvpipe.deploy.sources import SourceError
    from dvpipe.errors import ClosedError, DvpipeError
    from dvpipe.latency.merge import MergeError
    from dvpipe.latency.profiler_ranges import ProfilerRangesError
    from dvpipe.latency.trace import TraceFormatError
    from dvpipe.models.om import ModelInputError

    for cls in (AclError, HeaderError, DeploymentError, RunError, SourceError, ClosedError, MergeError,
                ProfilerRangesError, TraceFormatError, ModelInputError):
        assert issubclass(cls, DvpipeError), cls
    # the builtin meaning is kept for callers that catch it
    assert issubclass(TraceFormatError, ValueError) and issubclass(ClosedError, RuntimeError)
