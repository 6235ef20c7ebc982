"""Worker wake-ups over several partitions: one blocking read on every partition's list."""

from __future__ import annotations

import asyncio

from stores._storecore import block_seconds
from stores.redis import RedisStore


async def test_each_wake_up_takes_one_token_and_none_is_lost(partitioned: RedisStore) -> None:
    # Raced per-partition reads (the losers cancelled) took a token from each
    # partition that had one, and left the cancelled read blocking its
    # connection server-side, so the next wait sat out its whole timeout.
    k = partitioned.keys
    for p in (1, 3):
        await partitioned.client.rpush(k.wake(p, None), *["1"] * 5)
    async with asyncio.timeout(20):  # each wait below returns at once; 30 s would mean stuck
        for n in range(1, 11):
            assert await partitioned.wait_ready(None, 30)
            left = [await partitioned.client.llen(k.wake(p, None)) for p in range(4)]
            assert sum(left) == 10 - n
    assert not await partitioned.wait_ready(None, 0.05)
    assert not await partitioned.wait_intents(["emails"], 0.05)


def test_blocking_timeouts_never_round_down_to_block_forever() -> None:
    # Redis 6.2 reads BLPOP 0.001 as 0 ms (block forever): whole ms + half a ms
    assert block_seconds(0.001) == block_seconds(0.0) == block_seconds(-1) == 0.0015
    assert block_seconds(0.0004) == 0.0015
    assert block_seconds(0.25) == 0.2505
    assert block_seconds(5.0) == 5.0005
