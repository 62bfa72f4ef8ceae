"""No import circles in dvpipe: the graph of module-level imports (``ast`` over ``dvpipe/**/*.py``; imports
inside functions and under ``if TYPE_CHECKING:`` are not edges) is acyclic, and the planner imports nothing
from the probe (it is handed the live cache: ``plan_pipeline(..., live=...)``)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "dvpipe"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _top_level_imports(tree: ast.Module):
    """Import nodes executed when the module is imported: module body, and ``try`` / ``if`` blocks in it
    (not functions, classes' methods, or ``if TYPE_CHECKING:``)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                stack.extend(node.body)
            stack.extend(node.orelse)
        elif isinstance(node, ast.Try):
            stack.extend(node.body + node.orelse + node.finalbody)
            for h in node.handlers:
                stack.extend(h.body)
        elif isinstance(node, ast.ClassDef):
            stack.extend(n for n in node.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))


def import_graph() -> dict[str, set[str]]:
    """``{module: modules its import runs}``. Importing ``a.b.c`` runs ``a`` and ``a.b`` first; those implicit
    edges to a module's *own* enclosing packages are left out (Python initialises a package before its
    submodules: not a circle), but an explicit ``from . import NAME`` of a name defined in the package's
    ``__init__`` is an edge to it."""
    modules = {_module_name(p): p for p in PKG.rglob("*.py")}
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
        for node in _top_level_imports(tree):
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


def test_dvpipe_has_no_import_circles():
    graph = import_graph()
    assert "dvpipe.planner" in graph and "dvpipe.stages.registry" in graph["dvpipe.planner"]
    assert _cycles(graph) == []


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
    from dvpipe.stages.registry import KernelVerdict

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
