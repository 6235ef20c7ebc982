"""The SDK's packages are layers: each imports only the layers under it.

docs/architecture.md draws them. A module that needs something of a higher
layer is in the wrong layer (or the thing is): the test names the import, so
the fix is a move, not an exception here. Imports under ``TYPE_CHECKING`` count
too (they are how a reader finds the code), except the one listed below.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.crashflows import ROOT

#: From the bottom up; a module may import its own layer and those listed before it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("sdk.errors",),
    ("sdk.store",),
    ("sdk._core",),
    ("sdk.model",),
    ("sdk.client",),
    ("sdk.runtime",),
    ("sdk.engine",),
    ("sdk.worker", "sdk.otel"),
    ("sdk.http", "sdk.console"),  # the HTTP app serves the console; the console uses its routing
    ("sdk.cli",),
)
#: The package itself is a lazy facade (PEP 562): a surface may read its version.
FACADE = "sdk"
#: Type-only imports allowed upward: the errors name the records they carry.
TYPE_ONLY = {("sdk.errors", "sdk._core._types"), ("sdk.errors", "sdk.store._statuses")}


def layer_of(module: str) -> int | None:
    for i, packages in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in packages):
            return i
    return None


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.Module) -> list[tuple[str, bool]]:
    """Every ``sdk`` module the source imports, anywhere, and whether only for typing."""
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(n) for n in ast.walk(node))
    found: list[tuple[str, bool]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [(n, id(node) in typing_only) for n in names if n.split(".")[0] == "sdk"]
    return found


def upward(module: str, source: str) -> list[str]:
    """The imports of `module` (whose text is `source`) that go up a layer."""
    mine = layer_of(module)
    if mine is None or module.endswith("__main__"):  # a command: nothing imports it
        return []
    wrong = []
    for target, typing_only in _imports(ast.parse(source)):
        theirs = layer_of(target)
        if theirs is not None and theirs <= mine:
            continue
        if target == FACADE and mine >= len(LAYERS) - 2:  # a surface reads the version
            continue
        if typing_only and (module, target) in TYPE_ONLY:
            continue
        wrong.append(f"{module} imports {target}")
    return wrong


def test_every_sdk_module_is_in_a_layer() -> None:
    lost = [
        _module_name(p)
        for p in sorted((ROOT / "sdk").rglob("*.py"))
        if _module_name(p) != FACADE and layer_of(_module_name(p)) is None
    ]
    assert not lost


def test_no_sdk_module_imports_a_layer_above_its_own() -> None:
    wrong = [
        line
        for path in sorted((ROOT / "sdk").rglob("*.py"))
        for line in upward(_module_name(path), path.read_text())
    ]
    assert wrong == []


def test_the_check_sees_an_upward_import_even_a_late_or_typing_one() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from sdk.client._client import Client\n"
        "def f():\n    import sdk.worker._worker\n"
        "from sdk.store import Store\n"
    )
    assert upward("sdk.model._x", source) == [
        "sdk.model._x imports sdk.client._client",
        "sdk.model._x imports sdk.worker._worker",
    ]
    assert upward("sdk.engine._x", source) == ["sdk.engine._x imports sdk.worker._worker"]


# -- no import cycle ----------------------------------------------------------------------


def _graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (anywhere: typing and late imports too;
    ``from pkg import name`` counts as the submodule when `name` is one)."""
    modules = {
        _module_name(path): path
        for top in ("sdk", "stores", "testing")
        for path in sorted((ROOT / top).rglob("*.py"))
    }
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        is_pkg = path.name == "__init__.py"
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = module.split(".")
                    parts = parts if is_pkg else parts[:-1]
                    parts = parts[: len(parts) - (node.level - 1)]
                    base = ".".join([*parts, *([node.module] if node.module else [])])
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    edges.add(sub if sub in modules else base)
        graph[module] = {e for e in edges if e in modules and e != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_among_the_projects_modules() -> None:
    assert cycles(_graph()) == []


def test_the_cycle_check_finds_a_cycle_in_a_graph_of_every_kind_of_import() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    graph = _graph()
    assert "sdk.engine._state" in graph["sdk.engine._activation"]
    assert "sdk._core._types" in graph["sdk.errors"]  # an import under TYPE_CHECKING counts
