"""Claims across partitions (stores._claiming): concurrent, fair, in priority order.

On the memory store (the Redis store's scripts on fakeredis, through the same
lane as a real Redis), with several partitions on one node. The two tests of
what goes on the wire together use a real Redis: a memory:// call is answered
before the caller yields (no wire), so its calls never overlap to be batched.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from stores._redispy import Lane
from stores.redis import RedisStore
from testing.conformance._support import OWNER, T0, TTL, new_run
from tests.conftest import memory_store


@pytest_asyncio.fixture(name="store")
async def store_fixture() -> AsyncIterator[RedisStore]:
    async with memory_store(4) as store:
        yield store


def ids_in(store: RedisStore, partition: int, n: int) -> list[str]:
    """`n` run ids of `partition`."""
    return [store.keys.in_partition(f"r{partition}-{i}", partition) for i in range(n)]


async def test_an_idle_poll_asks_every_partition_at_once(partitioned: RedisStore) -> None:
    store = partitioned
    lane = store._runner
    assert isinstance(lane, Lane)
    await store.poll(OWNER, None, 8, T0, TTL, 10, "{}")  # the lane's connection made
    before = lane.batched

    claims, _ = await store.poll(OWNER, None, 8, T0, TTL, 10, "{}")

    # the first call goes out at once, the other three in one write right
    # behind it, before any answer: not one partition after another
    assert claims == []
    assert (lane.batched[0] - before[0], lane.batched[1] - before[1]) == (1, 3)


async def test_a_claim_asks_in_two_rounds_whatever_the_partitions(
    partitioned: RedisStore,
) -> None:
    store = partitioned
    for p in range(4):
        for i, run_id in enumerate(ids_in(store, p, 3)):
            await store.create_run(new_run(run_id, created_at=T0 + 4 * i + p))
    lane = store._runner
    assert isinstance(lane, Lane)
    before = lane.batched

    claims = await store.claim(OWNER, None, 6, T0 + 20, TTL)

    # the peek of all 4, then the claims of the 4 partitions holding the best 6:
    # each round one call at once and three together behind it
    assert len(claims) == 6
    assert (lane.batched[0] - before[0], lane.batched[1] - before[1]) == (2, 6)


async def test_equal_runs_are_taken_from_a_rotating_first_partition(store: RedisStore) -> None:
    # same priority, same creation time: no partition always comes first
    for p in range(4):
        for run_id in ids_in(store, p, 2):
            await store.create_run(new_run(run_id))

    firsts = [
        store.keys.partition((await store.claim(OWNER, None, 1, T0, TTL))[0].run.run_id)
        for _ in range(4)
    ]

    assert sorted(firsts) == [0, 1, 2, 3]


async def test_a_partition_that_gives_less_than_planned_is_made_up_from_the_others(
    store: RedisStore,
) -> None:
    # partition 0's best runs are of a flow this worker does not serve (only the
    # first of a queue is checked by the peek): the claim still fills up from 1
    mine, x1, x2 = ids_in(store, 0, 3)
    b1, b2 = ids_in(store, 1, 2)
    await store.create_run(new_run(mine, flow="f.mine", created_at=T0))
    await store.create_run(new_run(x1, flow="f.other", created_at=T0 + 1))
    await store.create_run(new_run(x2, flow="f.other", created_at=T0 + 2))
    await store.create_run(new_run(b1, flow="f.mine", created_at=T0 + 3))
    await store.create_run(new_run(b2, flow="f.mine", created_at=T0 + 4))

    claims = await store.claim(OWNER, None, 3, T0 + 5, TTL, flows=["f.mine"])

    assert [c.run.run_id for c in claims] == [mine, b1, b2]


async def test_a_lower_priority_number_wins_over_an_older_run_elsewhere(
    store: RedisStore,
) -> None:
    (old,) = ids_in(store, 0, 1)
    (urgent,) = ids_in(store, 2, 1)
    await store.create_run(new_run(old, created_at=T0))
    await store.create_run(new_run(urgent, priority=-1, created_at=T0 + 9))

    assert [c.run.run_id for c in await store.claim(OWNER, None, 1, T0 + 9, TTL)] == [urgent]
    assert [c.run.run_id for c in await store.claim(OWNER, None, 1, T0 + 9, TTL)] == [old]
