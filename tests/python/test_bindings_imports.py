"""The modules of the Python package (bindings/msmemscope) import each other in
one direction (issue #28 item 11): the session owns the collectors, the
collectors import only the leaf modules (_shared, _paths, ...) and never the
session, the API or each other in a circle. Every import counts: module
level and inside functions (``from . import _collect`` in a function is as
much a dependency as one at the top)."""
from __future__ import annotations

import ast
import pathlib
from typing import Dict, List, Optional, Set

SOURCE = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = SOURCE / "bindings" / "msmemscope"
# Modules the build puts into the package from elsewhere (bindings/CMakeLists.txt).
SHIPPED = {
    "msmemscope._paths": PACKAGE / "_paths.py.in",
    "msmemscope._watch_protocol": SOURCE / "plugins/analyzers/watch/python/msmemscope_watch.py",
    "msmemscope._torch_cuda": SOURCE / "plugins/collectors/cuda/python/msmemscope_torch_cuda.py",
}
# Native extensions (bindings/src, the torch observer): leaves.
EXTENSIONS = ("msmemscope._msmemscope", "msmemscope._msmemscope_config", "msmemscope._torch_observer")


def _modules() -> Dict[str, pathlib.Path]:
    mods: Dict[str, pathlib.Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    mods.update(SHIPPED)
    return mods


def _parse(path: pathlib.Path) -> ast.AST:
    text = path.read_text()
    # _paths.py.in: configure_file placeholders are not Python
    return ast.parse(text.replace("@", "_") if path.suffix == ".in" else text, str(path))


def _edges(name: str, path: pathlib.Path, mods: Dict[str, pathlib.Path]) -> Set[str]:
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rpartition(".")[0]
    out: Set[str] = set()

    def own(target: str) -> Optional[str]:
        """target, or the nearest enclosing module of the package that exists."""
        while target and target.split(".")[0] == "msmemscope":
            if target in mods or target in EXTENSIONS:
                return target
            target = target.rpartition(".")[0]
        return None

    def add(target: Optional[str]) -> None:
        if target and target != name:
            out.add(target)

    for node in ast.walk(_parse(path)):  # every level: functions, classes, try blocks
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(own(alias.name))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                sub = module + "." + alias.name
                add(sub if sub in mods or sub in EXTENSIONS else own(module))
    return out


def import_graph() -> Dict[str, Set[str]]:
    mods = _modules()
    graph = {name: _edges(name, path, mods) for name, path in mods.items()}
    graph.update({name: set() for name in EXTENSIONS})
    return graph


def find_cycle(graph: Dict[str, Set[str]]) -> Optional[List[str]]:
    state: Dict[str, int] = {}  # 1: on the current path, 2: done
    path: List[str] = []

    def visit(n: str) -> Optional[List[str]]:
        state[n] = 1
        path.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return path[path.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        path.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_graph_sees_function_level_imports():
    graph = import_graph()
    # _session imports _collect only inside functions
    assert "msmemscope._collect" in graph["msmemscope._session"]
    assert "msmemscope._offline" in graph["msmemscope.analyzer"]


def test_package_imports_have_no_cycle():
    graph = import_graph()
    cycle = find_cycle(graph)
    if cycle:
        print("import cycle: " + " -> ".join(cycle))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_collectors_do_not_import_the_session():
    graph = import_graph()
    for collector in ("_collect", "_torch", "_cuda", "watcher"):
        bad = graph["msmemscope." + collector] & {"msmemscope._session", "msmemscope._api", "msmemscope._boot",
                                                    "msmemscope"}
        assert not bad, f"{collector} imports {sorted(bad)}"
