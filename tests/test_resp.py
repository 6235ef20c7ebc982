"""The store's command packer sends exactly what redis-py's would."""

from __future__ import annotations

import enum
from typing import Any

import pytest
from redis.asyncio.connection import (
    Connection,
    SSLConnection,
    UnixDomainSocketConnection,
)
from redis.exceptions import DataError

from stores._resp import _Unusual, fast_packing, pack
from stores.redis import RedisStore


class Color(enum.IntEnum):
    RED = 1


COMMANDS: list[tuple[Any, ...]] = [
    ("PING",),
    ("EVALSHA", "a" * 40, 2, "sf:{p0}:run:r-1", "sf:{p0}:j:r-1", "sf:{p0}:", "r-1", "3"),
    ("HSET", "k", "f", ""),  # empty value
    ("SET", "ключ", "värde ✓ 🚀"),  # multi-byte UTF-8: lengths are byte lengths
    ("SET", b"raw\x00\xffbytes", b""),
    ("ZADD", "z", 1.5, "m", 0.1, "n", 1e300, "o", -0.0, "p"),
    ("INCRBY", "n", -42),
    ("INCRBY", "n", 2**70),
    ("SET", "big", "x" * 100_000),  # above redis-py's buffer cutoff (it chunks)
    ("SET", "crlf", "a\r\nb"),
]


def redis_py(args: tuple[Any, ...]) -> bytes:
    return b"".join(Connection().pack_command(*args))


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: str(a[0]) + str(len(a)))
def test_pack_is_byte_for_byte_redis_py(args: tuple[Any, ...]) -> None:
    assert pack(args) == redis_py(args)


@pytest.mark.parametrize(
    "args",
    [
        ("CONFIG GET", "maxmemory"),  # redis-py splits a spaced command name
        (b"MEMORY USAGE", "k"),
        ("SET", "k", memoryview(b"v")),
        ("SET", "k", bytearray(b"v")),
        ("SET", "k", Color.RED),  # an int subclass
        ("SET", "k", True),  # redis-py refuses bool
        ("SET", "k", None),
    ],
    ids=["spaced-str", "spaced-bytes", "memoryview", "bytearray", "intenum", "bool", "none"],
)
def test_what_pack_leaves_to_redis_py(args: tuple[Any, ...]) -> None:
    with pytest.raises(_Unusual):
        pack(args)


def test_the_connection_falls_back_to_redis_py() -> None:
    pool = RedisStore.from_url("redis://127.0.0.1:1").client.connection_pool
    assert fast_packing(pool).connection_class is pool.connection_class  # idempotent
    conn = pool.make_connection()
    assert b"".join(conn.pack_command("CONFIG GET", "maxmemory")) == redis_py(
        ("CONFIG GET", "maxmemory")
    )
    with pytest.raises(DataError, match="bool"):
        conn.pack_command("SET", "k", True)
    assert conn.pack_command("SET", "k", "v") == [redis_py(("SET", "k", "v"))]


def test_the_encoding_of_the_pool_is_kept() -> None:
    pool = fast_packing(
        RedisStore.from_url("redis://127.0.0.1:1").client.connection_pool.__class__(
            encoding="latin-1"
        )
    )
    conn = pool.make_connection()
    assert conn.pack_command("SET", "k", "é") == [b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n\xe9\r\n"]


@pytest.mark.parametrize(
    ("url", "base"),
    [
        ("redis://127.0.0.1:6379/0", Connection),
        ("rediss://127.0.0.1:6379/0", SSLConnection),
        ("unix:///tmp/redis.sock", UnixDomainSocketConnection),
    ],
)
async def test_every_pool_of_the_store_packs_fast(url: str, base: type) -> None:
    store = RedisStore.from_url(url)
    try:
        for client in (store.client, store.blocking_client):
            cls = client.connection_pool.connection_class
            assert issubclass(cls, base) and cls.__name__ == f"FastPacking{base.__name__}"
    finally:
        await store.close()


async def test_values_round_trip_through_real_redis(real_store: RedisStore) -> None:
    r = real_store.client
    key = real_store.keys.prefix + ":resp"
    values = {"empty": "", "unicode": "värde ✓ 🚀", "crlf": "a\r\nb", "big": "x" * 100_000}
    await r.hset(key, mapping=values)
    try:
        assert await r.hgetall(key) == values
        assert await r.hincrbyfloat(key, "n", 0.1) == pytest.approx(0.1)
        assert await r.hincrby(key, "i", 2**40) == 2**40
    finally:
        await r.delete(key)
