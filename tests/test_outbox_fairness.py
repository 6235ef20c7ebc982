"""Outbox claims under a backlog: no partition or channel keeps the others waiting.

A claim takes what is due partition after partition, channel after channel, up
to its limit (a dispatcher's free slots). Each claim starts one partition and one
channel further on than the one before; before that every claim started at
partition 0 and the first channel, so while those had more due intents than a
claim takes, the intents of the others were never claimed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from stores.redis import RedisStore
from testing.conformance._outbox import LEASE, intent, recorded
from testing.conformance._support import T0
from tests.conftest import memory_store


@pytest_asyncio.fixture(name="store")
async def store_fixture() -> AsyncIterator[RedisStore]:
    async with memory_store(4) as store:
        yield store


async def claimed_one_at_a_time(store: RedisStore, channels: list[str], calls: int) -> list[str]:
    """(run id, channel) of what `calls` claims of one intent each took, in order."""
    got: list[str] = []
    for _ in range(calls):
        claims, _ = await store.claim_intents(channels, 1, T0 + 1, LEASE)
        got += [f"{c.run_id}/{'sms' if 'sms' in c.body else 'email'}" for c in claims]
    return got


async def test_a_backlogged_partition_does_not_keep_another_waiting(store: RedisStore) -> None:
    busy, quiet = store.keys.in_partition("busy", 0), store.keys.in_partition("quiet", 2)
    await recorded(store, busy, *(intent(busy, n) for n in range(1, 7)))
    await recorded(store, quiet, intent(quiet, 1))

    got = await claimed_one_at_a_time(store, ["email"], 4)

    assert f"{quiet}/email" in got  # within as many claims as there are partitions
    assert len(got) == 4


async def test_a_backlogged_channel_does_not_keep_another_waiting(store: RedisStore) -> None:
    run = store.keys.in_partition("r", 0)
    intents = [intent(run, n, "email") for n in range(1, 7)] + [intent(run, 7, "sms")]
    await recorded(store, run, *intents)

    got = await claimed_one_at_a_time(store, ["email", "sms"], 2)

    assert got == [f"{run}/email", f"{run}/sms"]
