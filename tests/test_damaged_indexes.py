"""Keys that runs share, damaged (issue 30): a queue, the list of queues, the FIFO
counter, a status, timer or lease index, the workers' registry.

A queue of the wrong type made every `Client.start` of every run on it raise a
raw ``redis.exceptions.ResponseError: WRONGTYPE``, after half-writing the run.
Now a call that needs a damaged shared key raises `CorruptIndex` naming it and
writes nothing, and no run is failed for it; a worker's next poll deletes a
damaged queue, list of queues, wake-up list or registry (derived data) and
rebuilds it, and the runs the queue held are queued again by the repair pass; a
FIFO counter that cannot count starts over at once. The other indexes are
repaired by hand (docs/operations.md#damaged-runs).

Both on memory:// (fakeredis's Lua) and on the real Redis.
"""

from __future__ import annotations

import logging

import pytest

from sdk import RunStatus, flow, step, wait_for
from sdk.errors import CorruptIndex
from stores._keys import SUFFIX
from stores.redis import RedisStore
from testing import FakeClock, FlowTestEnv

HEALTHY = 10


@step
async def add_one(x: int) -> int:
    return x + 1


@flow(name="tests.damaged_indexes.work")
async def work(x: int) -> int:
    return await add_one(x)


@flow(name="tests.damaged_indexes.waits")
async def waits(x: int) -> int:
    got: int = await wait_for("go")
    return x + got


def shared(store: RedisStore, part: str, name: str = "") -> str:
    return store.keys.base(0) + SUFFIX[part] + name


async def replace(store: RedisStore, name: str, value: str = "garbage") -> None:
    await store.client.delete(name)
    await store.client.set(name, value)


async def test_a_damaged_queue_fails_starts_with_corrupt_index_until_a_worker_rebuilds_it(
    store: RedisStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="steadyflow.worker")
    async with FlowTestEnv(FakeClock(), store=store) as env:
        healthy = [await env.start(work, i, run_id=f"healthy-{i}") for i in range(HEALTHY)]
        queue = shared(store, "queue", "default")
        await replace(store, queue)

        with pytest.raises(CorruptIndex) as info:
            await env.start(work, 100, run_id="new")
        assert (info.value.key, info.value.detail) == (queue, "holds a string, not a zset")
        assert str(info.value) == f"a key that runs share is damaged: {queue}: {info.value.detail}"
        assert [k async for k in store.client.scan_iter(match="*new*")] == []  # nothing written

        await env.run_until_idle()  # the worker's poll sets it aside and rebuilds it

        for i, handle in enumerate(healthy):  # queued again by the repair pass
            assert await handle.result(timeout=5) == i + 1
        assert any(
            f"repair pass: {queue} could not be worked with (holds a string, not a zset); "
            "deleted and rebuilt" in r.getMessage()
            for r in caplog.records
        )
        assert all(r.reason is None for r in await env.client.list_runs())  # none failed
        handle = await env.start(work, 100, run_id="new")
        await env.run_until_idle()
        assert await handle.result(timeout=5) == 101


#: Shared keys a start writes: damaged, each makes it raise `CorruptIndex`.
START_WRITES = {
    "list of queues": ("queues", ""),
    "pending index": ("status", "pending"),
    "all-runs index": ("runs", ""),
    "timer index": ("timers", ""),
    "expiry index": ("expiry", ""),
}


@pytest.mark.parametrize("case", sorted(START_WRITES))
async def test_a_start_that_needs_a_damaged_shared_key_names_it_and_writes_nothing(
    store: RedisStore, case: str
) -> None:
    async with FlowTestEnv(FakeClock(), store=store) as env:
        await env.start(work, 0, run_id="first")
        named = shared(store, *START_WRITES[case])
        await replace(store, named)

        with pytest.raises(CorruptIndex) as info:
            await env.start(work, 1, run_id="second")

        assert info.value.key == named
        assert [k async for k in store.client.scan_iter(match="*second*")] == []


