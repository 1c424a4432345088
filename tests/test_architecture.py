"""The package has no import circles (issue 22 item 3).

Every module under ``src/rsmooth`` is parsed with :mod:`ast` and the graph of its imports of other
rsmooth modules is built: absolute (``import rsmooth.x``, ``from rsmooth.x import y``) and relative
(``from .x import y``, ``from . import name``), a package standing for its ``__init__`` and
``from P import name`` for the submodule ``P.name`` when there is one.  Imports inside functions
count too (a lazy import is a dependency all the same), and a third graph adds the imports under
``if TYPE_CHECKING:`` (they never run, but a circle through them is a circle of the design: issue
38); ``importlib`` calls do not count (``rsmooth.__getattr__``'s lazy exports).  The package
an imported submodule sits in is not an edge of its own (Python runs it first, but every submodule
would then be in a circle with its package's ``__init__``).
"""
import ast
import functools
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set

import pytest

import rsmooth

ROOT = Path(rsmooth.__file__).parent


def _modules() -> Dict[str, Path]:
    """Module name -> file, packages under their own name (``rsmooth.report`` -> its __init__)."""
    mods = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return mods


def _statements(tree: ast.AST, lazy: bool, typing: bool = False) -> Iterator[ast.AST]:
    """The import statements of a module: those run at import (in ``if``/``try`` blocks and class
    bodies too), with ``lazy`` those in functions, and with ``typing`` those under ``if
    TYPE_CHECKING:`` (for type checkers only)."""
    stack = list(ast.iter_child_nodes(tree))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test) and not typing:
            stack.extend(node.orelse)
        elif lazy or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            stack.extend(ast.iter_child_nodes(node))


def _known(name: str, mods: Dict[str, Path]) -> Optional[str]:
    """``name`` or the longest of its parents that is a module of the package (None: not rsmooth)."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _targets(node: ast.AST, module: str, is_package: bool, mods: Dict[str, Path]) -> Set[str]:
    """The rsmooth modules one import statement of ``module`` imports."""
    if isinstance(node, ast.Import):
        return {m for m in (_known(a.name, mods) for a in node.names) if m}
    base = node.module or ""
    if node.level:
        here = module.split(".") if is_package else module.split(".")[:-1]
        base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
    found = {f"{base}.{a.name}" if f"{base}.{a.name}" in mods else _known(base, mods) for a in node.names}
    return {m for m in found if m}


@functools.lru_cache(maxsize=None)
def import_graph(lazy: bool, typing: bool = False) -> Dict[str, Set[str]]:
    """Module -> the rsmooth modules it imports (at import time, with ``lazy`` anywhere, with
    ``typing`` for type checkers too)."""
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        statements = _statements(_parse(path), lazy, typing)
        graph[name] = set().union(*(_targets(n, name, path.name == "__init__.py", mods) for n in statements)) - {name}
    return graph


@functools.lru_cache(maxsize=None)
def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def circles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """One circle ``[a, b, ..., a]`` per strongly connected component of more than one module
    (Tarjan 1972, Depth-First Search and Linear Graph Algorithms)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    components = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = {stack.pop()}
            while v not in component:
                component.add(stack.pop())
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_path_around(min(c), graph, c) for c in components]


def _path_around(start: str, graph: Dict[str, Set[str]], component: Set[str]) -> List[str]:
    """A shortest way from ``start`` back to itself inside ``component`` (breadth first)."""
    previous: Dict[str, str] = {}
    frontier = [start]
    while start not in previous:
        reached = []
        for v in frontier:
            for w in sorted((graph[v] & component) - previous.keys()):
                previous[w] = v
                reached.append(w)
        frontier = reached
    path = [start, previous[start]]
    while path[-1] != start:
        path.append(previous[path[-1]])
    return path[::-1]


@pytest.mark.parametrize("lazy,typing", [(False, False), (True, False), (True, True)],
                         ids=["at-import", "with-lazy-imports", "with-type-checking-imports"])
def test_no_import_circles(lazy, typing):
    found = circles(import_graph(lazy, typing))
    assert not found, "import circles: " + "; ".join(" -> ".join(c) for c in found)


def test_graph_sees_absolute_relative_and_lazy_imports():
    """The checks above are not vacuous: the graph has the edges of each kind of import."""
    at_import, everything = import_graph(lazy=False), import_graph(lazy=True)
    assert "rsmooth.report.common" in at_import["rsmooth.report.summary"]  # from .common import ...
    assert "rsmooth.corruptions.cifar_c" in at_import["rsmooth.corruptions"]  # from . import cifar_c
    assert "rsmooth.errors" in at_import["rsmooth.report.common"]  # from ..errors import ...
    assert "rsmooth.models" in everything["rsmooth.trust"]  # in a function
    assert "rsmooth.models" not in at_import["rsmooth.trust"]
    assert "rsmooth.report.summary" not in everything["rsmooth"]  # under TYPE_CHECKING only


def test_circles_finds_and_draws_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert circles(graph) == [["a", "b", "c", "a"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_seeding_imports_first_in_a_fresh_process():
    """Issue 38: rsmooth.seeding sits below the smoothing package (counts come from rsmooth.counts),
    so it imports on its own, first, without a circle through smoothing."""
    import subprocess
    import sys

    for module in ("rsmooth.seeding", "rsmooth.counts", "rsmooth.smoothing.noises"):
        done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-500:]
