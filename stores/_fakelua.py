"""The one adapter to fakeredis's private scripting internals, for ``memory://`` stores.

fakeredis (with lupa) runs a store's Lua scripts in-process, and every store
operation is a script. Four of its habits cost more than the scripts do:

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
state), whose global check lists, in Lua, only the globals fakeredis does not
expect (`_NewGlobals`), and whose scripts' common reads take a lane of
their own (`_lane`: the same answers from fakeredis's own data and helpers,
anything unusual left to fakeredis), and whose writes a shorter one
(`_writes`: fakeredis's own command methods, write-back and notifications,
without its generic name lookup and argument conversion; HSET and XADD
``*`` with fakeredis's own bodies and no generic walk at all), whose
scripts' WATCH notices and wake-ups come once, as each script ends
(`_quietly`); `preload()` puts a store's scripts in a server's script cache.
`memory_store()` makes a store whose connections take a script call as its
fields, without RESP (`_MemoryConnection`), and have no socket timeout. Nothing else changes: a
cached chunk is called afresh each time (its top-level locals are new on each call, as with
``execute``), errors read the same (a source that does not compile goes to
``execute``), and the global check runs as often and refuses the same
scripts with the same message. Only the servers made here are touched, never
fakeredis's classes; the one module-wide change is that fakeredis's scripting
module hashes through `_Digests`, which gives the sources `preload` put in a
cache the digest it made once (any other text is hashed as before, to the same
digest).

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

import inspect
from collections.abc import Callable, Iterable
from typing import Any

import fakeredis

try:
    from fakeredis._clients._async import FakeAsyncRedisConnection
except ImportError:  # fakeredis before 2.40 (its commands then go as RESP: see `_direct`)
    from fakeredis.aioredis import FakeAsyncRedisConnection

from stores._redispy import _packed, pack
from stores.redis import RedisStore

__all__ = ["compiles_once", "fake_server", "memory_store", "preload"]

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
        self._sealed = _NewGlobals(known, self._runtime.compile(_LIST_NEW))

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
    """

    __slots__ = ("_dirty", "_list", "_watched")

    def __init__(self, known: Any, make: Any) -> None:
        self._dirty = True  # a global may have been set since the last listing
        self._list = make(known, self._mark)
        self._watched = True

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


# -- the read lane ----------------------------------------------------------------
#
# fakeredis answers a script's ``redis.call`` through the same layers as a
# client's command (name lookup, argument conversion, generic signature check,
# write-back and notifications), ~10-35 us a call: most of a memory:// store's
# time. The read lane answers the reads the store's scripts make most (in the
# common shapes: plain arguments, no field or member TTLs, RESP2, a Redis
# server) from fakeredis's own data, with its own helpers (range fixing, score
# parsing, score formatting), as its command would: a read writes nothing back
# and notifies nothing. Anything else (another command, shape, type: a WRONGTYPE
# error included) goes the usual way. tests/test_fakelua.py runs every read
# shape on both lanes and compares.

_SLOW: Any = object()  # a read the lane leaves to fakeredis
_NO_LANE = (None, None)


def _digits(x: Any) -> bytes:
    """A number a script passed ``redis.call`` as fakeredis makes it (``%.17g``);
    TypeError for anything else (a bool, a table: fakeredis's error)."""
    if type(x) is not int and type(x) is not float:
        raise TypeError(type(x).__name__)
    return b"%.17g" % x


