"""The store's command packer sends exactly what redis-py's would (oldest and newest)."""

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

from stores._redispy import _packed, _Unusual, pack
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


def test_the_lane_packs_with_the_connections_encoding_and_falls_back_to_redis_py() -> None:
    conn = Connection(encoding="latin-1")
    assert _packed(conn, ("SET", "k", "é")) == [b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n\xe9\r\n"]
    utf8 = Connection()
    assert b"".join(_packed(utf8, ("CONFIG GET", "maxmemory"))) == redis_py(
        ("CONFIG GET", "maxmemory")
    )
    with pytest.raises(DataError, match="bool"):
        _packed(utf8, ("SET", "k", True))


@pytest.mark.parametrize(
    "url", ["redis://127.0.0.1:6379/0", "rediss://127.0.0.1:6379/0", "unix:///tmp/redis.sock"]
)
async def test_the_stores_pools_keep_redis_pys_own_connection_classes(url: str) -> None:
    store = RedisStore.from_url(url)
    try:
        for client in (store.client, store.blocking_client):
            cls = client.connection_pool.connection_class
            assert cls in (Connection, SSLConnection, UnixDomainSocketConnection)
    finally:
        await store.close()


async def test_values_round_trip_through_real_redis(real_store: RedisStore) -> None:
    r = real_store.client
    key = real_store.keys.prefix + ":resp"
    values = {"empty": "", "unicode": "värde ✓ 🚀", "crlf": "a\r\nb", "big": "x" * 100_000}
    await r.hset(key, mapping=values)  # type: ignore[arg-type]
    try:
        assert await r.hgetall(key) == values
        assert await r.hincrbyfloat(key, "n", 0.1) == pytest.approx(0.1)
        assert await r.hincrby(key, "i", 2**40) == 2**40
    finally:
        await r.delete(key)
