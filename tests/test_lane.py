"""The store's script lane: replies, errors, NOSCRIPT, limits, cancellation, reconnection,
and the pool-wide operations of redis-py that must reach the connections it holds.

All on a redis-server owned by the test (SCRIPT FLUSH and CLIENT KILL would
disturb other tests on the shared one). `.ci/run` also runs this module
against the oldest redis-py the project supports.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from typing import Any

import pytest
import pytest_asyncio
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from stores._redispy import Lane, RedisPyScripts, script_runner
from stores.redis import RedisStore
from tests.conftest import PrivateRedis

ECHO = "return ARGV[1]"
KEYS_AND_ARGS = "return {KEYS[1], ARGV[1], ARGV[2]}"
# Busy for ~`ARGV[1]` ms of server time (scripts cannot sleep), then returns ARGV[2].
SLOW = (
    "local t = redis.call('TIME'); local until_us = t[1] * 1e6 + t[2] + ARGV[1] * 1000\n"
    "repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] >= until_us\n"
    "return ARGV[2]"
)
FAILS = "return redis.error_reply('ERR refused by the script')"


def announcing(sent: asyncio.Event) -> type[aioredis.Connection]:
    """A connection class that sets `sent` once a command is on the wire: what
    a test waits for before it cancels a call, rather than for some time."""

    class Announcing(aioredis.Connection):
        async def send_packed_command(
            self, command: bytes | str | Iterable[bytes], check_health: bool = True
        ) -> None:
            await super().send_packed_command(command, check_health)
            sent.set()

    return Announcing


@contextlib.asynccontextmanager
async def writes_paused(admin: aioredis.Redis) -> AsyncIterator[None]:
    """The server holds back every script call (``CLIENT PAUSE ... WRITE``) until
    the block ends: a call that is on the wire gets no reply in it, however slow
    the machine. `admin`'s own commands still run."""
    await admin.client_pause(60_000, all=False)
    try:
        yield
    finally:
        await admin.client_unpause()


class Kit:
    """A lane on a pool of its own, and a client on that pool for redis-py's script objects.

    `sent` is set whenever a connection of the pool has written a command."""

    def __init__(self, url: str, size: int, retries: int = 3) -> None:
        self.sent = asyncio.Event()
        self.pool = aioredis.ConnectionPool.from_url(
            url, decode_responses=True, retry=Retry(NoBackoff(), retries),
            connection_class=announcing(self.sent),
        )  # fmt: skip
        self.client = aioredis.Redis(connection_pool=self.pool)
        self.lane = Lane(self.pool, size)

    async def run(self, source: str, keys: list[str], args: list[Any]) -> Any:
        return await self.lane.run(self.client.register_script(source), keys, args)

    async def ready(self, source: str) -> None:
        """A first call of `source`: the lane holds a connection (made, handshaken)
        and the server has the script, so `sent` after `start` means the call."""
        await self.run(source, [], ["first"])

    def start(self, source: str, args: list[Any]) -> asyncio.Task[Any]:
        """A call of `source` in a task of its own; `sent` is set once it is on the wire."""
        self.sent.clear()
        return asyncio.create_task(self.run(source, [], args))

    async def close(self) -> None:
        await self.lane.close()
        await self.pool.aclose()


@pytest_asyncio.fixture(name="admin")
async def admin_fixture(private_redis: PrivateRedis) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    yield client
    await client.aclose()


@pytest_asyncio.fixture(name="kit")
async def kit_fixture(private_redis: PrivateRedis) -> AsyncIterator[Kit]:
    kit = Kit(private_redis.url, 1)
    yield kit
    await kit.close()


async def test_a_call_returns_the_script_reply(private_redis: PrivateRedis) -> None:
    kit = Kit(private_redis.url, 2)
    try:
        assert await kit.run(ECHO, [], ["värde ✓"]) == "värde ✓"
        assert await kit.run(KEYS_AND_ARGS, ["k"], ["a", ""]) == ["k", "a", ""]
        assert await kit.run(KEYS_AND_ARGS, ["k"], [7, 1.5]) == ["k", "7", "1.5"]
    finally:
        await kit.close()


async def test_a_script_error_is_raised_and_the_connection_stays_usable(kit: Kit) -> None:
    with pytest.raises(ResponseError, match="refused by the script"):
        await kit.run(FAILS, [], [])
    assert await kit.run(ECHO, [], ["next"]) == "next"
    assert kit.lane.connections == 1


async def test_a_flushed_script_is_loaded_again(kit: Kit, admin: aioredis.Redis) -> None:
    script = kit.client.register_script(ECHO)
    assert await kit.lane.run(script, [], ["one"]) == "one"
    await admin.script_flush()
    assert await kit.lane.run(script, [], ["two"]) == "two"
    assert await admin.script_exists(script.sha) == [True]
    assert await kit.lane.run(script, [], ["three"]) == "three"
    assert kit.lane.connections == 1


