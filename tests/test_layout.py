"""The package's layout rules: imports inside ``python/kinetrace`` run one way (no cycle),
counting function-local imports too; every module serves the package's own entry points;
and what the benchmarks take from the package is code the package itself uses (benchmark-only
code lives in ``benches/``, outside the wheel)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "python" / "kinetrace"
BENCHES = ROOT / "benches"


def _module_name(path: Path) -> str:
    """``_export`` for ``_export.py``, ``_cli`` for ``_cli/__init__.py``, ``_cli.check`` for
    ``_cli/check.py`` (``__init__`` and ``__main__`` of the package itself keep their
    names)."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if len(parts) > 1 and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(dotted: str, modules: set[str]) -> str | None:
    """The package module a dotted name under ``kinetrace`` lives in (the longest match)."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        name = ".".join(parts[:end])
        if name in modules:
            return name
    return None


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The package modules ``path`` imports, anywhere in the file."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative imports are not used in the package
                raise AssertionError(f"{path}: relative import")
            base = node.module or ""
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] != "kinetrace":
                continue
            if len(parts) == 1:
                if isinstance(node, ast.Import):
                    out.add("__init__")
                continue
            found = _resolve(".".join(parts[1:]), modules)
            if found is not None:
                out.add(found)
    return out


def package_files() -> dict[str, Path]:
    """Every module of the package, by :func:`_module_name`."""
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def import_graph() -> dict[str, set[str]]:
    files = package_files()
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


def test_every_module_serves_the_entry_points() -> None:
    """Each module is imported, directly or not, by ``kinetrace`` or ``kinetrace.__main__``:
    none is there only for tests or benchmarks."""
    graph = import_graph()
    seen: set[str] = set()
    todo = ["__init__", "__main__"]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(graph.get(name, ()))
    assert set(graph) - seen == set()


def _package_names() -> set[str]:
    """Every name the package's modules use (read, call, import, attribute)."""
    used: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Name):
                used.add(node.id)
            elif isinstance(node, ast.Attribute):
                used.add(node.attr)
            elif isinstance(node, ast.ImportFrom):
                used.update(alias.name for alias in node.names)
    return used


def _taken_by_benches() -> set[tuple[str, str, str]]:
    """(bench file, private module, name) for every name a benchmark takes from a private
    module of the package (``from kinetrace import _m`` then ``_m.name``, or ``from
    kinetrace._m import name``); the native ``_kinetrace`` is left out."""
    taken: set[tuple[str, str, str]] = set()
    for path in BENCHES.glob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "kinetrace":
                for alias in node.names:
                    if alias.name.startswith("_") and alias.name != "_kinetrace":
                        aliases[alias.asname or alias.name] = alias.name
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kinetrace._"):
                module = node.module.split(".")[1]  # type: ignore[union-attr]
                if module != "_kinetrace":
                    taken.update((path.name, module, alias.name) for alias in node.names)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
            ):
                taken.add((path.name, aliases[node.value.id], node.attr))
    return taken


def test_benchmarks_take_no_benchmark_only_code_from_the_package() -> None:
    taken = _taken_by_benches()
    assert ("bench_export.py", "_bench", "compare") in taken  # the scan sees the benches
    used = _package_names()
    bench_only = sorted(item for item in taken if item[2] not in used)
    assert bench_only == [], f"move these to benches/benchlib.py: {bench_only}"


#: Longest function body (lines, its docstring left out) without a written reason.
MAX_FUNCTION_LINES = 80
#: The comment that gives the reason, on a line of its own at the top of the body.
LONG_REASON = "# Long because"


def _long_functions() -> list[str]:
    """``module:function (N lines)`` for every function of the package longer than
    :data:`MAX_FUNCTION_LINES` without a ``# Long because ...`` comment at its top."""
    found = []
    for name, path in sorted(package_files().items()):
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines), str(path))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            body = node.body
            first = body[0]
            doc_lines = 0
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                doc_lines = first.end_lineno - first.lineno + 1  # type: ignore[operator]
                body = body[1:] or body
            length = node.end_lineno - node.lineno + 1 - doc_lines  # type: ignore[operator]
            if length <= MAX_FUNCTION_LINES:
                continue
            head = lines[node.lineno : body[0].lineno]
            if not any(line.strip().startswith(LONG_REASON) for line in head):
                found.append(f"{name}:{node.name} ({length} lines)")
    return found


def test_functions_are_short_or_say_why() -> None:
    long = _long_functions()
    assert long == [], (
        f"functions over {MAX_FUNCTION_LINES} lines (docstring aside) without a "
        f"'{LONG_REASON} ...' comment at their top: {long}"
    )