def _lane() -> dict[bytes, Callable[[Any, list[Any], Any], Any]] | None:
    """The read handlers by command name, or None when this fakeredis keeps its
    data in another shape (then every call goes the usual way)."""
    try:
        from fakeredis._command_args_parsing import Float, Int
        from fakeredis._core import CommandItem
        from fakeredis._helpers import fix_range
        from fakeredis.commands_mixins._mixin_base import CommandsMixinBase
        from fakeredis.commands_mixins.sortedset_mixin import ScoreTest, SortedSetCommandsMixin
        from fakeredis.model import ExpiringMembersSet, Hash, ZSet

        h, s, z = Hash(), ExpiringMembersSet(), ZSet()
        low: Any = ScoreTest.decode(b"-inf").lower_bound
        high: Any = ScoreTest.decode(b"+inf").upper_bound
        kind_of, limit = CommandsMixinBase._key_value_type, SortedSetCommandsMixin._limit_items
        if (h._expiry_heap, h._expired_fields, s._may_expire) != ([], [], False) or (
            list(z.islice_score(0, 1)) or list(z.irange_score(low, high, False))
        ):
            return None
    except Exception:  # any difference: no lane
        return None

    def value(db: Any, key: bytes, kind: type) -> Any:
        item = db.get(key)  # None when missing (or expired: fakeredis drops it)
        if item is None:
            return None
        v: Any = item.value
        if type(v) is not kind:
            return _SLOW  # fakeredis answers WRONGTYPE
        if kind is Hash and (item.value._expiry_heap or item.value._expired_fields):
            return _SLOW  # field TTLs: fakeredis notifies their expiry
        if kind is ExpiringMembersSet and item.value._may_expire:
            return _SLOW
        return v

    def scored(items: Any, withscores: bool, table: Any) -> Any:
        if not withscores:
            return table([m for _, m in items])
        out: list[bytes] = []
        for score, member in items:
            out += (member, Float.encode(score, humanfriendly=False))
        return table(out)

    def hget(sock: Any, a: list[Any], table: Any) -> Any:
        if len(a) != 2 or (v := value(sock._db, a[0], Hash)) is _SLOW:
            return _SLOW
        got = None if v is None else v.get(a[1])
        return False if got is None else got

    def hmget(sock: Any, a: list[Any], table: Any) -> Any:
        if len(a) < 2 or (v := value(sock._db, a[0], Hash)) is _SLOW:
            return _SLOW
        got = [None if v is None else v.get(f) for f in a[1:]]
        return table([False if x is None else x for x in got])

    def hgetall(sock: Any, a: list[Any], table: Any) -> Any:
        if len(a) != 1 or (v := value(sock._db, a[0], Hash)) is _SLOW:
            return _SLOW
        return table([x for kv in (v.getall().items() if v is not None else ()) for x in kv])

    def type_(sock: Any, a: list[Any], table: Any) -> Any:
        if len(a) != 1:
            return _SLOW
        db = sock._db
        return table({b"ok": kind_of(CommandItem(a[0], db, db.get(a[0]))).value})

    def exists(sock: Any, a: list[Any], table: Any) -> Any:
        if not a:
            return _SLOW
        db = sock._db
        return sum(1 for k in a if CommandItem(k, db, db.get(k)))  # as fakeredis: each one named

    def size(kind: type) -> Callable[[Any, list[Any], Any], Any]:
        def read(sock: Any, a: list[Any], table: Any) -> Any:
            if len(a) != 1 or (v := value(sock._db, a[0], kind)) is _SLOW:
                return _SLOW
            return 0 if v is None else len(v)

        return read

    def smembers(sock: Any, a: list[Any], table: Any) -> Any:
        if len(a) != 1 or (v := value(sock._db, a[0], ExpiringMembersSet)) is _SLOW:
            return _SLOW
        return table([] if v is None else list(v))

    def zscore(sock: Any, a: list[Any], table: Any) -> Any:
        if len(a) != 2 or (v := value(sock._db, a[0], ZSet)) is _SLOW:
            return _SLOW
        score = None if v is None else v.get(a[1])
        return False if score is None else Float.encode(score, humanfriendly=False)

    def index(b: bytes) -> int:
        """A ZRANGE index as fakeredis reads it; a plain 64-bit integer (the norm)
        read at once, anything else through fakeredis's two parsers."""
        try:
            n = int(b)
        except ValueError:
            n = None
        if n is not None and -(2**63) <= n < 2**63 and b"%d" % n == b:
            return n
        return Int.decode(ScoreTest.decode(b).bytes_val or b"")

    def zrange(sock: Any, a: list[Any], table: Any) -> Any:  # by rank only
        withscores = len(a) == 4 and a[3].lower() == b"withscores"
        if not (len(a) == 3 or withscores) or (v := value(sock._db, a[0], ZSet)) is _SLOW:
            return _SLOW
        try:
            first, last = index(a[1]), index(a[2])
        except Exception:  # not an index: fakeredis says how
            return _SLOW
        if v is None:
            return table([])
        first, last = fix_range(first, last, len(v))
        return scored(v.islice_score(first, last, False), withscores, table)

    def zrangebyscore(sock: Any, a: list[Any], table: Any) -> Any:
        opts, withscores = list(a[3:]), False  # [WITHSCORES] [LIMIT offset count] [WITHSCORES]
        for at in (0, -1):
            if not withscores and opts and opts[at].lower() == b"withscores":
                withscores = bool(opts.pop(at))
        if opts and (len(opts) != 3 or opts[0].lower() != b"limit"):
            return _SLOW
        if len(a) < 3 or (v := value(sock._db, a[0], ZSet)) is _SLOW:
            return _SLOW
        try:
            low, high = ScoreTest.decode(a[1]), ScoreTest.decode(a[2])
            offset, count = (Int.decode(opts[1]), Int.decode(opts[2])) if opts else (0, -1)
        except Exception:  # fakeredis says what is wrong
            return _SLOW
        if v is None:
            return table([])
        items = list(v.irange_score(low.lower_bound, high.upper_bound, reverse=False))
        return scored(limit(items, offset, count), withscores, table)

    def del_(sock: Any, a: list[Any], table: Any) -> Any:
        # keys that are all missing: nothing to delete, nothing written or notified
        return _SLOW if not a or any(sock._db.get(k) is not None for k in a) else 0

    def publish(sock: Any, a: list[Any], table: Any) -> Any:
        # to a channel no one listens on (nor any pattern): no one is told, 0 are
        server = sock._server
        if len(a) != 2 or server.psubscribers or server.subscribers.get(a[0]):
            return _SLOW
        return 0

    reads = {
        b"DEL": del_, b"PUBLISH": publish, b"HGET": hget, b"HMGET": hmget, b"HGETALL": hgetall,
        b"TYPE": type_, b"EXISTS": exists, b"ZCARD": size(ZSet), b"LLEN": size(list),
        b"SMEMBERS": smembers, b"ZSCORE": zscore, b"ZRANGE": zrange,
        b"ZRANGEBYSCORE": zrangebyscore,
    }  # fmt: skip
    return {**reads, **{name.lower(): read for name, read in reads.items()}}


