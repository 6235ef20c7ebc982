"""Private parts of a dependency are used in its one adapter module (STYLE rule 15).

- fakeredis (and lupa, its Lua) serve the ``memory://`` store of the test kit:
  their adapter is ``testing/_fakelua.py`` (with ``_fakelanes`` and
  ``_fakeconn``), and no module of ``stores`` imports either, anywhere in the
  module (a late or a type-only import too), nor does importing every module
  of ``stores`` load them or the test kit.
- redis-py's insides are reached from ``stores/_redispy.py`` only.

"An object of redis-py" cannot be known from the source without its types, so
the check of a ``stores`` module reads it with `ast` and names, as reaching
into redis-py:

- an import of a private module or name of redis-py (``redis._parsers``,
  ``from redis.asyncio.cluster import _Something``);
- ``x._name`` (or ``getattr``/``setattr``/``hasattr``/``delattr`` of ``x`` and
  ``"_name"``) where ``_name`` is a private name redis-py itself defines: an
  attribute its code sets or reads on ``self`` or ``cls``, or a private method
  or class attribute (read from the installed redis-py's sources, ~550 names),
  unless ``x`` is the module's own ``self`` or ``cls`` (an object of ours,
  whose ``_lock`` is not redis-py's) in a class that does not derive from a
  class imported from redis-py;
- any private name on something imported from redis-py (``RedisCluster._x``);
- redis-py's internals that have no underscore: its cluster client's node and
  slot bookkeeping (`INTERNALS`) and how a node or a pool makes connections.

It misses what no reading of the source can see (a name computed at run time);
an object of ours reached, other than through ``self``, by a private name that
redis-py happens to define too is named (rename it, or go through a method).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import redis

from stores import ELSEWHERE
from tests.crashflows import ROOT

#: The one module of `stores` that may reach into redis-py.
ADAPTER = "stores._redispy"
#: Dependencies only the test kit's side of the seam may import.
TEST_KIT_ONLY = ("fakeredis", "lupa")
#: redis-py's internals without an underscore: its cluster client's node and slot
#: bookkeeping, its command parser, and how a node or a pool makes connections.
INTERNALS = frozenset(
    {
        "nodes_manager", "nodes_cache", "slots_cache", "startup_nodes", "commands_parser",
        "connection_kwargs", "connection_class",
    }
)  # fmt: skip
_REFLECTION = ("getattr", "setattr", "hasattr", "delattr")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def redis_private_names(root: Path | None = None) -> frozenset[str]:
    """The private attribute names redis-py defines (see the module docstring)."""
    root = root or Path(redis.__file__).parent
    names: set[str] = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
                and _private(node.attr)
            ):
                names.add(node.attr)
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        found = [item.name]
                    elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                        targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                        found = [t.id for t in targets if isinstance(t, ast.Name)]
                    else:
                        continue
                    names.update(n for n in found if _private(n))
    return frozenset(names)


REDIS_PRIVATE = redis_private_names()


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _root(node: ast.expr) -> str | None:
    """The name an attribute chain (``a.b.c``) starts from, if a plain name."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def kit_imports(source: str) -> list[str]:
    """What `source` imports of fakeredis or lupa, anywhere in it (also through
    ``importlib.import_module`` or ``__import__`` of a literal name)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) in ("importlib.import_module", "import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names = [node.args[0].value]
        else:
            continue
        found += [
            f"line {node.lineno}: imports {n}" for n in names if n.split(".")[0] in TEST_KIT_ONLY
        ]
    return found


def redis_reaches(source: str) -> list[str]:
    """Where `source` reaches into redis-py (see the module docstring)."""
    tree = ast.parse(source)
    from_redis: set[str] = set()  # the names the module binds to redis-py's modules and classes
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "redis":
                    from_redis.add((alias.asname or alias.name).split(".")[0])
                    if any(_private(part) for part in alias.name.split(".")):
                        found.append(f"line {node.lineno}: imports {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "redis":
                continue
            for alias in node.names:
                from_redis.add(alias.asname or alias.name)
                if any(_private(part) for part in [*node.module.split("."), alias.name]):
                    found.append(f"line {node.lineno}: imports {alias.name} from {node.module}")
    # self and cls of a class that derives from one of redis-py's are redis-py's objects
    theirs: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(_root(b) in from_redis for b in node.bases):
            theirs.update(id(n) for n in ast.walk(node))

    def reached(base: ast.expr, name: str, at: ast.AST) -> bool:
        if name in INTERNALS:
            return True
        if not _private(name):
            return False
        if _root(base) in from_redis:
            return True
        ours = isinstance(base, ast.Name) and base.id in ("self", "cls") and id(at) not in theirs
        return name in REDIS_PRIVATE and not ours

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if reached(node.value, node.attr, node):
                found.append(f"line {node.lineno}: {ast.unparse(node.value)}.{node.attr}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _REFLECTION
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and reached(node.args[0], node.args[1].value, node)
        ):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def _stores_modules() -> list[tuple[str, str]]:
    return [(_module_name(p), p.read_text()) for p in sorted((ROOT / "stores").rglob("*.py"))]


def test_no_stores_module_imports_fakeredis_or_lupa() -> None:
    found = {name: kit_imports(source) for name, source in _stores_modules()}
    assert {name: lines for name, lines in found.items() if lines} == {}


def test_importing_every_stores_module_loads_neither_fakeredis_nor_the_test_kit() -> None:
    code = (
        "import pkgutil, importlib, sys, stores\n"
        "for m in pkgutil.iter_modules(stores.__path__, 'stores.'):\n"
        "    importlib.import_module(m.name)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    loaded = set(ast.literal_eval(done.stdout))
    assert "stores" in loaded
    assert sorted(loaded & {*TEST_KIT_ONLY, "testing"}) == []


def test_memory_stores_are_opened_by_the_test_kit() -> None:
    assert ELSEWHERE["memory"].module == "testing._fakelua"
    assert all(not where.module.startswith("stores") for where in ELSEWHERE.values())


def test_only_the_redis_py_adapter_reaches_into_redis_py() -> None:
    found = {name: redis_reaches(source) for name, source in _stores_modules() if name != ADAPTER}
    assert {name: lines for name, lines in found.items() if lines} == {}


def test_the_adapter_is_where_the_check_finds_redis_py_internals() -> None:
    # the check finds what the adapter does (so it is looking at the right things)
    source = (ROOT / "stores" / "_redispy.py").read_text()
    reaches = "\n".join(redis_reaches(source))
    for seen in ("node._free", "'_re_auth_token'", "nodes_manager", "connection_kwargs"):
        assert seen in reaches, seen


def test_the_checks_see_a_planted_reach_even_a_late_one() -> None:
    planted = """\
from typing import TYPE_CHECKING
from redis.asyncio.cluster import RedisCluster
from redis._parsers import Encoder
import redis.asyncio as aioredis
if TYPE_CHECKING:
    from fakeredis import FakeServer

def late(client, node, parts, store):
    import lupa
    importlib.import_module("fakeredis._core")
    node._free.append(1)
    getattr(node, "_free", None)
    client.nodes_manager.initialize()
    aioredis.client._private_helper()
    return parts._replace(path=""), store._label  # not redis-py's: not named

class Eager(RedisCluster):
    def go(self):
        return self._initialize  # a redis-py class's own private

class Ours:
    def go(self):
        return self._lock, self._free  # ours, though redis-py has a _lock and a _free too
"""
    assert kit_imports(planted) == [
        "line 6: imports fakeredis",
        "line 9: imports lupa",
        "line 10: imports fakeredis._core",
    ]
    assert sorted(redis_reaches(planted), key=lambda s: int(s.split(":")[0][5:])) == [
        "line 3: imports Encoder from redis._parsers",
        "line 11: node._free",
        "line 12: getattr(node, '_free', None)",
        "line 13: client.nodes_manager",
        "line 14: aioredis.client._private_helper",
        "line 19: self._initialize",
    ]
