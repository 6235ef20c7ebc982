"""`list_runs` over several partitions: the newest runs of all of them, asked at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from sdk.store import RunStatus
from stores.redis import RedisStore
from testing.conformance._support import OWNER, T0, TTL, new_run
from tests.conftest import memory_store


@pytest_asyncio.fixture(name="store")
async def store_fixture() -> AsyncIterator[RedisStore]:
    async with memory_store(4) as store:
        yield store


async def _spread(store: RedisStore, per_partition: int) -> dict[str, float]:
    """Runs in every partition, created in turn (partition 0, 1, 2, 3, 0...), flows
    alternating: their ids and creation times."""
    created: dict[str, float] = {}
    for i in range(per_partition):
        for p in range(4):
            run_id = store.keys.in_partition(f"r{i}-{p}", p)
            at = T0 + 4 * i + p
            flow = "even" if (4 * i + p) % 2 == 0 else "odd"
            await store.create_run(new_run(run_id, flow=flow, created_at=at))
            created[run_id] = at
    return created


async def test_the_newest_runs_of_every_partition_merged_newest_first(
    store: RedisStore,
) -> None:
    created = await _spread(store, 5)
    newest = sorted(created, key=created.__getitem__, reverse=True)

    listed = await store.list_runs(None, None, 7)

    assert [r.run_id for r in listed] == newest[:7]
    assert len({store.keys.partition(r.run_id) for r in listed}) == 4


async def test_filters_apply_in_every_partition(store: RedisStore) -> None:
    created = await _spread(store, 5)
    claims = await store.claim(OWNER, None, 3, T0 + 100, TTL)
    running = {c.run.run_id for c in claims}
    odd = [r for r in sorted(created, key=created.__getitem__, reverse=True)
           if (created[r] - T0) % 2 == 1]  # fmt: skip

    assert [r.run_id for r in await store.list_runs(None, "odd", 4)] == odd[:4]
    listed = await store.list_runs(RunStatus.RUNNING, None, 10)
    assert {r.run_id for r in listed} == running
    assert all(r.status is RunStatus.RUNNING for r in listed)
    pending = await store.list_runs(RunStatus.PENDING, None, 100)
    assert len(pending) == 20 - 3


async def test_every_partition_is_asked_before_any_answers(store: RedisStore) -> None:
    await _spread(store, 2)
    asked = 0
    everyone = asyncio.Event()
    zrevrange = store.client.zrevrange

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal asked
        asked += 1
        if asked == 4:
            everyone.set()
        # one partition after another would wait here for the next one forever
        await asyncio.wait_for(everyone.wait(), timeout=5)
        return await zrevrange(*args, **kwargs)

    store.client.zrevrange = counted  # type: ignore[method-assign]
    try:
        listed = await store.list_runs(None, None, 3)
    finally:
        del store.client.zrevrange

    assert asked >= 4
    assert len(listed) == 3


@pytest.mark.parametrize("limit", [1, 3])
async def test_a_limit_smaller_than_one_partition_still_gives_the_newest(
    store: RedisStore, limit: int
) -> None:
    created = await _spread(store, 6)
    newest = sorted(created, key=created.__getitem__, reverse=True)

    assert [r.run_id for r in await store.list_runs(None, None, limit)] == newest[:limit]


async def test_a_listing_reads_about_its_limit_not_its_limit_per_partition() -> None:
    async with memory_store(16) as store:
        created: dict[str, float] = {}
        for i in range(30):
            for p in range(16):
                run_id = store.keys.in_partition(f"r{i}-{p}", p)
                created[run_id] = T0 + 16 * i + p
                await store.create_run(new_run(run_id, created_at=created[run_id]))
        read = 0
        zrevrange = store.client.zrevrange

        async def counted(*args: Any, **kwargs: Any) -> Any:
            nonlocal read
            ids = await zrevrange(*args, **kwargs)
            read += len(ids)
            return ids

        store.client.zrevrange = counted  # type: ignore[method-assign]
        try:
            listed = await store.list_runs(None, None, 50)
        finally:
            del store.client.zrevrange

        assert [r.run_id for r in listed] == sorted(created, key=created.__getitem__)[::-1][:50]
        # a first page of each partition, and more only where the newest are:
        # not 50 from each of the 16 (800 of the 480)
        assert read <= 16 * 10 + 50