# -- the write lane -----------------------------------------------------------------
#
# The store's scripts write with a few commands (HSET, ZADD, XADD, ...), each
# through the same layers as a read. The write lane runs them as fakeredis's
# own command does (`_run_command`): the same argument checks, the key's
# `CommandItem`, fakeredis's own command method, the write-back (which tells
# WATCHers and drops an emptied key), the keyspace and field notifications and
# the reply's conversion; it only skips the generic name lookup and argument
# conversion. A command in another shape (a wrong arity, a bad number, a key of
# another type: fakeredis's error) goes the usual way, and so does every write
# of a connection in Pub/Sub mode. Through ``redis.pcall`` an error reply
# becomes a table, as fakeredis's does. tests/test_fakelua.py runs every write
# shape on both lanes and compares the replies and what each left.


def _writes() -> dict[bytes, Callable[[Any, list[Any], Any], Any]] | None:
    """The write handlers by command name (see above), or None when this fakeredis
    keeps its commands in another shape (then every write goes the usual way)."""
    try:
        from fakeredis import _msgs as msgs
        from fakeredis._commands import SUPPORTED_COMMANDS, Key
        from fakeredis._core import CommandItem
        from fakeredis._helpers import SimpleError
        from fakeredis._socket._resp import convert_to_resp2

        keep_empty, no_create, as_is = (
            msgs.FLAG_LEAVE_EMPTY_VAL, msgs.FLAG_DO_NOT_CREATE, msgs.FLAG_SKIP_CONVERT_TO_RESP2
        )  # fmt: skip
        refused = {msgs.FLAG_NO_SCRIPT}
        from fakeredis._socket import AsyncFakeSocket
        from fakeredis.model import Hash, XStream
        from fakeredis.model._stream import MAX_ID_PART, StreamEntryKey

        hset_event = SUPPORTED_COMMANDS["hset"].name.encode()
        xadd_event = SUPPORTED_COMMANDS["xadd"].name.encode()
        if Hash()._expiry_heap != [] or not hasattr(AsyncFakeSocket, "_hset"):
            return None
    except Exception:  # any difference: no lane
        return None
    try:  # the XADD short-cut needs its stream model as fakeredis 2.40 has it
        fast_xadd = (
            isinstance(XStream()._last_id, StreamEntryKey)
            and list(inspect.signature(XStream.add).parameters)[1:3] == ["fields", "key"]
            and hasattr(AsyncFakeSocket, "_stream_node_limits")
        )
    except Exception:
        fast_xadd = False

    def handler(sig: Any) -> Callable[[Any, list[Any], Any], Any]:
        fixed, repeat, flags = list(sig.fixed), list(sig.repeat), sig.flags
        name, event = sig.func_name, sig.name.encode()
        remove_empty, create, convert = (
            keep_empty not in flags,
            no_create not in flags,
            as_is not in flags,
        )

        def write(sock: Any, a: list[Any], runtime: Any) -> Any:
            db = sock._db
            try:  # fakeredis's Signature.apply, for the shapes the store uses
                sig.check_arity(a, sock.version)
                args, items = list(a), []
                for i, arg in enumerate(a):
                    kind = fixed[i] if i < len(fixed) else repeat[(i - len(fixed)) % len(repeat)]
                    if kind is bytes:
                        continue
                    if type(kind) is not Key:
                        args[i] = kind.decode(arg)
                        continue
                    item = db.get(arg)
                    want = kind.type_
                    if item is None and kind.missing_return is not Key.UNSPECIFIED:
                        return _SLOW  # a short-cut answer
                    if want is not None and item is not None and type(item.value) is not want:
                        return _SLOW  # WRONGTYPE
                    default = (
                        want() if create and want not in (None, bytes) and item is None else None
                    )
                    args[i] = CommandItem(arg, db, item, default=default)
                    items.append(args[i])
            except Exception:  # fakeredis words the error
                return _SLOW
            sock._subkey_events = []
            try:
                result = getattr(sock, name)(*args)
                if convert and sock._resp_version == 2:
                    result = convert_to_resp2(result, "redis")
            except SimpleError as exc:  # as fakeredis: what was written is kept
                result = exc
            for item in items:
                item.writeback(remove_empty_val=remove_empty)
            sock._keyspace_notifications(items, event)
            sock._subkey_notifications(items)
            return sock._convert_redis_result(runtime, result)  # raises an error reply

        return write

    def notified(sock: Any, item: Any, event: bytes) -> None:
        item.writeback()  # (neither command empties its key)
        sock._keyspace_notifications([item], event)
        sock._subkey_notifications([item])

    def hset(sock: Any, a: list[Any], runtime: Any) -> Any:
        # HSET key field value [field value ...], of a hash with no field TTLs:
        # fakeredis's own HSET body without the generic signature walk.
        if len(a) < 3 or not len(a) % 2:
            return _SLOW  # fakeredis words the arity error
        db = sock._db
        item = db.get(a[0])
        if item is not None and (type(item.value) is not Hash or item.value._expiry_heap):
            return _SLOW  # WRONGTYPE, or field TTLs (fakeredis notifies their expiry)
        key = CommandItem(a[0], db, item, default=Hash() if item is None else None)
        sock._subkey_events = []
        created = sock._hset(key, *a[1:])
        notified(sock, key, hset_event)
        return created

    def xadd(sock: Any, a: list[Any], runtime: Any) -> Any:
        # XADD key * field value [field value ...]: as fakeredis's, with the id's
        # millisecond read from the command's time (the database's, set as the
        # EVALSHA began: one read of the clock, not one per XADD)
        if len(a) < 4 or a[1] != b"*" or len(a) % 2:
            return _SLOW  # options, an explicit id, an odd field list
        db = sock._db
        item = db.get(a[0])
        stream = None if item is None else item.value
        if stream is not None and type(stream) is not XStream:
            return _SLOW  # WRONGTYPE
        if not stream:  # as fakeredis's: an emptied stream starts again
            stream = XStream()
        last = stream._last_id
        now = int(1000 * db.time)
        if now > last.ts:
            entry = StreamEntryKey(now, 0)
        elif last.seq < MAX_ID_PART:
            entry = StreamEntryKey(last.ts, last.seq + 1)
        else:
            return _SLOW  # ids exhausted in this millisecond: fakeredis decides
        key = CommandItem(a[0], db, item)
        sock._subkey_events = []
        stream.add(a[2:], entry, *sock._stream_node_limits())
        key.update(stream)
        notified(sock, key, xadd_event)
        return entry.encode()

    names = (
        "HSET", "HDEL", "HINCRBY", "ZADD", "ZREM", "XADD", "XTRIM", "LPUSH", "RPUSH", "LTRIM",
        "LPOP", "SADD", "INCR", "DEL", "UNLINK",
    )  # fmt: skip
    writes = {}
    for n in names:
        sig = SUPPORTED_COMMANDS.get(n.lower())
        if sig is None or sig.flags & refused or "redis" not in sig.server_types:
            continue
        writes[n.encode()] = writes[n.lower().encode()] = handler(sig)
    fast = {b"HSET": hset, b"XADD": xadd if fast_xadd else None}
    for name, write in fast.items():
        if write is not None and name in writes:
            writes[name] = writes[name.lower()] = write
    return writes


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


