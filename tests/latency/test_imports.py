"""The latency package has no import circle (issue 17: ``latency.stats`` <-> ``latency.report``).

The graph counts every import of a sibling module, at any depth (module level, inside functions, under
``if TYPE_CHECKING:``): a lazy import hides a circle from the interpreter, not from the design."""
from __future__ import annotations

import ast
from pathlib import Path

import dvpipe.latency

PKG = Path(dvpipe.latency.__file__).parent


def _graph() -> dict[str, set[str]]:
    mods = {p.stem for p in PKG.glob("*.py") if p.stem != "__init__"}
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m in mods:
        for node in ast.walk(ast.parse((PKG / f"{m}.py").read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                targets = [node.module] if node.module else [a.name for a in node.names]
                graph[m].update(t.split(".")[0] for t in targets if t.split(".")[0] in mods)
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dvpipe.latency."):
                graph[m].add(node.module.split(".")[2])
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, state = [], {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                found.append(path[path.index(n):] + [n])
            elif n not in state:
                visit(n, path + [n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    return found


def test_the_cycle_finder_finds_a_known_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]


def test_the_latency_package_has_no_import_circle():
    graph = _graph()
    assert "records" in graph["report"] and "report" in graph["stats"]  # the edges the fix put in place
    assert "stats" not in graph["report"]
    assert _cycles(graph) == []
