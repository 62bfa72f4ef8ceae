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


# -- public signatures name their types --------------------------------------------------------------------
#: Public entry points whose signatures name real types: ``(dotted path, parameters)`` -- the parameters
#: (``return`` for the return annotation) that must not be ``Any``; None: the whole signature.
TYPED_ENTRY_POINTS = [
    ("dvpipe.register_kernel", None),
    ("dvpipe.stages.kernel_registry.Kernel", None),
    ("dvpipe.KernelQuery", None),
    ("dvpipe.KernelContext", ("backend", "target")),
    ("dvpipe.probe.build_report", None),
    ("dvpipe.probe.report.route_verdicts", None),
    ("dvpipe.probe.report.stages_for", None),
    ("dvpipe.probe.live.LiveCache.record", ("target",)),
    ("dvpipe.probe.live.LiveCache.get", ("target",)),
    ("dvpipe.probe.live.LiveCache.prefer", None),
    ("dvpipe.probe.live.LiveCache.verified", None),
    ("dvpipe.probe.live.synthetic_frame", None),
    ("dvpipe.probe.live.run_live", None),
    ("dvpipe.probe.live.measured_ok", None),
    ("dvpipe.probe.live.verify_step", None),
    ("dvpipe.probe.live.prefer_empirical", None),
    ("dvpipe.probe.keys.camera_encoding", None),
    ("dvpipe.probe.keys.step_key", None),
    ("dvpipe.probe.report.StepRow", ("confidence",)),
    ("dvpipe.probe.matrix.symbol", None),
    ("dvpipe.probe.capacity.forecast", ("target",)),
    ("dvpipe.probe.capacity.work_items", None),
    ("dvpipe.probe.capacity_cpu.time_plan", None),
    ("dvpipe.probe.capacity_cpu.measure_cpu_path", None),
    ("dvpipe.probe.capacity_live.burst", None),
    ("dvpipe.probe.capacity_live.measure_capacity", None),
    ("dvpipe.probe.capacity_live.measured_figures", None),
    ("dvpipe.models.OmModel", None),
    ("dvpipe.models.OmModel.__call__", None),
    ("dvpipe.models.OmSpec", None),
    ("dvpipe.models.parse_config", None),
    ("dvpipe.models.from_config", None),
    ("dvpipe.models.from_spec", None),
    ("dvpipe.models.sim_model", None),
    ("dvpipe.mmdet3d.Mmdet3dMetas", ("pose", "extra")),
    ("dvpipe.mmdet3d.Mmdet3dHook", None),
    ("dvpipe.mmdet3d.Mmdet3dHook.__call__", ("batch",)),
    ("dvpipe.mmdet3d.can_bus_from_pose", None),
    ("dvpipe.torch.FrameSetDataset", None),
    ("dvpipe.device.DeviceTensor", ("runtime",)),
    ("dvpipe.device.DeviceBatch", ("runtime",)),
    ("dvpipe.deploy.sources.base.Source", None),
    ("dvpipe.deploy.sources.base.Source.validate", ("ctx",)),
    ("dvpipe.deploy.sources.base.Source.validate_cameras", None),
    ("dvpipe.deploy.sources.registry.DeploymentContext", ("rig", "sync")),
    ("dvpipe.load_deployment", None),
    ("dvpipe.deploy.bench.BackendRun", ("stats", "plan", "accounting")),
    ("dvpipe.knowledge.check", ("soc",)),
    ("dvpipe.knowledge.register_cache", None),
    ("dvpipe.latency.trace.timelines_from_trace", ("pid",)),
    ("dvpipe.latency.Timeline.span", None),
    ("dvpipe.latency.Timeline.record", None),
    ("dvpipe.latency.Timeline.device_span", None),
    ("dvpipe.latency.Timeline.time", None),
    ("dvpipe.latency.Timeline.timed", None),
    ("dvpipe.latency.trace.stats_from_trace", ("pid", "return")),
    ("dvpipe.FrameBatch", ("timeline",)),
    ("dvpipe.Rig.from_dict", None),
    ("dvpipe.Rig.from_yaml_data", None),
    ("dvpipe.types.Distortion.parse", None),
]


def _resolve(dotted: str):
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(dotted)


def _any_annotations(fn, names=None) -> list[str]:
    """``name: annotation`` of each parameter (``return``) of ``fn``'s signature whose annotation names ``Any``."""
    import inspect
    import re

    sig = inspect.signature(fn)
    anns = {n: p.annotation for n, p in sig.parameters.items() if p.annotation is not inspect.Parameter.empty}
    if sig.return_annotation is not inspect.Signature.empty:
        anns["return"] = sig.return_annotation
    return [f"{n}: {a}" for n, a in anns.items()
            if (names is None or n in names) and re.search(r"\bAny\b", a if isinstance(a, str) else repr(a))]


def test_the_public_entry_points_name_their_types_not_any():
    """The entry points typed so far keep their types: a ``Target``, a ``Rig``, a ``KernelFn``... never ``Any``."""
    import pytest

    pytest.importorskip("torch")  # dvpipe.torch
    found = []
    for dotted, names in TYPED_ENTRY_POINTS:
        obj = _resolve(dotted)
        if names is not None:  # the listed parameters exist (a renamed one must be renamed here too)
            import inspect

            params = set(inspect.signature(obj).parameters) | {"return"}
            assert set(names) <= params, (dotted, set(names) - params)
        found += [f"{dotted}({a})" for a in _any_annotations(obj, names)]
    assert not found, "Any in a typed public signature; name the type (TYPE_CHECKING import if needed):\n" + "\n".join(found)


def test_the_any_scan_reads_string_annotations():
    def f(a: Optional[Any], b: Mapping[str, Anything], c: int) -> Any:  # noqa: F821 - strings, never evaluated
        return a

    assert _any_annotations(f) == ["a: Optional[Any]", "return: Any"]
    assert _any_annotations(f, ("b", "c")) == []