# -- commands without RESP -------------------------------------------------------
#
# A memory:// store's script calls reach its server as their fields: the lane
# (stores._redispy.Lane) asks the connection class to `pack_fields` a command,
# and `send_packed_command` hands them to the fake socket's command processing
# (`_process_command`, what its RESP parser calls with the fields it read), so
# neither side frames nor parses RESP. A command with an argument of another
# type, a connection that is not connected, is due a health check, or whose
# socket is paused, killed or cut off goes through RESP as before (with its
# errors). Replies were never RESP: fakeredis queues them as objects.


class _Fields(list[bytes]):
    """One command's fields, for an in-process server's socket (no RESP)."""


class _MemoryConnection(FakeAsyncRedisConnection):
    """A fakeredis connection that takes a command as its fields (see above)."""

    def pack_fields(self, args: tuple[Any, ...]) -> Any:
        fields = _Fields()
        encoding = self.encoder.encoding
        for a in args:
            t = type(a)
            if t is bytes:
                fields.append(a)
            elif t is str:
                fields.append(a.encode(encoding, "strict"))  # as stores._redispy.pack
            elif t is int:
                fields.append(b"%d" % a)
            else:  # a float, a bool, another type: redis-py's packing (or error)
                return _packed(self, args)
        if b" " in fields[0]:  # "CONFIG GET": redis-py splits it
            return _packed(self, args)
        return fields

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        sock = self._sock if type(command) is _Fields and self.is_connected else None
        if (
            sock is None
            or check_health
            or getattr(sock, "_paused", True)  # (True: a fakeredis without them)
            or getattr(sock, "_killed", True)
            or not sock._server.connected
        ):
            if type(command) is _Fields:
                command = pack(tuple(command))
            await super().send_packed_command(command, check_health)
            return
        sock._process_command(command)


def _direct() -> bool:
    """Whether this fakeredis's sockets process a command's fields as
    `_MemoryConnection` expects (else memory:// speaks RESP to them)."""
    try:
        from fakeredis._socket import AsyncFakeSocket

        params = list(inspect.signature(AsyncFakeSocket._process_command).parameters)
        return params == ["self", "fields"]
    except Exception:
        return False


_DIRECT = _direct()


def fake_server() -> fakeredis.FakeServer:
    """A new, empty fakeredis server for one ``memory://`` store."""
    return _Server() if compiles_once() else fakeredis.FakeServer()


def memory_store(server: fakeredis.FakeServer, **options: Any) -> RedisStore:
    """A `RedisStore` (``prefix``, ``partitions``, ``max_events_per_run`` in
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
