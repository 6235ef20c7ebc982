"""`testing._fakelua`: memory:// servers compile each script once, and Lua means the same.

Each behaviour is checked on a plain fakeredis server too, so the adapted one
is held to what fakeredis itself does. `python -m tests.fakeredis_oldest`
runs this file on the oldest fakeredis the project supports.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
from collections.abc import AsyncIterator

import fakeredis
import pytest
import redis.exceptions
from fakeredis import FakeServer
from fakeredis.commands_mixins.scripting_mixin import ScriptingCommandsMixin

from stores import open_store
from testing import _fakelua
from testing._fakeconn import DIRECT, MemoryConnection
from testing._fakelua import compiles_once, fake_server, preload

FRESH_LOCALS = """
local seen = {}
seen[#seen + 1] = ARGV[1]
redis.call('RPUSH', KEYS[1], ARGV[1])
return {#seen, redis.call('LLEN', KEYS[1])}
"""
SETS_A_GLOBAL = "leaked = 1\nreturn 1"
FAILS = "return redis.call('INCR', KEYS[1])"  # on a list: WRONGTYPE


@pytest.fixture(name="server", params=["adapted", "plain"])
def server_fixture(request: pytest.FixtureRequest) -> fakeredis.FakeServer:
    return fake_server() if request.param == "adapted" else fakeredis.FakeServer()


@pytest.fixture(name="client")
async def client_fixture(server: fakeredis.FakeServer) -> AsyncIterator[fakeredis.FakeAsyncRedis]:
    client = fakeredis.FakeAsyncRedis(server=server, decode_responses=True)
    yield client
    await client.aclose()


async def test_a_scripts_top_level_locals_are_new_on_each_call(
    client: fakeredis.FakeAsyncRedis,
) -> None:
    assert await client.eval(FRESH_LOCALS, 1, "l", "a") == [1, 1]
    assert await client.eval(FRESH_LOCALS, 1, "l", "b") == [1, 2]
    sha = await client.script_load(FRESH_LOCALS)
    assert await client.evalsha(sha, 1, "l", "c") == [1, 3]


async def test_keys_and_argv_are_the_calls_own(client: fakeredis.FakeAsyncRedis) -> None:
    script = "return {KEYS[1], ARGV[1], #KEYS, #ARGV}"
    assert await client.eval(script, 1, "k1", "a1") == ["k1", "a1", 1, 1]
    assert await client.eval("return {#KEYS, #ARGV}", 0) == [0, 0]
    assert await client.eval("return {#KEYS, #ARGV}", 0, "x", "y") == [0, 2]


async def test_a_script_that_sets_a_global_is_refused_every_time(
    client: fakeredis.FakeAsyncRedis,
) -> None:
    for _ in range(2):  # the second call reuses the compiled chunk: still refused
        with pytest.raises(redis.exceptions.ResponseError, match=r"global.*leaked"):
            await client.eval(SETS_A_GLOBAL, 0)


async def test_what_a_refused_global_leaves_behind_reads_as_on_a_plain_server() -> None:
    # fakeredis before 2.41 keeps the global, so every later redis.call is refused
    # too; 2.41 and later drop it. An adapted server does what its fakeredis does.
    outcomes: list[list[str]] = []
    for server in (fake_server(), FakeServer()):
        client = fakeredis.FakeAsyncRedis(server=server, decode_responses=True)
        seen = []
        for script in (SETS_A_GLOBAL, "return redis.call('INCR', 'n')", "return 3"):
            try:
                seen.append(repr(await client.eval(script, 0)))
            except redis.exceptions.ResponseError as exc:
                seen.append(str(exc))
        outcomes.append(seen)
        await client.aclose()
    assert outcomes[0] == outcomes[1] and "leaked" in outcomes[0][0]


async def test_a_global_check_reads_the_same_on_both_servers() -> None:
    messages = []
    for server in (fake_server(), fakeredis.FakeServer()):
        client = fakeredis.FakeAsyncRedis(server=server, decode_responses=True)
        assert await client.eval("local x = 1\nreturn redis.call('INCR', 'n')", 0) == 1
        for script in ("one = 1\nreturn 1", "two = redis.call('INCR', 'n')\nreturn 2"):
            with pytest.raises(redis.exceptions.ResponseError) as caught:
                await client.eval(script, 0)
            messages.append(str(caught.value))
        await client.aclose()
    assert messages[:2] == messages[2:]


async def test_an_error_reads_the_same_on_both_servers(client: fakeredis.FakeAsyncRedis) -> None:
    await client.rpush("l", "x")
    with pytest.raises(redis.exceptions.ResponseError) as first:
        await client.eval(FAILS, 1, "l")
    with pytest.raises(redis.exceptions.ResponseError) as again:
        await client.eval(FAILS, 1, "l")
    assert "WRONGTYPE" in str(first.value) or "wrong kind" in str(first.value)
    assert str(again.value) == str(first.value)
    plain = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer(), decode_responses=True)
    await plain.rpush("l", "x")
    with pytest.raises(redis.exceptions.ResponseError) as reference:
        await plain.eval(FAILS, 1, "l")
    await plain.aclose()
    assert str(first.value) == str(reference.value)


def test_every_supported_fakeredis_keeps_a_lua_state_per_server() -> None:
    assert compiles_once()  # else memory:// still works, only slower: see testing._fakelua


async def test_an_adapted_server_compiles_each_source_once() -> None:
    server = fake_server()
    client = fakeredis.FakeAsyncRedis(server=server, decode_responses=True)
    for n in range(5):
        assert await client.eval(FRESH_LOCALS, 1, "l", str(n)) == [1, n + 1]
    runtime = server._lua_runtime  # type: ignore[attr-defined]
    assert list(runtime._chunks) == [FRESH_LOCALS.encode()]
    await client.aclose()


async def test_a_memory_store_starts_with_its_scripts_loaded() -> None:
    store = open_store("memory://")
    shas = [script.sha for script in store._scripts.values()]
    loaded = await store.client.script_exists(*shas)
    assert all(loaded), dict(zip(store._scripts, loaded, strict=True))
    await store.close()


def test_preloading_fills_the_cache_as_script_load_would() -> None:
    server = fake_server()
    preload(server, [(hashlib.sha1(b"return 1").hexdigest(), "return 1")])
    cache = server.script_cache
    assert cache == {hashlib.sha1(b"return 1").hexdigest().encode(): b"return 1"}


async def test_a_preloaded_script_is_not_hashed_again_and_names_itself_the_same() -> None:
    from fakeredis.commands_mixins import scripting_mixin

    source = "return ARGV[1] .. '#preloaded'"
    sha = hashlib.sha1(source.encode()).hexdigest()
    server = fake_server()
    preload(server, [(sha, source)])
    client = fakeredis.FakeAsyncRedis(server=server, decode_responses=True)
    digests = scripting_mixin.hashlib  # type: ignore[attr-defined]
    if not compiles_once() or not hasattr(digests, "intern"):
        pytest.skip("this fakeredis hashes its scripts some other way")
    hashed: list[bytes] = []
    real = digests._real

    class Counting:
        def sha1(self, data: bytes = b"", **kwargs: object) -> object:
            hashed.append(data)
            return real.sha1(data, **kwargs)

    digests._real = Counting()  # type: ignore[attr-defined]
    try:
        assert await client.evalsha(sha, 0, "a") == "a#preloaded"
        assert hashed == []  # EVALSHA of a preloaded source: its digest made once
        # anything else is hashed as hashlib does, and named the same
        assert await client.eval("return 2", 0) == 2
        assert hashed == [b"return 2"]
        assert await client.script_load(source) == sha
        assert digests.sha1(b"x").hexdigest() == hashlib.sha1(b"x").hexdigest()
    finally:
        digests._real = real  # type: ignore[attr-defined]
        await client.aclose()


async def test_a_syntax_error_reads_as_on_a_plain_server() -> None:
    messages = []
    for server in (fake_server(), fakeredis.FakeServer()):
        client = fakeredis.FakeAsyncRedis(server=server, decode_responses=True)
        with pytest.raises(redis.exceptions.ResponseError) as caught:
            await client.eval("return (", 0)
        messages.append(str(caught.value))
        await client.aclose()
    assert messages[0] == messages[1]


# -- the read lane: the store's reads, answered as fakeredis's own commands do -----

# Every shape of every read the lane answers, and shapes next to them that it
# leaves to fakeredis (other options, bad numbers, wrong types, wrong arity);
# numbers are passed as Lua numbers, as the store's scripts pass them.
LANE_READS: list[tuple[object, ...]] = [
    ("HGET", "h", "a"), ("HGET", "h", "empty"), ("HGET", "h", "none"), ("HGET", "nokey", "a"),
    ("HGET", "z", "a"), ("HGET", "h"), ("hget", "h", "a"),
    ("HMGET", "h", "a", "none", "empty"), ("HMGET", "nokey", "a", "b"), ("HMGET", "l", "a"),
    ("HMGET", "h"), ("HGETALL", "h"), ("HGETALL", "nokey"), ("HGETALL", "s"), ("HGETALL", "h", "a"),
    ("TYPE", "h"), ("TYPE", "z"), ("TYPE", "s"), ("TYPE", "l"), ("TYPE", "str"), ("TYPE", "x:st"),
    ("TYPE", "nokey"), ("TYPE",), ("EXISTS", "h"), ("EXISTS", "h", "h", "nokey", "str"),
    ("EXISTS",), ("ZCARD", "z"), ("ZCARD", "nokey"), ("ZCARD", "h"), ("ZCARD", "z", "z"),
    ("LLEN", "l"), ("LLEN", "nokey"), ("LLEN", "z"), ("SMEMBERS", "s"), ("SMEMBERS", "nokey"),
    ("SMEMBERS", "h"), ("ZSCORE", "z", "a"), ("ZSCORE", "z", "big"), ("ZSCORE", "z", "neg"),
    ("ZSCORE", "z", "none"), ("ZSCORE", "nokey", "a"), ("ZSCORE", "h", "a"),
    ("ZRANGE", "z", 0, 0, "WITHSCORES"), ("ZRANGE", "z", 0, -1), ("ZRANGE", "z", "0", "-1"),
    ("ZRANGE", "z", -2, -1, "withscores"), ("ZRANGE", "z", 5, 10), ("ZRANGE", "z", 3, 1),
    ("ZRANGE", "z", 1.5, 2), ("ZRANGE", "z", "(1", 2), ("ZRANGE", "z", "x", 2),
    ("ZRANGE", "z", "01", 2), ("ZRANGE", "z", " 1", 2), ("ZRANGE", "z", "-0", 2),
    ("ZRANGE", "z", "1_0", 2), ("ZRANGE", "z", "+1", 2), ("ZRANGE", "z", 0, 2**63),
    ("ZRANGE", "z", -(2**63), -1), ("ZRANGE", "nokey", 0, 0, "WITHSCORES"), ("ZRANGE", "h", 0, 0),
    ("ZRANGE", "z", 0, 1, "BYSCORE"), ("ZRANGE", "z", 0, -1, "REV"), ("ZRANGE", "z", 0),
    ("ZRANGE", "z", 0, -1, "WITHSCORES", "x"),
    ("ZRANGEBYSCORE", "z", "-inf", "+inf"), ("ZRANGEBYSCORE", "z", "-inf", 2.5, "LIMIT", 0, 1),
    ("ZRANGEBYSCORE", "z", "(1", "3", "WITHSCORES"),
    ("ZRANGEBYSCORE", "z", 1, "inf", "LIMIT", 1, -1),
    ("ZRANGEBYSCORE", "z", "-inf", 1e300, "WITHSCORES", "LIMIT", 1, -1),
    ("ZRANGEBYSCORE", "z", 1, "inf", "LIMIT", -1, 2, "WITHSCORES"),
    ("ZRANGEBYSCORE", "z", "-inf", "+inf", "limit", 0, 2, "withscores"),
    ("ZRANGEBYSCORE", "z", "x", 1), ("ZRANGEBYSCORE", "z", 1, 2, "LIMIT", 0),
    ("ZRANGEBYSCORE", "z", 1, 2, "LIMIT", "a", 1),
    ("ZRANGEBYSCORE", "z", 1, 2, "WITHSCORES", "WITHSCORES"),
    ("ZRANGEBYSCORE", "z", 1, 2, "LIMIT", 0, 1, "LIMIT", 0, 1), ("ZRANGEBYSCORE", "z", 1),
    ("ZRANGEBYSCORE", "nokey", "-inf", "+inf"), ("ZRANGEBYSCORE", "s", "-inf", "+inf"),
    ("DEL", "nokey"), ("DEL", "nokey", "other"), ("DEL",),
    ("PUBLISH", "ch", "m"), ("PUBLISH", "ch"), ("PUBLISH", "ch", 1.5),
]  # fmt: skip


async def _lane_data(client: fakeredis.FakeAsyncRedis) -> None:
    await client.hset("h", mapping={"a": "1", "b": "2", "empty": ""})
    await client.zadd("z", {"a": 1, "b": 2.5, "c": 3, "big": 1e20, "neg": -0.5})
    await client.sadd("s", "x", "y", "z")
    await client.rpush("l", "a", "b")
    await client.set("str", "v")
    await client.xadd("x:st", {"f": "v"})


def _lua(arg: object) -> str:
    if isinstance(arg, str):
        return "'" + arg + "'"
    return repr(arg)


async def _outcomes(server: fakeredis.FakeServer, how: str) -> list[object]:
    client = fakeredis.FakeAsyncRedis(server=server, decode_responses=True)
    await _lane_data(client)
    out: list[object] = []
    for read in LANE_READS:
        script = f"return redis.{how}({', '.join(map(_lua, read))})"
        try:
            out.append(await client.eval(script, 0))
        except redis.exceptions.ResponseError as e:
            out.append(("error", str(e)))
    out.append(await client.keys("*"))  # the DELs of missing keys deleted nothing
    await client.aclose()
    return out


@pytest.mark.parametrize("how", ["call", "pcall"])
async def test_every_read_of_the_lane_answers_as_fakeredis_does(how: str) -> None:
    adapted, plain = await _outcomes(fake_server(), how), await _outcomes(FakeServer(), how)
    for read, mine, theirs in zip([*LANE_READS, ("KEYS",)], adapted, plain, strict=True):
        assert mine == theirs, read


def test_the_lane_is_there_from_fakeredis_2_40_on() -> None:
    # older releases keep their data model and helpers elsewhere: no lane, every
    # command goes fakeredis's way (as correct, slower); tests.fakeredis_oldest runs 2.38
    release = tuple(int(n) for n in fakeredis.__version__.split(".")[:2])
    assert (_fakelua._READS is not None) == (release >= (2, 40)), fakeredis.__version__


def _through_fakeredis(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The commands scripts send through fakeredis's own `redis.call` path (not a lane)."""
    through: list[bytes] = []
    command = ScriptingCommandsMixin._lua_redis_call

    def counted(
        self: object, runtime: object, expected: object, op: bytes, *args: object
    ) -> object:
        through.append(op)
        return command(self, runtime, expected, op, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(ScriptingCommandsMixin, "_lua_redis_call", counted)
    return through


async def test_the_lane_answers_the_stores_reads_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    lane = _fakelua._READS is not None  # see the test above
    through = _through_fakeredis(monkeypatch)
    client = fakeredis.FakeAsyncRedis(server=fake_server(), decode_responses=True)
    await _lane_data(client)
    script = """
    local r = {redis.call('HGET', 'h', 'a'), redis.call('ZRANGE', 'z', 0, 0, 'WITHSCORES')[2],
               redis.call('ZRANGEBYSCORE', 'z', '-inf', 2, 'LIMIT', 0, 10)[2],
               redis.call('TYPE', 'l')['ok'], redis.call('DEL', 'nokey')}
    redis.call('HSET', 'h', 'a', '2')
    r[#r + 1] = redis.call('HGET', 'h', 'a')
    r[#r + 1] = redis.call('HGET', 'z', 'a')
    return r
    """
    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        await client.eval(script, 0)
    if lane:
        assert through == [b"HGET"]  # the read that is an error (the write took the write lane)
    else:
        reads = [b"HGET", b"ZRANGE", b"ZRANGEBYSCORE", b"TYPE", b"DEL"]
        assert through == [*reads, b"HSET", b"HGET", b"HGET"]
    assert await client.hget("h", "a") == "2"
    await client.aclose()


async def test_a_read_after_a_global_is_set_is_refused_as_fakeredis_does() -> None:
    script = "leaked = 1\nreturn redis.pcall('HGET', 'h', 'a')"
    messages = []
    for server in (fake_server(), FakeServer()):
        client = fakeredis.FakeAsyncRedis(server=server, decode_responses=True)
        await client.hset("h", "a", "1")
        with pytest.raises(redis.exceptions.ResponseError) as caught:
            await client.eval(script, 0)
        messages.append(str(caught.value))
        await client.aclose()
    assert messages[0] == messages[1] and "leaked" in messages[0]


async def test_a_global_set_after_the_watch_was_taken_away_is_still_refused() -> None:
    # the check before a call lists the globals only after one was set (a watch on
    # _G); a script that removes the watch turns that shortcut off, it checks as before
    scripts = (
        "setmetatable(_G, nil)\nreturn redis.call('INCR', 'n')",
        "late = 1\nreturn redis.pcall('HGET', 'h', 'a')",
        "local y = 2\nreturn redis.call('INCR', 'n')",
    )
    outcomes: list[list[str]] = []
    for server in (fake_server(), FakeServer()):
        client = fakeredis.FakeAsyncRedis(server=server, decode_responses=True)
        seen = []
        for script in scripts:
            try:
                seen.append(repr(await client.eval(script, 0)))
            except redis.exceptions.ResponseError as exc:
                seen.append(str(exc))
        outcomes.append(seen)
        await client.aclose()
    assert outcomes[0] == outcomes[1] and "late" in outcomes[0][1]


# -- the write lane: the store's writes, run as fakeredis's own commands do ---------

# Every write command of the lane, in the shapes the store's scripts use and
# shapes next to them (wrong arity, bad numbers, options, wrong types, a
# missing key, emptying a key); each is followed by a read of what it left.
LANE_WRITES: list[tuple[object, ...]] = [
    ("HSET", "h", "a", "9"), ("HSET", "h", "n1", "x", "n2", 2.5), ("HSET", "new", "f", "v"),
    ("HSET", "h", "a"), ("HSET", "z", "a", "1"), ("hset", "h", "c", 1),
    ("HDEL", "h", "a", "none"), ("HDEL", "h2", "only"), ("HDEL", "nokey", "a"), ("HDEL", "h"),
    ("HDEL", "l", "a"),
    ("HINCRBY", "h", "n", 1), ("HINCRBY", "h", "n", -3), ("HINCRBY", "h", "b", "x"),
    ("HINCRBY", "h", "empty", 1), ("HINCRBY", "h", "a", 1.5), ("HINCRBY", "nokey2", "n", 1),
    ("HINCRBY", "h", "n"),
    ("ZADD", "z", 7, "a"), ("ZADD", "z", "1.5", "new", 2, "other"), ("ZADD", "znew", 1, "m"),
    ("ZADD", "z", "x", "a"), ("ZADD", "z", "NX", 1, "a"), ("ZADD", "z", "XX", "CH", 5, "b"),
    ("ZADD", "z", "INCR", 1, "b"), ("ZADD", "z", 1), ("ZADD", "h", 1, "a"),
    ("ZADD", "z", "nan", "a"), ("ZADD", "z", "inf", "top"),
    ("ZREM", "z", "a", "none"), ("ZREM", "z1", "only"), ("ZREM", "nokey", "a"), ("ZREM", "z"),
    ("ZREM", "s", "x"),
    ("XADD", "x:st", "*", "f", "v"), ("XADD", "x:st", "MAXLEN", "~", 10, "*", "f", "v"),
    ("XADD", "x:new", "5-1", "f", "v"), ("XADD", "x:new", "5-1", "f", "v"), ("XADD", "x:st"),
    ("XADD", "h", "*", "f", "v"), ("XADD", "x:st", "*", "f"),
    ("XTRIM", "x:st", "MAXLEN", "~", 1), ("XTRIM", "x:st", "MAXLEN", 1),
    ("XTRIM", "nokey", "MAXLEN", 1),
    ("XTRIM", "x:st", "BAD", 1), ("XTRIM", "h", "MAXLEN", 1),
    ("XTRIM", "x:st", "MINID", "5-0"), ("XTRIM", "x:new", "MINID", "5-2"),
    ("LPUSH", "l", "c"), ("LPUSH", "lnew", "1", 2), ("LPUSH", "l"), ("LPUSH", "h", "a"),
    ("RPUSH", "l", "d", "e"), ("RPUSH", "z", "a"),
    ("LTRIM", "l", 0, 1), ("LTRIM", "l", 5, 10), ("LTRIM", "lnew", 0, "x"),
    ("LTRIM", "nokey", 0, 1),
    ("LTRIM", "h", 0, 1), ("LTRIM", "l", 0),
    ("LPOP", "l2"), ("LPOP", "l2", 5), ("LPOP", "nokey"), ("LPOP", "h"),
    ("SADD", "s", "x", "w"), ("SADD", "snew", 1), ("SADD", "s"), ("SADD", "h", "a"),
    ("INCR", "cnt"), ("INCR", "cnt"), ("INCR", "str"), ("INCR", "h"), ("INCR", "cnt", "x"),
    ("DEL", "h2", "nokey"), ("DEL", "snew", "snew"), ("UNLINK", "lnew", "znew"), ("UNLINK",),
    ("HSET", "ttl", "b", "2"), ("HDEL", "ttl", "a"), ("HDEL", "ttl", "b"),
]  # fmt: skip


async def _write_data(client: fakeredis.FakeAsyncRedis) -> None:
    await _lane_data(client)
    await client.hset("h2", "only", "1")
    await client.zadd("z1", {"only": 1})
    await client.rpush("l2", "a", "b", "c")
    await client.hset("ttl", mapping={"a": "1"})
    await client.expire("ttl", 1000)


async def _write_outcomes(server: fakeredis.FakeServer, how: str) -> list[object]:
    client = fakeredis.FakeAsyncRedis(server=server, decode_responses=True)
    await _write_data(client)
    out: list[object] = []
    for write in LANE_WRITES:
        key = str(write[1]) if len(write) > 1 else ""
        script = f"""
        local r = redis.{how}({", ".join(map(_lua, write))})
        local t = redis.call('TYPE', KEYS[1])['ok']
        return {{r, t}}
        """
        try:
            reply = await client.eval(script, 1, key)
        except redis.exceptions.ResponseError as e:
            reply = ("error", str(e))
        except Exception as e:  # fakeredis 2.38 fails some shapes itself (a bug of its own)
            reply = ("fakeredis failed", type(e).__name__)
        out.append((reply, await _state(client, key)))
    out.append(sorted(await client.keys("*")))
    await client.aclose()
    return out


async def _state(client: fakeredis.FakeAsyncRedis, key: str) -> object:
    kind = await client.type(key)
    ttl = await client.ttl(key)
    if kind == "hash":
        return kind, ttl, await client.hgetall(key)
    if kind == "zset":
        return kind, ttl, await client.zrange(key, 0, -1, withscores=True)
    if kind == "list":
        return kind, ttl, await client.lrange(key, 0, -1)
    if kind == "set":
        return kind, ttl, sorted(await client.smembers(key))
    if kind == "stream":
        return kind, ttl, await client.xlen(key)
    if kind == "string":
        return kind, ttl, await client.get(key)
    return kind, ttl


@pytest.mark.parametrize("how", ["call", "pcall"])
async def test_every_write_of_the_lane_does_as_fakeredis_does(how: str) -> None:
    adapted = await _write_outcomes(fake_server(), how)
    plain = await _write_outcomes(FakeServer(), how)
    for write, mine, theirs in zip([*LANE_WRITES, ("KEYS",)], adapted, plain, strict=True):
        assert _plain(mine) == _plain(theirs), write


def _plain(value: object) -> object:
    """`value` comparable across servers: errors by message, an XADD's generated
    id (``ms-seq``, from the clock) as ``<id>``."""
    if isinstance(value, BaseException):
        return ("error", str(value))
    if isinstance(value, str) and re.fullmatch(r"1\d{12}-\d+", value):
        return "<id>"
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


async def test_the_write_lane_runs_the_stores_writes_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    through = _through_fakeredis(monkeypatch)
    client = fakeredis.FakeAsyncRedis(server=fake_server(), decode_responses=True)
    script = """
    redis.call('HSET', 'h', 'a', '1')
    redis.call('ZADD', 'z', 1, 'a')
    redis.call('XADD', 'x', '*', 'f', 'v')
    redis.call('LPUSH', 'l', '1')
    redis.call('LTRIM', 'l', 0, 1023)
    redis.call('DEL', 'l')
    return redis.pcall('HSET', 'z', 'a', '1')['err']
    """
    assert "WRONGTYPE" in await client.eval(script, 0)
    if _fakelua._WRITES is not None:
        assert through == [b"HSET"]  # the one of the wrong type
    else:  # fakeredis before 2.40 (see above): every write the usual way
        assert through == [b"HSET", b"ZADD", b"XADD", b"LPUSH", b"LTRIM", b"DEL", b"HSET"]
    assert await client.hget("h", "a") == "1" and await client.xlen("x") == 1
    assert not await client.exists("l")
    await client.aclose()


@pytest.mark.parametrize("server", ["adapted", "plain"], indirect=True)
async def test_a_write_in_a_script_breaks_a_watch_as_fakeredis_does(
    server: fakeredis.FakeServer,
) -> None:
    client = fakeredis.FakeAsyncRedis(server=server, decode_responses=True)
    await client.hset("h", "a", "1")
    await _exec_fails_after(
        client, "h", "return redis.call('HSET', KEYS[1], 'a', '2')", ("HSET", "h", "a", "3")
    )
    assert await client.hget("h", "a") == "2"
    await client.aclose()


async def _exec_fails_after(
    client: fakeredis.FakeAsyncRedis, key: str, script: str, queued: tuple[str, ...]
) -> None:
    """WATCH `key`, run `script` on it (an error reply is let go), queue `queued`
    in a MULTI: its EXEC fails with a WatchError."""
    async with client.pipeline() as pipe:
        await pipe.watch(key)
        with contextlib.suppress(redis.exceptions.ResponseError):
            await client.eval(script, 1, key)
        pipe.multi()  # type: ignore[no-untyped-call]
        pipe.execute_command(*queued)
        with pytest.raises(redis.exceptions.WatchError):
            await pipe.execute()


# -- a script's notifications come at its end ------------------------------------


@pytest.mark.parametrize("server", ["adapted", "plain"], indirect=True)
async def test_a_client_blocked_on_a_list_gets_what_a_script_pushed(
    server: fakeredis.FakeServer,
) -> None:
    waiting = fakeredis.FakeAsyncRedis(server=server, decode_responses=True)
    client = fakeredis.FakeAsyncRedis(server=server, decode_responses=True)
    popped = asyncio.ensure_future(waiting.blpop(["l"], timeout=5))
    await asyncio.sleep(0.01)  # it is blocked
    script = """
    redis.call('LPUSH', KEYS[1], 'a')
    redis.call('HSET', KEYS[2], 'f', 'v')
    redis.call('XADD', KEYS[3], '*', 'f', 'v')
    return 1
    """
    assert await client.eval(script, 3, "l", "h", "x") == 1
    assert list(await asyncio.wait_for(popped, 2)) == ["l", "a"]  # type: ignore[arg-type]
    await waiting.aclose()
    await client.aclose()


@pytest.mark.parametrize("server", ["adapted", "plain"], indirect=True)
@pytest.mark.parametrize("write", ["XADD", "ZADD", "fails"])
async def test_each_write_of_a_script_breaks_a_watch_even_when_it_fails(
    server: fakeredis.FakeServer, write: str
) -> None:
    client = fakeredis.FakeAsyncRedis(server=server, decode_responses=True)
    script = {
        "XADD": "return redis.call('XADD', KEYS[1], '*', 'f', 'v')",
        "ZADD": "return redis.call('ZADD', KEYS[1], 1, 'm')",
        # the script writes the watched key, then fails: the write stays, and counts
        "fails": "redis.call('XADD', KEYS[1], '*', 'f', 'v') return redis.call('INCR', KEYS[1])",
    }[write]
    await _exec_fails_after(client, "k", script, ("SET", "other", "1"))
    assert await client.exists("k") and not await client.exists("other")
    await client.aclose()


# -- memory:// commands as fields, not RESP ---------------------------------------


async def test_a_memory_stores_script_calls_reach_its_server_without_resp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    try:
        from fakeredis._socket import AsyncFakeSocket
    except ImportError:  # fakeredis before 2.40
        from fakeredis.aioredis import AsyncFakeSocket

    parsed: list[bytes] = []
    sendall = AsyncFakeSocket.sendall

    def counted(self: AsyncFakeSocket, data: bytes) -> None:
        parsed.append(data)
        sendall(self, data)

    monkeypatch.setattr(AsyncFakeSocket, "sendall", counted)
    store = open_store("memory://")
    assert store.client.connection_pool.connection_kwargs["socket_timeout"] is None
    assert await store.record("r1", 1, "s#1", "{}", now=1.0) is False  # no such run
    before = len(parsed)
    assert await store.record("r1", 1, "s#1", "{}", now=1.0) is False  # one script call
    assert len(parsed) == before if DIRECT else len(parsed) > before
    await store.close()


@pytest.mark.skipif(not DIRECT, reason="this fakeredis takes RESP only")
async def test_a_command_the_fields_path_does_not_take_goes_through_resp_the_same() -> None:
    client = fakeredis.FakeAsyncRedis(
        server=fake_server(),
        decode_responses=True,
        connection_class=MemoryConnection,
    )
    plain = fakeredis.FakeAsyncRedis(server=FakeServer(), decode_responses=True)
    conn = await client.connection_pool.get_connection()  # type: ignore[no-untyped-call]
    other = await plain.connection_pool.get_connection()  # type: ignore[no-untyped-call]
    for args in [
        ("SET", "k", 1.5),
        ("GET", "k"),
        ("SET", "t", "é"),
        ("GET", "t"),
        ("SET", "b", True),
        ("CONFIG GET", "maxmemory"),
        ("EVAL", "return ARGV[1]", 0, 2.25),
        ("INCR", "t"),
    ]:
        seen = []
        for c in (conn, other):
            try:
                packed = MemoryConnection.pack_fields(conn, args)
                if c is other:
                    packed = c.pack_command(*args)
                await c.send_packed_command(packed, False)
                seen.append(await c.read_response())
            except Exception as exc:  # redis-py's or the server's error, worded alike
                seen.append((type(exc).__name__, str(exc)))
        assert seen[0] == seen[1], args
    await client.connection_pool.release(conn)
    await plain.connection_pool.release(other)
    await client.aclose()
    await plain.aclose()


@pytest.mark.skipif(not DIRECT, reason="this fakeredis takes RESP only")
async def test_a_memory_store_whose_server_is_down_fails_as_before() -> None:
    server = fake_server()
    store = _fakelua.memory_store(server)
    assert await store.record("r1", 1, "s#1", "{}", now=1.0) is False
    server.connected = False
    with pytest.raises(redis.exceptions.ConnectionError):
        await store.record("r1", 1, "s#1", "{}", now=1.0)
    server.connected = True
    assert await store.record("r1", 1, "s#1", "{}", now=1.0) is False
    await store.close()