async def test_more_calls_than_connections_wait_their_turn(private_redis: PrivateRedis) -> None:
    kit = Kit(private_redis.url, 2)
    try:
        replies = await asyncio.gather(*(kit.run(SLOW, [], ["2", str(i)]) for i in range(12)))
        assert replies == [str(i) for i in range(12)]
        assert kit.lane.connections == 2
    finally:
        await kit.close()


async def test_a_call_cancelled_before_its_reply_leaves_no_stale_reply_behind(
    kit: Kit, admin: aioredis.Redis
) -> None:
    await kit.ready(ECHO)
    async with writes_paused(admin):
        call = kit.start(ECHO, ["stale"])
        await kit.sent.wait()  # on the wire; its reply comes once the pause ends
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    # the one connection was closed rather than reused with "stale" unread
    assert await kit.run(ECHO, [], ["fresh"]) == "fresh"
    assert kit.lane.connections == 1


async def test_a_call_cancelled_while_waiting_for_a_connection_takes_none(
    kit: Kit, admin: aioredis.Redis
) -> None:
    await kit.ready(ECHO)
    async with writes_paused(admin):
        busy = kit.start(ECHO, ["busy"])
        await kit.sent.wait()  # the lane's one connection is out until the pause ends
        waiting = asyncio.create_task(kit.run(ECHO, [], ["never"]))
        await waiting_for_a_connection(kit.lane)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
    assert await busy == "busy"
    assert await kit.run(ECHO, [], ["after"]) == "after"
    assert kit.lane.connections == 1


async def waiting_for_a_connection(lane: Lane) -> None:
    """Returns once a call (or a batch) of `lane` waits for a connection: a few
    turns of the event loop, no I/O."""
    for _ in range(100):
        if lane._waiters:
            return
        await asyncio.sleep(0)
    pytest.fail("no call of the lane waits for a connection")


async def test_a_killed_connection_is_reconnected_by_the_retry(
    kit: Kit, admin: aioredis.Redis
) -> None:
    assert await kit.run(ECHO, [], ["before"]) == "before"
    killed = await admin.client_kill_filter(_type="normal", skipme=True)
    assert killed >= 1
    assert await kit.run(ECHO, [], ["after"]) == "after"


async def test_a_server_that_stays_away_fails_the_call_after_the_retries(
    private_redis: PrivateRedis,
) -> None:
    kit = Kit(private_redis.url, 1, retries=2)
    try:
        assert await kit.run(ECHO, [], ["up"]) == "up"
        private_redis.stop(kill=True)
        with pytest.raises(RedisConnectionError):
            await kit.run(ECHO, [], ["down"])
    finally:
        await kit.close()


# -- the pool owns the lane's connections ----------------------------------------


async def test_the_lane_takes_its_connections_from_the_pool_and_gives_them_back(
    kit: Kit,
) -> None:
    await kit.run(ECHO, [], ["x"])
    (conn,) = kit.lane._made
    assert conn in kit.pool._in_use_connections  # checked out while the lane holds it
    await kit.lane.close()
    assert kit.lane.connections == 0
    assert conn in kit.pool._available_connections and conn.is_connected


async def test_a_call_in_flight_when_the_lane_closes_gives_its_connection_to_the_pool(
    kit: Kit, admin: aioredis.Redis
) -> None:
    await kit.ready(ECHO)
    async with writes_paused(admin):
        call = kit.start(ECHO, ["late"])
        await kit.sent.wait()  # the call has its connection and waits for the reply
        (conn,) = kit.lane._made
        await kit.lane.close()  # while the call is out
    assert await call == "late"
    assert conn not in kit.pool._in_use_connections  # not left checked out (and leaked)
    assert conn in kit.pool._available_connections


async def test_disconnecting_the_pool_reaches_the_lane(kit: Kit, admin: aioredis.Redis) -> None:
    await kit.run(ECHO, [], ["x"])
    (conn,) = kit.lane._made
    await kit.pool.disconnect()
    assert not conn.is_connected
    assert await _clients(admin) == 0
    assert await kit.run(ECHO, [], ["reconnected"]) == "reconnected"
    assert kit.lane._made == {conn} and conn.is_connected


async def test_a_retry_set_on_the_pool_reaches_the_lane(kit: Kit) -> None:
    await kit.run(ECHO, [], ["x"])
    retry = Retry(NoBackoff(), 7)
    kit.client.set_retry(retry)
    (conn,) = kit.lane._made
    assert conn.retry is retry


async def test_a_lane_connection_is_health_checked_when_its_interval_has_passed(
    private_redis: PrivateRedis,
) -> None:
    pool = aioredis.ConnectionPool.from_url(
        private_redis.url, decode_responses=True, health_check_interval=60
    )
    client = aioredis.Redis(connection_pool=pool)
    lane = Lane(pool, 1)
    pings: list[bool] = []
    try:
        script = client.register_script(ECHO)
        assert await lane.run(script, [], ["first"]) == "first"
        (conn,) = lane._made
        send = conn._send_ping

        async def counted() -> None:
            pings.append(True)
            await send()  # type: ignore[no-untyped-call]

        conn._send_ping = counted  # type: ignore[method-assign]
        assert await lane.run(script, [], ["soon after"]) == "soon after"
        assert pings == []  # not due: no PING before the call
        # the interval has passed since its last reply (as a minute would do)
        conn.next_health_check = asyncio.get_running_loop().time() - 1
        assert await lane.run(script, [], ["later"]) == "later"
        assert pings == [True]  # due: redis-py's check ran first, as through the pool
    finally:
        await lane.close()
        await pool.aclose()


