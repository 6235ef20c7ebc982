"""`stores._fakelua`: memory:// servers compile each script once, and Lua means the same.

Each behaviour is checked on a plain fakeredis server too, so the adapted one
is held to what fakeredis itself does. `python -m tests.fakeredis_oldest`
runs this file on the oldest fakeredis the project supports.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

import fakeredis
import pytest
import redis.exceptions
from fakeredis import FakeServer
from fakeredis.commands_mixins.scripting_mixin import ScriptingCommandsMixin

from stores import _fakelua, open_store
from stores._fakelua import compiles_once, fake_server, preload

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
    # the global stays in the server's Lua state: every later redis.call is refused too
    with pytest.raises(redis.exceptions.ResponseError, match=r"global.*leaked"):
        await client.eval("return redis.call('GET', 'k')", 0)


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
    assert compiles_once()  # else memory:// still works, only slower: see stores._fakelua


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
    cache = server.script_cache  # type: ignore[attr-defined]
    assert cache == {hashlib.sha1(b"return 1").hexdigest().encode(): b"return 1"}


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
    ("ZRANGE", "z", "01", 2), ("ZRANGE", "nokey", 0, 0, "WITHSCORES"), ("ZRANGE", "h", 0, 0),
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


async def test_the_lane_answers_the_stores_reads_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    lane = _fakelua._READS is not None  # see the test above
    through: list[bytes] = []
    command = ScriptingCommandsMixin._lua_redis_call

    def counted(
        self: object, runtime: object, expected: object, op: bytes, *args: object
    ) -> object:
        through.append(op)
        return command(self, runtime, expected, op, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(ScriptingCommandsMixin, "_lua_redis_call", counted)
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
        assert through == [b"HSET", b"HGET"]  # a write, and the read that is an error
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
