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
#: A raise that must stay a builtin (mimicking a third-party API's exception, or control flow caught at
#: once) says so on its line with this marker and the reason.
BUILTIN_MARKER = "# builtin on purpose:"
_BUILTINS = ("ValueError", "RuntimeError")


def _builtin_raises(rel: str, source: str, tree: ast.AST) -> list[str]:
    """``file:line: raise ValueError`` for each raise of a builtin ValueError / RuntimeError (called or
    bare) in ``tree`` whose line lacks :data:`BUILTIN_MARKER`, and for each ``return ValueError(...)`` /
    ``RuntimeError(...)`` (a helper that builds the error its caller raises)."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc, verb = node.exc.func if isinstance(node.exc, ast.Call) else node.exc, "raise"
        elif isinstance(node, ast.Return) and isinstance(node.value, ast.Call):
            exc, verb = node.value.func, "return"
        else:
            continue
        if isinstance(exc, ast.Name) and exc.id in _BUILTINS and BUILTIN_MARKER not in lines[node.lineno - 1]:
            found.append(f"{rel}:{node.lineno}: {verb} {exc.id}")
    return found


def test_the_package_raises_errors_of_the_dvpipe_family():
    """Every error a user can meet derives from ``DvpipeError`` (with the matching builtin as a second
    base, ``ConfigError(DvpipeError, ValueError)``): no ``raise ValueError(...)`` / ``raise RuntimeError(...)``
    anywhere in the package, except on lines marked :data:`BUILTIN_MARKER`."""
    found = []
    for rel, _package, tree in _modules():
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
           "    raise ConfigError('fine')\n"
           "def bad(msg):\n"
           "    return ValueError(msg)\n"
           "def fine(x):\n"
           "    return int(x)\n")
    assert sorted(_builtin_raises("m.py", src, ast.parse(src))) == [
        "m.py:10: return ValueError", "m.py:3: raise ValueError", "m.py:4: raise RuntimeError"]


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


def _exception_classes() -> list[tuple[str, str]]:
    """``(module, class name)`` of every public class of the package that derives, directly or through
    other classes of the package, from a builtin exception (read from the source, bases by name)."""
    import builtins

    classes = []  # (module, name, base names)
    for rel, _package, tree in _modules():
        module = rel[:-3].replace("/", ".").removesuffix(".__init__")
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases]
                classes.append((module, node.name, bases))
    errors = {n for n in dir(builtins) if isinstance(getattr(builtins, n), type)
              and issubclass(getattr(builtins, n), BaseException)}
    grew = True
    while grew:
        grew = False
        for _m, name, bases in classes:
            if name not in errors and any(b in errors for b in bases):
                errors.add(name)
                grew = True
    return [(m, n) for m, n, _b in classes if n in errors and not n.startswith("_")]


def test_every_exception_class_of_the_package_is_in_the_family():
    """Not only the listed ones: every public exception class defined anywhere in dvpipe (``KnowledgeGap``
    included) is a ``DvpipeError``."""
    import importlib

    from dvpipe.errors import DvpipeError

    found = _exception_classes()
    assert len(found) >= 20, found  # the scan sees the family itself (ConfigError, FrameError, ...)
    outside = [f"{m}.{n}" for m, n in found
               if not issubclass(getattr(importlib.import_module(m), n), DvpipeError)]
    assert not outside, "derive these from dvpipe.errors.DvpipeError (and the builtin they mean):\n" + "\n".join(outside)