async def test_a_connection_marked_for_reconnection_reconnects_after_its_call(kit: Kit) -> None:
    await kit.run(ECHO, [], ["x"])
    (conn,) = kit.lane._made
    if not hasattr(conn, "mark_for_reconnect"):
        pytest.skip("this redis-py has no reconnection marks (added in 7.x)")
    await kit.pool.update_active_connections_for_reconnect()  # type: ignore[no-untyped-call]
    assert await kit.run(ECHO, [], ["marked"]) == "marked"
    assert not conn.is_connected  # closed once its call was answered, as release() would
    assert await kit.run(ECHO, [], ["again"]) == "again"
    assert conn.is_connected


async def test_new_credentials_reach_the_lane_connections(kit: Kit, admin: aioredis.Redis) -> None:
    from redis.auth.token import SimpleToken

    await admin.acl_setuser("bob", enabled=True, passwords=["+pw2"], keys="*",
                            commands=["+@all"])  # fmt: skip
    await kit.run(
        ECHO, [], ["x"]
    )  # NOSCRIPT: loaded through the client, on a connection of its own
    await kit.pool.disconnect(inuse_connections=False)  # leaves the lane's
    assert await _clients(admin, "default") == 1
    token = SimpleToken("pw2", -1, -1, {"oid": "bob"})
    await kit.pool.re_auth_callback(token)  # what a credential provider's refresh does
    await kit.run(ECHO, [], ["applied after this call"])
    assert await _clients(admin, "default") == 0  # the lane's connection is bob's now

    assert await kit.run(ECHO, [], ["as bob"]) == "as bob"


async def test_a_non_blocking_pool_at_its_limit_makes_calls_wait_for_the_lane(
    private_redis: PrivateRedis,
) -> None:
    pool = aioredis.ConnectionPool.from_url(private_redis.url, decode_responses=True,
                                            max_connections=2)  # fmt: skip
    client = aioredis.Redis(connection_pool=pool)
    lane = Lane(pool, 2)
    try:
        slow = client.register_script(SLOW)
        await client.script_load(SLOW)  # or its NOSCRIPT reload would need a connection too
        held = await pool.get_connection()  # type: ignore[no-untyped-call]  # the pool is left with room for one
        replies = await asyncio.gather(*(lane.run(slow, [], ["2", str(i)]) for i in range(4)))
        assert replies == ["0", "1", "2", "3"]
        assert lane.connections == 1
        await pool.release(held)
    finally:
        await lane.close()
        await pool.aclose()


async def _clients(admin: aioredis.Redis, user: str | None = None) -> int:
    """How many clients other than `admin` the server has (of `user`, if given)."""
    me = await admin.client_id()
    return sum(1 for c in await admin.client_list()
               if int(c["id"]) != me and (user is None or c["user"] == user))  # fmt: skip


def test_a_lane_needs_a_connection() -> None:
    with pytest.raises(ValueError, match="at least one connection"):
        Lane(aioredis.ConnectionPool(), 0)


# -- which runner a store gets ------------------------------------------------------


async def test_the_store_sends_its_scripts_by_the_lane(private_redis: PrivateRedis) -> None:
    store = RedisStore.from_url(private_redis.url, prefix="lane", max_connections=8)
    try:
        assert isinstance(store._runner, Lane) and store._runner._size == 8
        assert store.client.connection_pool.max_connections == 16
        result = await store.tick(0.0, 3, "{}")
        assert (result.fired, result.recovered) == (0, 0)
        assert store._runner.connections == 1
    finally:
        await store.close()
    assert store._runner.connections == 0


async def test_clients_the_lane_does_not_support_get_redis_pys_script_path(
    private_redis: PrivateRedis,
) -> None:
    single = aioredis.Redis.from_url(private_redis.url, decode_responses=True,
                                     single_connection_client=True)  # fmt: skip
    cluster = aioredis.RedisCluster(host="127.0.0.1", port=1)  # never connects here
    try:
        assert isinstance(script_runner(cluster), RedisPyScripts)
        assert isinstance(script_runner(single), RedisPyScripts)
        assert isinstance(script_runner(object()), RedisPyScripts)
        store = RedisStore(single, prefix="single")
        result = await store.tick(0.0, 3, "{}")
        assert (result.fired, result.recovered) == (0, 0)
        await single.script_flush()  # redis-py's own reload
        assert (await store.tick(0.0, 3, "{}")).fired == 0
        await store.close()
    finally:
        await cluster.aclose()
