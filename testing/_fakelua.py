"""The one adapter to fakeredis's private scripting internals, for ``memory://`` stores.

(With its two parts: `testing._fakelanes`, the read and write lanes, and
`testing._fakeconn`, the connection that sends commands as fields.)

It is the test kit's side of the store seam, not part of the production
stores: ``stores.open_store("memory://")`` imports this module only when
such a URL is opened (its table of schemes that live outside ``stores``) and
calls `open_memory`; fakeredis comes with the ``test`` extra only.

fakeredis (with lupa) runs a store's Lua scripts in-process, and every store
operation is a script. These habits of its cost more than the scripts do:

- each ``EVALSHA`` compiles the script's source again (``LuaRuntime.execute``)
  and then runs a full ``collectgarbage()`` (to free the call's KEYS and ARGV
  tables, which Lua's incremental collector frees anyway);
- a new server knows no script, so a store's first call of each one answers
  ``NOSCRIPT``: three more round trips (redis-py's script object retries,
  loads, and runs it again), on every new ``memory://`` store;
- before every ``redis.call`` (and after every script) it checks that the
  script set no global by listing every global of the Lua state into a
  Python set;
- every ``redis.call`` goes through the layers of a client's command (name
  lookup, argument conversion, the generic signature check, write-back and
  notifications): 10-35 us a call, for reads that write nothing back;
- every write tells the key's WATCHers and wakes every blocked client of the
  database (a ``threading.Condition``), once per write, not once per script;
- a command is framed as RESP by redis-py and parsed back by the fake socket,
  and redis-py 8 sends it through ``asyncio.wait_for`` (a task per command)
  because of its default socket timeout.

`fake_server()` makes a server that compiles each script source once and
keeps the compiled chunk (per server: a chunk belongs to its server's Lua
state); whose global check lists, in Lua, only the globals fakeredis does not
expect (`_NewGlobals`); whose scripts' common reads take a lane of their own
(`testing._fakelanes.reads`: the same answers from fakeredis's own data and
helpers, anything unusual left to fakeredis) and whose writes a shorter one
(`testing._fakelanes.writes`: fakeredis's own command methods, write-back and
notifications, without its generic name lookup and argument conversion;
HSET and ``XADD *`` with fakeredis's own bodies and no generic walk at all);
and whose scripts' WATCH notices and wake-ups come once, as each script ends
(`_quietly`). `preload()` puts a store's scripts in a server's script cache.
`memory_store()` makes a store on it whose connections take a script call as
its fields, without RESP (`testing._fakeconn.MemoryConnection`), and have no
socket timeout. Nothing else changes: a cached chunk is called afresh each
time (its top-level locals are new on each call, as with ``execute``), errors
read the same (a source that does not compile goes to ``execute``), and the
global check runs as often and refuses the same scripts with the same
message. Only the servers made here are touched, never fakeredis's classes;
the one module-wide change is that fakeredis's scripting module hashes
through `_Digests`, which gives the sources `preload` put in a cache the
digest it made once (any other text is hashed as before, to the same digest).

All of it relies on fakeredis internals: the server-wide ``_lua_runtime``,
``_lua_expected_globals``, ``script_cache`` and the ``redis.call`` functions
it keeps there, that every supported fakeredis has (pyproject: ``>=2.38,<3``;
older releases also run the store's scripts wrongly), and for the read lane
its data model (hash, set and sorted set classes) and argument helpers, and
for the write lane its command signatures, ``CommandItem`` and notification
methods, as fakeredis 2.40 and later have them. Each is feature-tested: on a
fakeredis that keeps them elsewhere the server is a plain one (or has no
lanes), and ``memory://`` is as slow as fakeredis makes it, and as correct.
``tests/test_fakelua.py`` checks the adapter against a plain server, and
``python -m tests.fakeredis_oldest`` runs it, with the ``memory://``
conformance suite, on the oldest supported fakeredis.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import fakeredis

from stores._storecore import STORE_OPTIONS
from stores.redis import RedisStore
from testing._fakeconn import DIRECT as _DIRECT
from testing._fakeconn import MemoryConnection as _MemoryConnection
from testing._fakelanes import NO_LANE as _NO_LANE
from testing._fakelanes import SLOW as _SLOW
from testing._fakelanes import digits as _digits
from testing._fakelanes import reads as _lane
from testing._fakelanes import writes as _writes

__all__ = ["compiles_once", "fake_server", "memory_store", "open_memory", "preload"]

_RUNTIME = "_lua_runtime"  # fakeredis's attribute: the server's Lua state (lupa LuaRuntime)
_EXPECTED = "_lua_expected_globals"  # fakeredis's attribute: the global names a script may see
_COLLECT = (b"collectgarbage()", "collectgarbage()")  # fakeredis's cleanup after each call
# fakeredis's attributes: the Python functions its scripts' redis.call and redis.pcall call,
# and the socket whose script runs (they look it up there)
_CALLS = ("_lua_redis_call_wrapper", "_lua_redis_pcall_wrapper")
_CURRENT = "_lua_current_socket"


def compiles_once() -> bool:
    """Whether this fakeredis keeps one Lua state per server (so chunks can be reused)."""
    from fakeredis.commands_mixins.scripting_mixin import ScriptingCommandsMixin

    return hasattr(ScriptingCommandsMixin, "_get_server_runtime")


class _CompiledScripts:
    """A server's Lua state whose ``execute`` compiles each source once.

    Everything else goes to the lupa runtime it wraps (fakeredis keeps this
    object as the server's runtime and passes it to its own helpers).
    """

    __slots__ = ("_chunks", "_current", "_runtime", "_sealed", "table_from")

    def __init__(self, runtime: Any) -> None:
        self._runtime = runtime
        self._chunks: dict[bytes | str, Any] = {}
        self._sealed: _NewGlobals | None = None
        self.table_from = runtime.table_from  # called on every redis.call: no indirection
        #: fakeredis's one-item list of the socket whose script runs (see `_quietly`)
        self._current: list[Any] | None = None

    def seal(self, expected: set[Any]) -> None:
        """fakeredis took the names of the globals a script may see: from now on
        `globals` lists only the others (see `_NewGlobals`)."""
        known = self._runtime.table_from(dict.fromkeys(expected, True))
        self._sealed = _NewGlobals(known, self._runtime.compile(_LIST_NEW), self._runtime.globals())

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
        current = self._current
        if current is None:
            return chunk(*args)
        return _quietly(current[0], chunk, args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)


# A script's writes tell WATCHers and wake blocked clients once, as it ends.
# fakeredis does both on every write (`Database.notify_watch`: each WATCHer of
# the key, then every blocked client of the database, through a
# threading.Condition): ~10% of a memory:// store's script time. Redis itself
# serves blocked clients only after the script, and a WATCH can only be read
# after it too, so keeping the keys written and telling each of their WATCHers
# and waking the database once, when the script ends (or fails), is the same
# to every client. A database that does not keep its WATCHers as fakeredis 2.40
# does (a dict of key -> sockets), or whose `notify_watch` is already
# replaced, is told at each write as usual.


def _quietly(sock: Any, chunk: Any, args: tuple[Any, ...]) -> Any:
    """`chunk(*args)` (a script of `sock`) with its writes' notifications given at its end."""
    db: Any = getattr(sock, "_db", None)
    watches = getattr(db, "_watches", None)
    if not isinstance(watches, dict) or "notify_watch" in vars(db):
        return chunk(*args)
    written: set[bytes] = set()
    db.notify_watch = written.add  # shadows the method for this script only
    try:
        return chunk(*args)
    finally:
        del db.notify_watch
        if written:
            for key in written:
                for watcher in watches.get(key, ()):
                    watcher.notify_watch()
            db.wake_all()


# A Lua function listing the globals that are not in `known` (keys of any type),
# and whether the watch on new globals is still in place. The watch: `_G` gets a
# metatable whose __newindex (Lua calls it only for a key `_G` does not hold)
# sets the global as before and tells `mark` (nothing else changes: reading a
# global, or setting one that exists, never calls it). It is not installed over
# a metatable `_G` already has.
_LIST_NEW = b"""
local known, mark = ...
local G = _G
local watch = nil
if mark and getmetatable(G) == nil then
  watch = {__newindex = function(t, k, v) rawset(t, k, v); mark() end}
  setmetatable(G, watch)
end
return function()
  local out
  for k in pairs(G) do
    if not known[k] then
      out = out or {}
      out[#out + 1] = k
    end
  end
  return out, watch ~= nil and getmetatable(G) == watch
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

    The check before a call (`clean`, ~2 us a listing, ~7% of a crash check)
    lists only after a new global was set since the last listing found none
    (`_LIST_NEW`'s watch); the check after a script always lists, and a script
    that took the watch away (``setmetatable(_G, nil)``) turns the shortcut off
    for good: every check lists again.

    fakeredis 2.41 and later also drop the globals a refused script set
    (``globals()[name] = None``), so that later scripts are not refused for
    them: assignment goes to the Lua state's own globals table.
    """

    __slots__ = ("_dirty", "_list", "_real", "_watched")

    def __init__(self, known: Any, make: Any, real: Any) -> None:
        self._dirty = True  # a global may have been set since the last listing
        self._list = make(known, self._mark)
        self._real = real  # the Lua state's globals table (_G)
        self._watched = True

    def __setitem__(self, name: Any, value: Any) -> None:
        self._real[name] = value
        self._dirty = True

    def _mark(self) -> None:
        self._dirty = True

    def _listed(self) -> Any:
        new, watched = self._list()  # new: nil (None) when there is none
        self._watched = self._watched and bool(watched)
        self._dirty = new is not None or not self._watched
        return new

    def keys(self) -> list[Any]:
        new = self._listed()
        return [] if new is None else list(new.values())

    def clean(self) -> bool:
        """Whether no script set a global (what the check before a call asks)."""
        return not self._dirty or self._listed() is None


class _Server(fakeredis.FakeServer):
    """A fakeredis server whose scripts are compiled once (see the module)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == _RUNTIME and not isinstance(value, _CompiledScripts):
            value = _CompiledScripts(value)  # fakeredis made the server's Lua state
        elif name in _CALLS and callable(value):
            # the redis.call / redis.pcall of its scripts
            value = self._lanes(value, protected=name == _CALLS[1])
        super().__setattr__(name, value)
        if name == _EXPECTED and isinstance(value, set):
            runtime = self.__dict__.get(_RUNTIME)
            if isinstance(runtime, _CompiledScripts):
                runtime.seal(value)

    def _lanes(self, slow: Callable[..., Any], protected: bool = False) -> Callable[..., Any]:
        """`slow` (fakeredis's ``redis.call``, or with `protected` ``redis.pcall``)
        with the read and write lanes in front of it (see `_lane`, `_writes`): the
        same answers, sooner."""
        reads = _READS if self.server_type == "redis" else None
        writes = _WRITES or {}
        runtime = self.__dict__.get(_RUNTIME)
        current = getattr(self, _CURRENT, None)
        if isinstance(runtime, _CompiledScripts) and isinstance(current, list) and _QUIET:
            runtime._current = current  # its scripts' notifications come at their end
        if not reads or not isinstance(runtime, _CompiledScripts) or not isinstance(current, list):
            return slow
        table = runtime.table_from

        lanes = {op: (reads.get(op), writes.get(op)) for op in {*reads, *writes}}

        def call(op: Any, *args: Any) -> Any:
            read, write = lanes.get(op, _NO_LANE)
            sealed = runtime._sealed
            # the global check first, as fakeredis's (which refuses the call)
            if (read is None and write is None) or sealed is None or not sealed.clean():
                return slow(op, *args)
            sock = current[0]
            if getattr(sock, "_script_resp", None) != 2:
                return slow(op, *args)
            try:  # a Lua number becomes its %.17g digits, as fakeredis makes them
                a = [x if type(x) is bytes else _digits(x) for x in args]
            except TypeError:  # a bool or a table: fakeredis's error
                return slow(op, *args)
            out = _SLOW if read is None else read(sock, a, table)
            if out is not _SLOW or write is None or sock._pubsub:
                return slow(op, *args) if out is _SLOW else out
            if not protected:
                out = write(sock, a, runtime)
            else:
                try:  # as fakeredis's redis.pcall: an error reply becomes a table
                    out = write(sock, a, runtime)
                except Exception as exc:
                    return table({b"err": str(exc)})
            return slow(op, *args) if out is _SLOW else out

        return call


_READS = _lane()
_WRITES = _writes() if _READS is not None else None  # (the lanes go together)


def _quiet() -> bool:
    """Whether this fakeredis's databases tell WATCHers and wake blocked clients
    as `_quietly` expects (else every write does, as fakeredis does)."""
    try:
        from fakeredis._core import Database
    except ImportError:  # fakeredis before 2.40
        return False
    return all(callable(getattr(Database, m, None)) for m in ("notify_watch", "wake_all"))


_QUIET = _quiet()


# -- the scripts' digests ---------------------------------------------------------
#
# fakeredis's EVALSHA looks the source up and calls its EVAL, which hashes the
# whole source again (``hashlib.sha1(script)``) to name it: ~25 us for the 44 KB
# poll script, on every call. fakeredis's scripting module hashes through
# `_Digests`, which answers the digest it made once for the sources `preload`
# put in a cache, and hashes anything else as hashlib does. The digests are the
# same; those sources are few (a store's scripts, per configuration) and kept
# for the process. `preload` caches one bytes object per text, so a lookup
# finds its own key (and the hash bytes keep of themselves) at once.


class _Digests:
    """``hashlib`` as fakeredis's scripting module sees it (see above)."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self._known: dict[bytes, tuple[bytes, Any]] = {}  # source -> it, its hash

    def intern(self, source: bytes) -> bytes:
        """The one object for `source`'s text, its digest made once."""
        known = self._known.get(source)
        if known is None:
            known = self._known[source] = (source, self._real.sha1(source))
        return known[0]

    def sha1(self, data: Any = b"", **kwargs: Any) -> Any:
        hit = self._known.get(data) if type(data) is bytes and not kwargs else None
        return self._real.sha1(data, **kwargs) if hit is None else hit[1].copy()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def _digests() -> _Digests | None:
    """fakeredis's scripting module hashing through `_Digests` (installed once),
    or None when it hashes some other way (then `preload` interns nothing)."""
    import hashlib

    from fakeredis.commands_mixins import scripting_mixin

    found = getattr(scripting_mixin, "hashlib", None)
    if isinstance(found, _Digests):
        return found
    if found is not hashlib:
        return None
    digests = _Digests(hashlib)
    scripting_mixin.hashlib = digests  # type: ignore[attr-defined,assignment]
    return digests


def fake_server() -> fakeredis.FakeServer:
    """A new, empty fakeredis server for one ``memory://`` store."""
    return _Server() if compiles_once() else fakeredis.FakeServer()


def open_memory(url: str, *, prefix: str, partitions: int, **options: Any) -> RedisStore:
    """The store ``stores.open_store`` opens for a ``memory://`` `url`: the Redis
    store on a new, empty server (`fake_server`) with its scripts loaded, for
    in-process speed in tests. Only the store's own `options` apply
    (``max_events_per_run`` and the other bounds of `sdk.store.StoreLimits`):
    there is no connection to tune."""
    unknown = set(options) - set(STORE_OPTIONS)
    if unknown:
        raise TypeError(f"memory:// takes no connection options, got {sorted(unknown)}")
    return memory_store(fake_server(), prefix=prefix, partitions=partitions, **options)


def memory_store(server: fakeredis.FakeServer, **options: Any) -> RedisStore:
    """A `RedisStore` (``prefix``, ``partitions``, its bounds in
    `options`) on the in-process `server`, with its scripts loaded there."""
    from stores._redispy import READ_ERRORS

    # No socket timeout, as a RedisStore.from_url store has by default: redis-py
    # 8's (5 s) runs every send through asyncio.wait_for (a task per command),
    # and nothing in-process can hang a send.
    direct: Any = {"connection_class": _MemoryConnection} if _DIRECT else {}
    client = fakeredis.FakeAsyncRedis(
        server=server,
        decode_responses=True,
        encoding_errors=READ_ERRORS,
        socket_timeout=None,
        **direct,
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
    digests = _digests() if isinstance(server, _Server) else None
    for sha, source in scripts:
        text = source.encode()
        cache[sha.encode()] = text if digests is None else digests.intern(text)
