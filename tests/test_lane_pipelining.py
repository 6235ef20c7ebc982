"""The script lane's pipelining: calls made while others are on the wire go out
together, one write and one round trip, and each still gets its own reply or error.

On a redis-server owned by the test (SCRIPT FLUSH and CLIENT KILL would disturb
other tests on the shared one). `.ci/run` also runs this module against the
oldest redis-py the project supports.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from stores._redispy import Lane
from tests.conftest import PrivateRedis
from tests.crashflows import until
from tests.test_lane import ECHO, FAILS, SLOW, Kit, admin_fixture, kit_fixture

__all__ = ["admin_fixture", "kit_fixture"]  # the fixtures, shared with tests/test_lane.py


def counted(kit: Kit) -> list[int]:
    """The number of commands in each write the lane's connections send."""
    writes: list[int] = []
    base: Any = kit.pool.connection_class

    class Counting(base):  # type: ignore[misc]
        async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            raw = command if isinstance(command, bytes) else b"".join(command)
            if b"EVALSHA" in raw:  # not the connection's own set-up commands
                writes.append(raw.count(b"EVALSHA"))
            await super().send_packed_command(command, check_health)

    kit.pool.connection_class = Counting
    return writes


async def test_calls_made_together_share_one_round_trip_and_get_their_own_replies(
    private_redis: PrivateRedis,
) -> None:
    kit = Kit(private_redis.url, 4)
    writes = counted(kit)
    try:
        assert await kit.run(ECHO, [], ["loaded"]) == "loaded"  # the script is loaded first
        writes.clear()
        replies = await asyncio.gather(*(kit.run(ECHO, [], [f"r{i}"]) for i in range(50)))
        assert replies == [f"r{i}" for i in range(50)]
        # the first goes at once; the 49 made meanwhile go out together
        assert writes == [1, 49]
        assert kit.lane.batched == (1, 49)
        assert await kit.run(ECHO, [], ["alone"]) == "alone"  # nothing on the wire: at once
        assert writes[-1] == 1
    finally:
        await kit.close()


async def test_without_pipelining_every_call_is_its_own_round_trip(
    private_redis: PrivateRedis,
) -> None:
    kit = Kit(private_redis.url, 4)
    kit.lane = Lane(kit.pool, 4, pipelining=False)
    writes = counted(kit)
    try:
        assert await kit.run(ECHO, [], ["loaded"]) == "loaded"
        writes.clear()
        replies = await asyncio.gather(*(kit.run(ECHO, [], [f"r{i}"]) for i in range(20)))
        assert replies == [f"r{i}" for i in range(20)]
        assert writes == [1] * 20
    finally:
        await kit.close()


async def test_an_error_reply_in_a_batch_fails_only_its_own_call(kit: Kit) -> None:
    sources = [ECHO, ECHO, FAILS, ECHO]
    replies = await asyncio.gather(
        *(kit.run(src, [], [f"r{i}"]) for i, src in enumerate(sources)), return_exceptions=True
    )
    assert replies[:2] == ["r0", "r1"] and replies[3] == "r3"
    assert isinstance(replies[2], ResponseError) and "refused by the script" in str(replies[2])
    assert kit.lane.batched == (1, 3)
    assert await kit.run(ECHO, [], ["next"]) == "next"


async def test_a_flushed_script_is_loaded_again_for_every_call_of_a_batch(
    kit: Kit, admin: aioredis.Redis
) -> None:
    script = kit.client.register_script(ECHO)
    assert await kit.lane.run(script, [], ["warm"]) == "warm"
    await admin.script_flush()
    replies = await asyncio.gather(*(kit.lane.run(script, [], [f"r{i}"]) for i in range(10)))
    assert replies == [f"r{i}" for i in range(10)]
    assert kit.lane.batched[0] >= 1  # they did go out as a batch


async def test_a_connection_killed_under_a_batch_is_retried_call_by_call(
    private_redis: PrivateRedis, admin: aioredis.Redis
) -> None:
    kit = Kit(private_redis.url, 2)
    try:
        assert await kit.run(SLOW, [], ["1", "warm"]) == "warm"  # loaded: no NOSCRIPT detour
        calls = [asyncio.ensure_future(kit.run(SLOW, [], ["150", f"r{i}"])) for i in range(6)]
        # all sent: one alone, five in a batch behind it
        await until(lambda: kit.lane.batched == (1, 5), 10, "the batch on the wire")
        assert await admin.client_kill_filter(_type="normal", skipme=True) >= 1
        assert await asyncio.gather(*calls) == [f"r{i}" for i in range(6)]
        assert await kit.run(ECHO, [], ["after"]) == "after"
    finally:
        await kit.close()


async def test_a_caller_cancelled_in_a_batch_leaves_the_others_and_no_stale_reply(
    kit: Kit,
) -> None:
    assert await kit.run(SLOW, [], ["1", "warm"]) == "warm"  # loaded: no NOSCRIPT detour
    first = asyncio.ensure_future(kit.run(SLOW, [], ["100", "first"]))
    await asyncio.sleep(0)
    calls = [asyncio.ensure_future(kit.run(SLOW, [], ["50", f"r{i}"])) for i in range(4)]
    # the batch is on the wire (200 ms of server time)
    await until(lambda: kit.lane.batched == (1, 4), 10, "the batch on the wire")
    calls[1].cancel()
    with pytest.raises(asyncio.CancelledError):
        await calls[1]
    assert await first == "first"
    assert [await calls[i] for i in (0, 2, 3)] == ["r0", "r2", "r3"]
    # the cancelled call's reply was read and dropped: the next call gets its own
    assert await kit.run(ECHO, [], ["fresh"]) == "fresh"
    assert kit.lane.connections == 1