async def test_a_worker_rebuilds_the_list_of_queues(store: RedisStore) -> None:
    async with FlowTestEnv(FakeClock(), store=store) as env:
        healthy = [await env.start(work, i, run_id=f"healthy-{i}") for i in range(HEALTHY)]
        await replace(store, shared(store, "queues"))

        await env.run_until_idle()

        for i, handle in enumerate(healthy):
            assert await handle.result(timeout=5) == i + 1
        assert await store.client.smembers(shared(store, "queues")) == {"default"}
        handle = await env.start(work, 100, run_id="new")
        await env.run_until_idle()
        assert await handle.result(timeout=5) == 101


async def test_a_signal_that_would_wake_a_run_onto_a_damaged_index_names_it_and_writes_nothing(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(FakeClock(), store=store) as env:
        handle = await env.start(waits, 1, run_id="waiting")
        await env.run_until_idle()
        running = shared(store, "status", "running")
        await replace(store, running)
        events = await env.client.events("waiting")

        with pytest.raises(CorruptIndex) as info:
            await env.client.signal("waiting", "go", 2)

        assert (info.value.key, info.value.detail) == (running, "holds a string, not a zset")
        assert await env.client.events("waiting") == events
        assert await handle.status() is RunStatus.WAITING_FOR_SIGNAL
        await store.client.delete(running)  # repaired by hand (the runbook)
        await env.client.signal("waiting", "go", 2)
        await env.run_until_idle()
        assert await handle.result(timeout=5) == 3


@pytest.mark.parametrize("index", ["leases", "timers", "deadlines"])
async def test_a_script_redis_stops_on_a_damaged_index_is_named_not_raw(
    store: RedisStore, index: str
) -> None:
    # an index a script uses without checking it first: Redis stops the script
    # (WRONGTYPE), and the store names the damaged key of the partition
    async with FlowTestEnv(FakeClock(), store=store) as env:
        await env.start(work, 0, run_id="r1")
        await store.client.delete(shared(store, index))
        await store.client.set(shared(store, index), "garbage")

        with pytest.raises(CorruptIndex) as info:
            await store.tick(env.clock.time(), 10, '{"type":"x:Y","message":"m"}')

        assert info.value.key == shared(store, index)
        assert info.value.detail == "holds a string, not a zset"


async def test_list_runs_by_a_damaged_status_index_names_it(store: RedisStore) -> None:
    async with FlowTestEnv(FakeClock(), store=store) as env:
        await env.start(work, 0, run_id="r1")
        pending = shared(store, "status", "pending")
        await replace(store, pending)

        with pytest.raises(CorruptIndex) as info:
            await env.client.list_runs(status="pending")

        assert info.value.key == pending
        assert [r.run_id for r in await env.client.list_runs()] == ["r1"]


async def test_a_damaged_registry_of_workers_is_named_and_rebuilt(store: RedisStore) -> None:
    async with FlowTestEnv(FakeClock(), store=store) as env:
        registry = shared(store, "workers")
        await replace(store, registry)

        with pytest.raises(CorruptIndex) as info:
            await env.client.workers()
        assert info.value.key == registry
        await env.start(work, 0, run_id="r1")

        await env.run_until_idle()  # a poll rebuilds it; workers register again

        assert await env.client.handle("r1").result(timeout=5) == 1
        assert await env.client.workers() == []  # (FlowTestEnv's worker sends no beats)
        assert await store.client.type(registry) == "none"  # rebuilt by the next beat


async def test_a_fifo_counter_that_cannot_count_starts_over(store: RedisStore) -> None:
    async with FlowTestEnv(FakeClock(), store=store) as env:
        await replace(store, shared(store, "seq"), "not a number")

        handle = await env.start(work, 1, run_id="r1")  # our own bookkeeping: no error
        await env.run_until_idle()

        assert await handle.result(timeout=5) == 2
        assert await store.client.get(shared(store, "seq")) == "1"


async def test_a_damaged_queue_is_named_by_queues(store: RedisStore) -> None:
    async with FlowTestEnv(FakeClock(), store=store) as env:
        await env.start(work, 0, run_id="r1")
        queue = shared(store, "queue", "default")
        await replace(store, queue)

        with pytest.raises(CorruptIndex) as info:
            await env.client.queues()

        assert info.value.key == queue
