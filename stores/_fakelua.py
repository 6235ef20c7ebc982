"""The one adapter to fakeredis's private scripting internals, for ``memory://`` stores.

fakeredis (with lupa) runs a store's Lua scripts in-process, and every store
operation is a script. Three of its habits cost more than the scripts do:

- each ``EVALSHA`` compiles the script's source again (``LuaRuntime.execute``)
  and then runs a full ``collectgarbage()`` (to free the call's KEYS and ARGV
  tables, which Lua's incremental collector frees anyway);
- a new server knows no script, so a store's first call of each one answers
  ``NOSCRIPT``: three more round trips (redis-py's script object retries,
  loads, and runs it again), on every new ``memory://`` store;
- before every ``redis.call`` (and after every script) it checks that the
  script set no global by listing every global of the Lua state into a
  Python set.

`fake_server()` makes a server that compiles each script source once and
keeps the compiled chunk (per server: a chunk belongs to its server's Lua
state), whose global check lists, in Lua, only the globals fakeredis does not
expect (`_NewGlobals`); `preload()` puts a store's scripts in a server's
script cache. Nothing else changes: a cached chunk is called afresh each time
(its top-level locals are new on each call, as with ``execute``), errors read
the same (a source that does not compile goes to ``execute``), and the
global check runs as often and refuses the same scripts with the same
message. Only the servers made here are touched, never fakeredis's classes.

All of it relies on fakeredis internals: the server-wide ``_lua_runtime``,
``_lua_expected_globals`` and ``script_cache`` that every supported fakeredis
has (pyproject: ``>=2.38,<3``;
older releases also run the store's scripts wrongly). Each is feature-tested:
on a fakeredis that keeps them elsewhere the server is a plain one, and
``memory://`` is as slow as fakeredis makes it, and as correct.
``tests/test_fakelua.py`` checks the adapter against a plain server, and
``python -m tests.fakeredis_oldest`` runs it, with the ``memory://``
conformance suite, on the oldest supported fakeredis.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import fakeredis

from stores.redis import RedisStore

__all__ = ["compiles_once", "fake_server", "memory_store", "preload"]

_RUNTIME = "_lua_runtime"  # fakeredis's attribute: the server's Lua state (lupa LuaRuntime)
_EXPECTED = "_lua_expected_globals"  # fakeredis's attribute: the global names a script may see
_COLLECT = (b"collectgarbage()", "collectgarbage()")  # fakeredis's cleanup after each call


def compiles_once() -> bool:
    """Whether this fakeredis keeps one Lua state per server (so chunks can be reused)."""
    from fakeredis.commands_mixins.scripting_mixin import ScriptingCommandsMixin

    return hasattr(ScriptingCommandsMixin, "_get_server_runtime")


class _CompiledScripts:
    """A server's Lua state whose ``execute`` compiles each source once.

    Everything else goes to the lupa runtime it wraps (fakeredis keeps this
    object as the server's runtime and passes it to its own helpers).
    """

    __slots__ = ("_chunks", "_runtime", "_sealed", "table_from")

    def __init__(self, runtime: Any) -> None:
        self._runtime = runtime
        self._chunks: dict[bytes | str, Any] = {}
        self._sealed: _NewGlobals | None = None
        self.table_from = runtime.table_from  # called on every redis.call: no indirection

    def seal(self, expected: set[Any]) -> None:
        """fakeredis took the names of the globals a script may see: from now on
        `globals` lists only the others (see `_NewGlobals`)."""
        known = self._runtime.table_from(dict.fromkeys(expected, True))
        self._sealed = _NewGlobals(self._runtime.compile(_LIST_NEW)(known))

    def globals(self) -> Any:
        if self._sealed is None:
            return self._runtime.globals()
        return self._sealed

    def execute(self, source: bytes | str, *args: Any) -> Any:
        if source in _COLLECT:
            return None  # the incremental collector frees the call's tables
        chunk = self._chunks.get(source)
        if chunk is None:
            try:
                chunk = self._runtime.compile(source)
            except Exception:  # a syntax error: raised (and worded) as fakeredis's own
                return self._runtime.execute(source, *args)
            self._chunks[source] = chunk
        return chunk(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)


# A Lua function listing the globals that are not in `known` (keys of any type).
_LIST_NEW = b"""
local known, G = ...
G = G or _G
return function()
  local out
  for k in pairs(G) do
    if not known[k] then
      out = out or {}
      out[#out + 1] = k
    end
  end
  return out
end
"""


class _NewGlobals:
    """What fakeredis's global check reads as the globals once they are sealed.

    The check (before every ``redis.call`` and after every script) is
    ``set(runtime.globals().keys()) - expected``: listing every global of the
    Lua state into a Python set each time. Listing, in Lua, only the names
    not in `expected` gives the check the same difference, for a fraction of
    the cost: nothing new (the norm) is an empty list; a script that set a
    global is refused, naming it, as before.
    """

    __slots__ = ("_list",)

    def __init__(self, list_new: Any) -> None:
        self._list = list_new

    def keys(self) -> list[Any]:
        new = self._list()  # nil (None) when there is none
        return [] if new is None else list(new.values())


class _Server(fakeredis.FakeServer):
    """A fakeredis server whose scripts are compiled once (see the module)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == _RUNTIME and not isinstance(value, _CompiledScripts):
            value = _CompiledScripts(value)  # fakeredis made the server's Lua state
        super().__setattr__(name, value)
        if name == _EXPECTED and isinstance(value, set):
            runtime = self.__dict__.get(_RUNTIME)
            if isinstance(runtime, _CompiledScripts):
                runtime.seal(value)


def fake_server() -> fakeredis.FakeServer:
    """A new, empty fakeredis server for one ``memory://`` store."""
    return _Server() if compiles_once() else fakeredis.FakeServer()


def memory_store(server: fakeredis.FakeServer, **options: Any) -> RedisStore:
    """A `RedisStore` (``prefix``, ``partitions``, ``max_events_per_run`` in
    `options`) on the in-process `server`, with its scripts loaded there."""
    from stores._redispy import READ_ERRORS

    client = fakeredis.FakeAsyncRedis(
        server=server, decode_responses=True, encoding_errors=READ_ERRORS
    )
    store = RedisStore(client, **options)
    preload(server, ((s.sha, str(s.script)) for s in store._scripts.values()))
    store._label = "memory://"
    return store


def preload(server: fakeredis.FakeServer, scripts: Iterable[tuple[str, str]]) -> None:
    """Put `scripts` (sha1, source) in `server`'s script cache, as ``SCRIPT LOAD`` would.

    A no-op on a fakeredis whose script cache is per connection.
    """
    cache = getattr(server, "script_cache", None)
    if not isinstance(cache, dict):
        return
    for sha, source in scripts:
        cache[sha.encode()] = source.encode()
