"""No import circles in dvpipe: the graph of imports (``ast`` over ``dvpipe/**/*.py``) is acyclic, counting
the imports inside functions too (a two-way dependency hidden in a function is still one; only imports under
``if TYPE_CHECKING:`` are not edges, and imports of other packages -- optional third-party ones included --
are never edges), and no lower layer imports a higher one. The planner imports nothing from the probe (it is
handed the live cache: ``plan_pipeline(..., live=...)``)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "dvpipe"


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.Module, functions: bool = True):
    """Import nodes of a module: its body, ``try`` / ``if`` / ``with`` blocks, classes and (``functions``) the
    bodies of functions and methods at any depth -- everything but ``if TYPE_CHECKING:`` blocks."""
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and not functions:
            continue
        else:
            stack.extend(ast.iter_child_nodes(node))


def import_graph(functions: bool = True, root: Path = ROOT) -> dict[str, set[str]]:
    """``{module: modules its import runs}``. Importing ``a.b.c`` runs ``a`` and ``a.b`` first; those implicit
    edges to a module's *own* enclosing packages are left out (Python initialises a package before its
    submodules: not a circle), but an explicit ``from . import NAME`` of a name defined in the package's
    ``__init__`` is an edge to it."""
    modules = {_module_name(p, root): p for p in (root / "dvpipe").rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        ancestors = {".".join(mod.split(".")[:k]) for k in range(1, mod.count(".") + 1)}

        def add(target: str, explicit: bool) -> None:
            parts = target.split(".")
            for k in range(1, len(parts) + 1):
                name = ".".join(parts[:k])
                if name not in modules or name == mod:
                    continue
                if name in ancestors and not (explicit and k == len(parts)):
                    continue
                graph[mod].add(name)

        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in _imports(tree, functions):
            if isinstance(node, ast.Import):
                for a in node.names:
                    add(a.name, explicit=True)
                continue
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            for a in node.names:
                sub = f"{stem}.{a.name}"
                if sub in modules:
                    add(sub, explicit=True)
                    add(stem, explicit=False)
                else:  # a name defined in stem's own code
                    add(stem, explicit=True)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_helper_finds_a_known_cycle():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(g) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_counts_imports_inside_functions_but_not_type_checking_ones(tmp_path):
    """The walker on a hand-written package: an import in a method, in a nested function and in a ``with`` block
    are edges; one under ``if TYPE_CHECKING:`` and one of another package are not."""
    pkg = tmp_path / "dvpipe"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from . import d\n"
        "class A:\n    def m(self):\n        from . import b\n"
        "def f():\n    def g():\n        import dvpipe.c\n    with open('x'):\n        import numpy\n")
    for name in "bcd":
        (pkg / f"{name}.py").write_text("")
    (pkg / "e.py").write_text("def f():\n    from .a import A\n")
    (pkg / "b.py").write_text("def f():\n    from . import e\n")
    graph = import_graph(root=tmp_path)
    assert graph["dvpipe.a"] == {"dvpipe.b", "dvpipe.c"}
    assert import_graph(functions=False, root=tmp_path)["dvpipe.a"] == set()
    assert _cycles(graph) == [["dvpipe.a", "dvpipe.b", "dvpipe.e"]]  # a circle made only of function imports


def test_dvpipe_has_no_import_circles_counting_imports_inside_functions():
    graph = import_graph()
    assert "dvpipe.planner" in graph and "dvpipe.stages.kernel_registry" in graph["dvpipe.planner"]
    module_level = import_graph(functions=False)
    assert sum(map(len, graph.values())) > sum(map(len, module_level.values()))  # function imports are counted
    assert _cycles(graph) == []


def test_lower_layers_import_nothing_above_them():
    """The arrows the issue found running upward: ``target`` -> ``probe`` (``Target.detect``), ``types`` ->
    ``device`` -> the DVPP runtime, a backend -> the probe, the planner -> a backend family."""
    graph = import_graph()
    def above(mod: str, *prefixes: str) -> list[str]:
        return sorted(m for m in graph[mod] if m.startswith(prefixes))

    for low in ("dvpipe.target", "dvpipe.types", "dvpipe.device", "dvpipe.codecs", "dvpipe.plugins"):
        assert above(low, "dvpipe.backends", "dvpipe.probe", "dvpipe.deploy", "dvpipe.planner", "dvpipe.pipeline") == []
    for mod in graph:
        if mod.startswith("dvpipe.backends") or mod.startswith("dvpipe.knowledge"):
            assert above(mod, "dvpipe.probe", "dvpipe.deploy", "dvpipe.pipeline", "dvpipe.mmdet3d") == [], mod
    assert above("dvpipe.planner", "dvpipe.backends.") == []  # the backend table only, no family


def test_the_planner_does_not_import_the_probe_even_lazily():
    src = (PKG / "planner.py").read_text(encoding="utf-8")
    tree = ast.parse(src)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names.add(("." * node.level) + (node.module or ""))
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    assert not [n for n in names if "probe" in n], names


def test_the_planner_takes_the_live_cache_it_is_given_and_reads_none_itself():
    import dvpipe as dv
    from dvpipe.testing.dvpp import kitti_rig
    from dvpipe.planner import plan_pipeline
    from dvpipe.stages.kernel_registry import KernelVerdict

    class Measured:
        """A live cache saying the device failed every DVPP decode it was asked about."""

        def __init__(self):
            self.asked = []

        def prefer(self, kernel, query, documented):
            self.asked.append((kernel.name, tuple(s.op for s in query.stages)))
            if query.stages[0].op == "decode":
                return KernelVerdict.no("measured on this device: failed")
            return documented

    rig = kitti_rig("jpeg")
    stages = [dv.Decode(), dv.Resize(scale=0.5)]
    target = dv.Target(soc="Ascend310P3", cann="7.0.0")
    documented = plan_pipeline(rig.cameras, stages, ("dvpp-sim", "cpu"), fidelity="fast", target=target)
    assert documented.cameras[0].steps[0].backend.family == "dvpp"
    live = Measured()
    measured = plan_pipeline(rig.cameras, stages, ("dvpp-sim", "cpu"), fidelity="fast", target=target, live=live)
    first = measured.cameras[0].steps[0]
    assert first.backend.name == "cpu" and live.asked
    assert dict(first.verdicts)["dvpp-sim"].reason == "measured on this device: failed"
