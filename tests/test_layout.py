"""The package's layout rule: imports inside ``python/kinetrace`` run one way (no cycle),
counting function-local imports too."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "python" / "kinetrace"


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The package modules ``path`` imports, anywhere in the file."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from . import x / from ._x import y
                base = "kinetrace" + ("." + node.module if node.module else "")
            else:
                base = node.module or ""
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] != "kinetrace":
                continue
            if len(parts) > 1 and parts[1] in modules:
                out.add(parts[1])
            elif len(parts) == 1 and isinstance(node, ast.Import):
                out.add("__init__")
    return out


def import_graph() -> dict[str, set[str]]:
    files = {p.stem: p for p in PACKAGE.glob("*.py")}
    modules = set(files)
    return {name: _imports(path, modules) - {name} for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_graph_is_built() -> None:
    graph = import_graph()
    assert "_export" in graph
    assert "_handles" in graph["_export"]


def test_imports_have_no_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_only_the_entry_points_import_the_orchestrator() -> None:
    """``_export`` orchestrates; the modules it uses never import it back."""
    graph = import_graph()
    importers = {name for name, deps in graph.items() if "_export" in deps}
    assert importers <= {"__init__", "__main__", "_profiler", "_bench"}, importers
