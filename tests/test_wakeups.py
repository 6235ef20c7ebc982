"""Worker wake-ups over several partitions: one blocking read on every partition's list."""

from __future__ import annotations

import asyncio

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
