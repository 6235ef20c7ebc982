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

from stores import open_store
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
