"""The read and write lanes of a ``memory://`` server's scripts (`testing._fakelua`).

fakeredis answers a script's ``redis.call`` through the layers of a client's
command; the lanes answer the store's commonest commands from fakeredis's
own data and command bodies, the same answers sooner. `testing._fakelua`
puts them in front of its servers' ``redis.call`` and ``redis.pcall``; this
module only builds them (`reads`, `writes`), each feature-tested against the
fakeredis it runs on (None when that fakeredis keeps its data or commands
in another shape).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["NO_LANE", "SLOW", "digits", "reads", "writes"]

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

SLOW: Any = object()  # a read the lane leaves to fakeredis
NO_LANE = (None, None)


def digits(x: Any) -> bytes:
    """A number a script passed ``redis.call`` as fakeredis makes it (``%.17g``);
    TypeError for anything else (a bool, a table: fakeredis's error)."""
    if type(x) is not int and type(x) is not float:
        raise TypeError(type(x).__name__)
    return b"%.17g" % x


def reads() -> dict[bytes, Callable[[Any, list[Any], Any], Any]] | None:
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
            return SLOW  # fakeredis answers WRONGTYPE
        if kind is Hash and (item.value._expiry_heap or item.value._expired_fields):
            return SLOW  # field TTLs: fakeredis notifies their expiry
        if kind is ExpiringMembersSet and item.value._may_expire:
            return SLOW
        return v

    def scored(items: Any, withscores: bool, table: Any) -> Any:
        if not withscores:
            return table([m for _, m in items])
        out: list[bytes] = []
        for score, member in items:
            out += (member, Float.encode(score, humanfriendly=False))
        return table(out)

    def hget(sock: Any, a: list[Any], table: Any) -> Any:
        if len(a) != 2 or (v := value(sock._db, a[0], Hash)) is SLOW:
            return SLOW
        got = None if v is None else v.get(a[1])
        return False if got is None else got

    def hmget(sock: Any, a: list[Any], table: Any) -> Any:
        if len(a) < 2 or (v := value(sock._db, a[0], Hash)) is SLOW:
            return SLOW
        got = [None if v is None else v.get(f) for f in a[1:]]
        return table([False if x is None else x for x in got])

    def hgetall(sock: Any, a: list[Any], table: Any) -> Any:
        if len(a) != 1 or (v := value(sock._db, a[0], Hash)) is SLOW:
            return SLOW
        return table([x for kv in (v.getall().items() if v is not None else ()) for x in kv])

    def type_(sock: Any, a: list[Any], table: Any) -> Any:
        if len(a) != 1:
            return SLOW
        db = sock._db
        return table({b"ok": kind_of(CommandItem(a[0], db, db.get(a[0]))).value})

    def exists(sock: Any, a: list[Any], table: Any) -> Any:
        if not a:
            return SLOW
        db = sock._db
        return sum(1 for k in a if CommandItem(k, db, db.get(k)))  # as fakeredis: each one named

    def size(kind: type) -> Callable[[Any, list[Any], Any], Any]:
        def read(sock: Any, a: list[Any], table: Any) -> Any:
            if len(a) != 1 or (v := value(sock._db, a[0], kind)) is SLOW:
                return SLOW
            return 0 if v is None else len(v)

        return read

    def smembers(sock: Any, a: list[Any], table: Any) -> Any:
        if len(a) != 1 or (v := value(sock._db, a[0], ExpiringMembersSet)) is SLOW:
            return SLOW
        return table([] if v is None else list(v))

    def zscore(sock: Any, a: list[Any], table: Any) -> Any:
        if len(a) != 2 or (v := value(sock._db, a[0], ZSet)) is SLOW:
            return SLOW
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
        if not (len(a) == 3 or withscores) or (v := value(sock._db, a[0], ZSet)) is SLOW:
            return SLOW
        try:
            first, last = index(a[1]), index(a[2])
        except Exception:  # not an index: fakeredis says how
            return SLOW
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
            return SLOW
        if len(a) < 3 or (v := value(sock._db, a[0], ZSet)) is SLOW:
            return SLOW
        try:
            low, high = ScoreTest.decode(a[1]), ScoreTest.decode(a[2])
            offset, count = (Int.decode(opts[1]), Int.decode(opts[2])) if opts else (0, -1)
        except Exception:  # fakeredis says what is wrong
            return SLOW
        if v is None:
            return table([])
        items = list(v.irange_score(low.lower_bound, high.upper_bound, reverse=False))
        return scored(limit(items, offset, count), withscores, table)

    def del_(sock: Any, a: list[Any], table: Any) -> Any:
        # keys that are all missing: nothing to delete, nothing written or notified
        return SLOW if not a or any(sock._db.get(k) is not None for k in a) else 0

    def publish(sock: Any, a: list[Any], table: Any) -> Any:
        # to a channel no one listens on (nor any pattern): no one is told, 0 are
        server = sock._server
        if len(a) != 2 or server.psubscribers or server.subscribers.get(a[0]):
            return SLOW
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


def writes() -> dict[bytes, Callable[[Any, list[Any], Any], Any]] | None:
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
                        return SLOW  # a short-cut answer
                    if want is not None and item is not None and type(item.value) is not want:
                        return SLOW  # WRONGTYPE
                    default = (
                        want() if create and want not in (None, bytes) and item is None else None
                    )
                    args[i] = CommandItem(arg, db, item, default=default)
                    items.append(args[i])
            except Exception:  # fakeredis words the error
                return SLOW
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
            return SLOW  # fakeredis words the arity error
        db = sock._db
        item = db.get(a[0])
        if item is not None and (type(item.value) is not Hash or item.value._expiry_heap):
            return SLOW  # WRONGTYPE, or field TTLs (fakeredis notifies their expiry)
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
            return SLOW  # options, an explicit id, an odd field list
        db = sock._db
        item = db.get(a[0])
        stream = None if item is None else item.value
        if stream is not None and type(stream) is not XStream:
            return SLOW  # WRONGTYPE
        if not stream:  # as fakeredis's: an emptied stream starts again
            stream = XStream()
        last = stream._last_id
        now = int(1000 * db.time)
        if now > last.ts:
            entry = StreamEntryKey(now, 0)
        elif last.seq < MAX_ID_PART:
            entry = StreamEntryKey(last.ts, last.seq + 1)
        else:
            return SLOW  # ids exhausted in this millisecond: fakeredis decides
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
