"""The store's script lane: replies, errors, NOSCRIPT, limits, cancellation, reconnection.

All on a redis-server owned by the test (SCRIPT FLUSH and CLIENT KILL would
disturb other tests on the shared one).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from stores._lane import Lane, Script
from stores.redis import RedisStore
from tests.conftest import PrivateRedis

ECHO = Script("return ARGV[1]")
KEYS_AND_ARGS = Script("return {KEYS[1], ARGV[1], ARGV[2]}")
# Busy for ~`ARGV[1]` ms of server time (scripts cannot sleep), then returns ARGV[2].
SLOW = Script(
    "local t = redis.call('TIME'); local until_us = t[1] * 1e6 + t[2] + ARGV[1] * 1000\n"
    "repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] >= until_us\n"
    "return ARGV[2]"
)
FAILS = Script("return redis.error_reply('ERR refused by the script')")


@pytest_asyncio.fixture(name="admin")
async def admin_fixture(private_redis: PrivateRedis) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    yield client
    await client.aclose()


def lane_on(url: str, size: int, retries: int = 3) -> Lane:
    pool = aioredis.ConnectionPool.from_url(
        url, decode_responses=True, retry=Retry(NoBackoff(), retries)
    )
    return Lane(pool, size)


async def test_a_call_returns_the_script_reply(private_redis: PrivateRedis) -> None:
    lane = lane_on(private_redis.url, 2)
    try:
        assert await lane.run(ECHO, [], ["värde ✓"]) == "värde ✓"
        assert await lane.run(KEYS_AND_ARGS, ["k"], ["a", ""]) == ["k", "a", ""]
    finally:
        await lane.close()


async def test_a_script_error_is_raised_and_the_connection_stays_usable(
    private_redis: PrivateRedis,
) -> None:
    lane = lane_on(private_redis.url, 1)
    try:
        with pytest.raises(ResponseError, match="refused by the script"):
            await lane.run(FAILS, [], [])
        assert await lane.run(ECHO, [], ["next"]) == "next"
        assert lane.connections == 1
    finally:
        await lane.close()


async def test_a_flushed_script_is_loaded_again(
    private_redis: PrivateRedis, admin: aioredis.Redis
) -> None:
    lane = lane_on(private_redis.url, 1)
    try:
        assert await lane.run(ECHO, [], ["one"]) == "one"
        await admin.script_flush()
        assert await lane.run(ECHO, [], ["two"]) == "two"
        assert await admin.script_exists(ECHO.sha) == [True]
    finally:
        await lane.close()


async def test_more_calls_than_connections_wait_their_turn(private_redis: PrivateRedis) -> None:
    lane = lane_on(private_redis.url, 2)
    try:
        replies = await asyncio.gather(*(lane.run(SLOW, [], ["2", str(i)]) for i in range(12)))
        assert replies == [str(i) for i in range(12)]
        assert lane.connections == 2
    finally:
        await lane.close()


async def test_a_call_cancelled_before_its_reply_leaves_no_stale_reply_behind(
    private_redis: PrivateRedis,
) -> None:
    lane = lane_on(private_redis.url, 1)
    try:
        slow = asyncio.create_task(lane.run(SLOW, [], ["200", "stale"]))
        await asyncio.sleep(0.05)  # sent, the server busy with it
        slow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await slow
        # the one connection was closed rather than reused with "stale" unread
        assert await lane.run(ECHO, [], ["fresh"]) == "fresh"
        assert lane.connections == 1
    finally:
        await lane.close()


async def test_a_call_cancelled_while_waiting_for_a_connection_takes_none(
    private_redis: PrivateRedis,
) -> None:
    lane = lane_on(private_redis.url, 1)
    try:
        busy = asyncio.create_task(lane.run(SLOW, [], ["100", "busy"]))
        await asyncio.sleep(0.02)
        waiting = asyncio.create_task(lane.run(ECHO, [], ["never"]))
        await asyncio.sleep(0.02)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert await busy == "busy"
        assert await lane.run(ECHO, [], ["after"]) == "after"
        assert lane.connections == 1
    finally:
        await lane.close()


async def test_a_killed_connection_is_reconnected_by_the_retry(
    private_redis: PrivateRedis, admin: aioredis.Redis
) -> None:
    lane = lane_on(private_redis.url, 1)
    try:
        assert await lane.run(ECHO, [], ["before"]) == "before"
        killed = await admin.client_kill_filter(_type="normal", skipme=True)
        assert killed >= 1
        assert await lane.run(ECHO, [], ["after"]) == "after"
    finally:
        await lane.close()


async def test_a_server_that_stays_away_fails_the_call_after_the_retries(
    private_redis: PrivateRedis,
) -> None:
    lane = lane_on(private_redis.url, 1, retries=2)
    try:
        assert await lane.run(ECHO, [], ["up"]) == "up"
        private_redis.stop(kill=True)
        with pytest.raises(RedisConnectionError):
            await lane.run(ECHO, [], ["down"])
    finally:
        await lane.close()


async def test_the_store_sends_its_scripts_by_the_lane(private_redis: PrivateRedis) -> None:
    store = RedisStore.from_url(private_redis.url, prefix="lane")
    try:
        result = await store.tick(0.0, 3, "{}")
        assert (result.fired, result.recovered) == (0, 0)
        assert store._lane.connections == 1
    finally:
        await store.close()
    assert store._lane.connections == 0


def test_a_lane_needs_a_connection() -> None:
    with pytest.raises(ValueError, match="at least one connection"):
        Lane(aioredis.ConnectionPool(), 0)
