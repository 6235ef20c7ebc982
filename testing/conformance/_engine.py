"""The engine on your store: flows run end to end, at the costs the storage rules promise.

A completed step costs one store call (`record`), an activation gets its whole
journal with its claim (no read of its own), and a replay reads its source
with one call (`read_lineage`). The store is wrapped in a `CountingStore`, so
these count calls of the protocol, not what a store does underneath (one round
trip per call is each store's own promise).
"""

from __future__ import annotations

from typing import Any

from sdk import Client, Registry, RunStatus, flow, step, wait_for
from sdk.store import Store
from testing._env import FlowTestEnv
from testing.conformance._counting import CountingStore
from testing.conformance._support import async_checks, drain, start_and_claim

# The kit's flows live in a registry of their own: importing the kit adds
# nothing to the process's default registry.
KIT = Registry()


@step(name="steadyflow.conformance.add")
async def add(total: int, n: int) -> int:
    return total + n


@flow(name="steadyflow.conformance.steps", registry=KIT)
async def steps(n: int) -> int:
    total = 0
    for i in range(n):
        total = await add(total, i)
    return total


@flow(name="steadyflow.conformance.then_wait", registry=KIT)
async def then_wait(n: int) -> Any:
    for i in range(n):
        await add(0, i)
    return await wait_for("go")


@async_checks
class EngineChecks:
    """Flows executed by the engine's worker on the store under test."""

    async def test_starting_a_run_is_one_store_call(self, store: Store) -> None:
        counting = CountingStore(store)
        client = Client(counting.store, registry=KIT)

        await client.start(steps, 3, run_id="r1")

        assert counting.calls == [("create_run", "r1")]

    async def test_a_completed_step_is_one_store_call(self, store: Store) -> None:
        counting = CountingStore(store)
        async with FlowTestEnv(store=counting.store, registry=KIT) as env:
            handle = await env.start(steps, 5, run_id="r1")

            await env.run_until_idle()

            calls = counting.of("r1")
            assert await handle.result(timeout=5) == 10
        assert calls == ["create_run", *["record"] * 5, "finish"]

    async def test_an_activation_gets_its_whole_journal_with_its_claim(self, store: Store) -> None:
        counting = CountingStore(store)
        # no sticky cache: the wake-up replays the journal its claim carries
        async with FlowTestEnv(store=counting.store, registry=KIT, sticky_cache=0) as env:
            handle = await env.start(then_wait, 40, run_id="r1")
            await env.run_until_idle()
            assert await handle.status() is RunStatus.WAITING_FOR_SIGNAL
            # 19 digits: past cjson's 14 and a double's 2**53, within the int64 values take
            await env.client.signal("r1", "go", {"n": 1234567890123456789})
            counting.calls.clear()

            await env.run_until_idle()

            calls = counting.of("r1")
            assert await handle.result(timeout=5) == {"n": 1234567890123456789}
        # the 40 recorded steps replay from the claimed journal: no read, no write
        assert calls == ["consume", "finish"]

    async def test_a_replay_reads_its_source_with_one_store_call(self, store: Store) -> None:
        counting = CountingStore(store)
        async with FlowTestEnv(store=counting.store, registry=KIT) as env:
            await env.start(steps, 3, run_id="r1")
            await env.run_until_idle()
            counting.calls.clear()

            copy = await env.client.replay("r1")

            calls = (counting.of("r1"), counting.of(copy.run_id))
            await env.run_until_idle()
            assert await copy.result(timeout=5) == 3
        assert calls == (["read_lineage"], ["derive_run"])

    async def test_a_crashed_activation_is_recovered_and_replayed(self, store: Store) -> None:
        counting = CountingStore(store)
        async with FlowTestEnv(store=counting.store, registry=KIT, lease_ttl=5) as env:
            env.crash_at("steadyflow.conformance.add#3")
            handle = await env.start(steps, 5, run_id="r1")
            await env.run_until_idle()
            assert await handle.status() is RunStatus.RUNNING  # its lease is still held

            await env.advance(6)

            calls = counting.of("r1")
            assert await handle.result(timeout=5) == 10
        # add#1 and add#2 were recorded once; add#3 ran again after the crash
        assert calls.count("record") == 5

    async def test_a_client_signal_without_a_dedup_id_is_delivered_once_per_call(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "r1")
        client = Client(store, registry=KIT)

        assert await client.signal("r1", "go", 1) is True
        assert await client.signal("r1", "go", 1) is True

        assert await drain(store, "r1", claim.run.fence) == ["1", "1"]
