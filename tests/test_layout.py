"""The package's layout rules: imports inside ``python/kinetrace`` run one way (no cycle),
counting function-local imports too, and between its wings (``_cli`` over ``_tools`` and
``_export`` over the shared modules at the top); every module serves the package's own entry
points; and what the benchmarks take from the package is code the package itself uses
(benchmark-only code lives in ``benches/``, outside the wheel)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "python" / "kinetrace"
BENCHES = ROOT / "benches"


def _module_name(path: Path) -> str:
    """``_env`` for ``_env.py``, ``_cli`` for ``_cli/__init__.py``, ``_export.export`` for
    ``_export/export.py`` (``__init__`` and ``__main__`` of the package itself keep their
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
    assert "_export.export" in graph
    assert "_export.handles" in graph["_export.export"]
    assert "_tools.check" in graph["_cli.check"]
    assert "_export.profiler" in graph["__init__"]  # the lazy import, inside a function


def test_imports_have_no_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_find_cycle_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_only_the_entry_points_import_the_orchestrator() -> None:
    """``_export.export`` orchestrates; the modules it uses never import it back."""
    graph = import_graph()
    importers = {name for name, deps in graph.items() if "_export.export" in deps}
    entry_points = {"__init__", "__main__", "_export.profiler", "_export.parquet", "_bench"}
    assert importers <= entry_points, importers


#: The wings of the package, top floor first: a module imports only from its own wing or
#: from a floor below. ``_bench`` is the comparison behind ``kinetrace demo``.
FLOORS = (
    ("__main__",),
    ("_cli",),
    ("__init__", "_bench"),
    ("_export", "_tools"),
    ("_errors", "_env", "_text", "_kinetrace"),
)
#: Arrows that run sideways on purpose: the export's ``keep=`` / ``split_mb=`` cut the
#: written trace with the split tool; ``export_parquet`` feeds the export into the parquet
#: tool's converter.
SIDEWAYS = {
    ("_export.export", "_tools"),
    ("_export.export", "_tools.split"),
    ("_export.parquet", "_tools"),
    ("_export.parquet", "_tools.parquet"),
}


def _floor(module: str) -> int:
    wing = module.split(".")[0]
    for number, names in enumerate(FLOORS):
        if wing in names:
            return number
    raise AssertionError(f"{module}: in no wing of FLOORS (add it where it belongs)")


def test_wings_import_downwards() -> None:
    """``_cli`` over ``__init__`` and ``_bench`` over the two wings ``_export`` and
    ``_tools`` over the shared modules (``_errors``, ``_env``, ``_text``): no arrow runs up,
    none between the wings but :data:`SIDEWAYS`. A new tool (``_tools/<tool>.py``) and its
    subcommand (``_cli/<tool>.py``) fit without a change here."""
    graph = import_graph()
    wrong = sorted(
        (name, dep)
        for name, deps in graph.items()
        for dep in deps
        if dep.split(".")[0] != name.split(".")[0]
        and _floor(dep) <= _floor(name)
        and (name, dep) not in SIDEWAYS
    )
    assert wrong == [], f"imports running up or sideways: {wrong}"


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
            # Importing ``_export.export`` runs the package's ``_export/__init__.py`` first.
            parts = name.split(".")
            todo.extend(".".join(parts[:end]) for end in range(1, len(parts)))
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
    modules = set(package_files())
    taken: set[tuple[str, str, str]] = set()
    for path in BENCHES.glob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            parts = (node.module or "").split(".")
            if parts[0] != "kinetrace" or parts[1:2] == ["_kinetrace"]:
                continue
            module = ".".join(parts[1:])
            for alias in node.names:
                named = f"{module}.{alias.name}" if module else alias.name
                if named in modules:  # a module: ``from kinetrace._export import workers``
                    aliases[alias.asname or alias.name] = named
                elif module.startswith("_"):  # a name: ``from kinetrace._env import x``
                    taken.add((path.name, module, alias.name))
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


# --- The Rust crate (src/) --------------------------------------------------------------
#
# Modules are named by their path from the crate root (``tools::merge``, ``output::gzip``
# for ``output/gzip/mod.rs``); a file's imports are every ``crate::`` path it names outside
# comments (``use`` lines, written-out paths, ``crate::{a, b}`` groups) and its ``super::``
# paths. Folders show the architecture, so the rule is per folder: between the entries of
# one folder (its files and subfolders), imports run one way. An edge from ``a::x`` to
# ``b::y`` is an edge from ``a`` to ``b`` in the crate root's graph; one from
# ``export::fallback::text`` to ``export::format`` an edge from ``fallback`` to ``format``
# in ``export``'s. A module using its own folder's ``mod.rs`` (or the reverse) is no edge.

SRC = ROOT / "src"
LIB = SRC / "lib.rs"
RUST_PATH = r"[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*"
CRATE_GROUP = re.compile(r"\bcrate::\{([^}]*)\}")
CRATE_PATH = re.compile(rf"\bcrate::({RUST_PATH})")
SUPER_PATH = re.compile(rf"\bsuper::({RUST_PATH})")


def rust_module(path: Path) -> tuple[str, ...]:
    """``("tools", "split")`` for ``src/tools/split.rs``, ``("output", "gzip")`` for
    ``src/output/gzip/mod.rs``; ``()`` for ``src/lib.rs``."""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts == ["lib"]:
        return ()
    if parts[-1] == "mod":
        parts.pop()
    return tuple(parts)


def rust_modules() -> dict[tuple[str, ...], Path]:
    return {rust_module(p): p for p in SRC.rglob("*.rs")}


def _code(text: str) -> str:
    """``text`` without its comments (line comments and doc comments)."""
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def _rust_paths(path: Path) -> list[tuple[str, ...]]:
    """Every path ``path`` names from the crate root (``super::`` resolved; ``super::*`` of
    a test module is the file itself and left out)."""
    code = _code(path.read_text())
    found = [tuple(m.split("::")) for m in CRATE_PATH.findall(code)]
    for group in CRATE_GROUP.findall(code):
        found += [tuple(item.split("::")) for item in re.findall(RUST_PATH, group)]
    parent = rust_module(path)[:-1]
    found += [(*parent, *m.split("::")) for m in SUPER_PATH.findall(code)]
    return found


def _longest_module(path: tuple[str, ...], modules: set[tuple[str, ...]]) -> tuple[str, ...]:
    for end in range(len(path), 0, -1):
        if path[:end] in modules:
            return path[:end]
    return ()


def rust_import_graph() -> dict[tuple[str, ...], dict[str, set[str]]]:
    """For each folder (``()`` the crate root), the graph of its entries: entry -> the
    entries of the same folder it imports."""
    modules = rust_modules()
    names = set(modules)
    graphs: dict[tuple[str, ...], dict[str, set[str]]] = {}
    for src_module, path in modules.items():
        for named in _rust_paths(path):
            dst_module = _longest_module(named, names)
            common = 0
            while (
                common < min(len(src_module), len(dst_module))
                and src_module[common] == dst_module[common]
            ):
                common += 1
            if common in (len(src_module), len(dst_module)):
                continue  # the same module, or a module and its own folder's mod.rs
            folder = src_module[:common]
            graph = graphs.setdefault(folder, {})
            graph.setdefault(src_module[common], set()).add(dst_module[common])
    return graphs


def test_rust_graph_is_built() -> None:
    graphs = rust_import_graph()
    assert "read" in graphs[()]["tools"]  # tools::merge reads through read::events
    assert "scan" in graphs[("json",)]["object"]
    assert "validator" in graphs[("export", "fallback")]["stream"]


def test_rust_imports_have_no_cycle() -> None:
    """No import circle between the folders of ``src/``, nor between the files (and
    subfolders) of any one folder."""
    cycles = {
        "::".join(folder) or "crate": cycle
        for folder, graph in rust_import_graph().items()
        if (cycle := find_cycle(graph)) is not None
    }
    assert cycles == {}, "import cycles: " + "; ".join(
        f"in {folder}: {' -> '.join(cycle)}" for folder, cycle in cycles.items()
    )


def _lib_map() -> set[str]:
    """The module paths ``src/lib.rs``'s opening comment names in backquotes, a group
    ``a::{b, c}`` standing for ``a::b`` and ``a::c``."""
    doc = "\n".join(
        line.removeprefix("//!").strip()
        for line in LIB.read_text().splitlines()
        if line.startswith("//!")
    )
    named: set[str] = set()
    for quoted in re.findall(r"`([^`]+)`", doc):
        group = re.fullmatch(rf"({RUST_PATH})::\{{([^}}]*)\}}", quoted.strip())
        if group:
            named.update(f"{group[1]}::{item.strip()}" for item in group[2].split(","))
        else:
            named.add(quoted.strip())
    return named


def test_every_rust_module_is_in_the_map() -> None:
    """``src/lib.rs``'s opening comment is the crate's map: it names every module."""
    named = _lib_map()
    missing = sorted("::".join(m) for m in rust_modules() if m and "::".join(m) not in named)
    assert missing == [], f"modules missing from src/lib.rs's module map: {missing}"


#: The comment that gives the reason for a Rust function over clippy's
#: ``too-many-lines-threshold`` (``clippy.toml``), among the lines just above its
#: ``#[allow(clippy::too_many_lines)]``.
RUST_LONG_REASON = "// Long because"
RUST_LONG_ALLOW = "clippy::too_many_lines"


def _unexplained_long_allows() -> list[str]:
    """``file:line`` of every ``allow(clippy::too_many_lines)`` of ``src/`` without a
    ``// Long because ...`` comment in the comment and attribute lines just above it."""
    found = []
    for path in sorted(SRC.rglob("*.rs")):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if RUST_LONG_ALLOW not in line or not line.lstrip().startswith("#["):
                continue
            above = i - 1
            explained = False
            while above >= 0 and lines[above].lstrip().startswith(("//", "#[")):
                explained |= lines[above].lstrip().startswith(RUST_LONG_REASON)
                above -= 1
            if not explained:
                found.append(f"{path.relative_to(ROOT)}:{i + 1}")
    return found


def test_rust_length_rule_is_on() -> None:
    """clippy enforces the 80-line rule (``nox -s lint`` runs it with ``-D warnings``)."""
    assert "too-many-lines-threshold = 80" in (ROOT / "clippy.toml").read_text()
    assert "#![warn(clippy::too_many_lines)]" in LIB.read_text()


def test_long_rust_functions_say_why() -> None:
    unexplained = _unexplained_long_allows()
    assert unexplained == [], (
        f"#[allow({RUST_LONG_ALLOW})] without a '{RUST_LONG_REASON} ...' comment above it: "
        f"{unexplained}"
    )
