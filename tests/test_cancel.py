"""Cancel of a run whose step is executing: the heartbeat that finds the lease lost
interrupts the step (it gets `CancelledError`, records nothing) and frees the slot."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

from sdk import Client, RunStatus, Worker, flow, step
from sdk.errors import RunCanceled
from stores.redis import RedisStore
from testing import FlowTestEnv
from tests.crashflows import Workers, cancel_mid_step, labelled, one_step, until

# What the held step saw: "start", "cancelled", "end".
SEEN: list[str] = []
ENTERED: dict[str, asyncio.Event] = {}


@pytest.fixture(autouse=True, name="_reset")
def reset_fixture() -> None:
    SEEN.clear()
    ENTERED.clear()


def entered(label: str = "held") -> asyncio.Event:
    return ENTERED.setdefault(label, asyncio.Event())


@step
async def held() -> str:
    SEEN.append("start")
    entered().set()
    try:
        await asyncio.Event().wait()  # only a cancel ends it
    except asyncio.CancelledError:
        SEEN.append("cancelled")
        raise
    SEEN.append("end")  # never reached
    return "held"


@step
async def after() -> str:
    SEEN.append("after")
    return "after"


@flow(name="tests.cancel.holds")
async def holds() -> str:
    await held()
    return await after()


@step
async def quick(label: str) -> str:
    return label


@flow(name="tests.cancel.quick")
async def quick_flow(label: str) -> str:
    return await quick(label)


async def test_cancel_interrupts_the_executing_step_at_the_next_heartbeat(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(store=store, concurrency=1) as env:
        handle = await env.start(holds)
        busy = asyncio.create_task(env.run_until_idle())
        await entered().wait()
        await env.client.cancel(handle.run_id, reason="customer asked")
        assert SEEN == ["start"]  # the cancel itself does not reach into the worker
        await env.advance(env.worker.lease_ttl / 3)  # one heartbeat
        await busy
        assert SEEN == ["start", "cancelled"]
        assert not env.worker._inflight  # the slot is free
        with pytest.raises(RunCanceled):
            await handle.result()
        record = await env.client.get(handle.run_id)
        assert record.status == RunStatus.CANCELED
        assert record.reason == "customer asked"
        types = [e.type for e in await env.client.events(handle.run_id)]
        assert "step.completed" not in types and "step.failed" not in types
        # the one slot serves the next run
        other = await env.start(quick_flow, "next")
        await env.run_until_idle()
        assert await other.result() == "next"
    assert "after" not in SEEN


async def test_a_run_canceled_while_a_step_runs_with_a_timeout_is_interrupted_too(
    store: RedisStore,
) -> None:
    @step(timeout=3600, name="tests.cancel.held_with_timeout")
    async def held_with_timeout() -> str:
        return await held()

    @flow(name="tests.cancel.holds_with_timeout")
    async def holds_with_timeout() -> str:
        return await held_with_timeout()

    async with FlowTestEnv(store=store, flows=[holds_with_timeout]) as env:
        handle = await env.start(holds_with_timeout)
        busy = asyncio.create_task(env.run_until_idle())
        await entered().wait()
        await env.client.cancel(handle.run_id, reason="stop")
        await env.advance(1)
        await busy
        assert SEEN == ["start", "cancelled"]
        assert not env.worker._inflight
        assert (await handle.status()) == RunStatus.CANCELED


@step
async def held_too() -> str:
    SEEN.append("start too")
    entered("too").set()
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        SEEN.append("cancelled too")
        raise
    return "held too"  # never reached


@flow(name="tests.cancel.holds_two")
async def holds_two() -> list[str]:
    return list(await asyncio.gather(held(), held_too()))


async def test_cancel_interrupts_every_step_executing_side_by_side(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(holds_two)
        busy = asyncio.create_task(env.run_until_idle())
        await entered().wait()
        await entered("too").wait()
        await env.client.cancel(handle.run_id, reason="stop")
        await env.advance(1)
        await busy
        assert sorted(SEEN) == ["cancelled", "cancelled too", "start", "start too"]
        assert not env.worker._inflight
        assert (await handle.status()) == RunStatus.CANCELED


@flow(name="tests.cancel.holds_with_run_timeout", timeout=60)
async def holds_with_run_timeout() -> str:
    return await held()


async def test_a_run_timeout_interrupts_the_executing_step_at_the_next_heartbeat(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(store=store, concurrency=1) as env:
        handle = await env.start(holds_with_run_timeout)
        busy = asyncio.create_task(env.run_until_idle())
        await entered().wait()
        env.clock.advance(60)
        await env.worker._poller.poll()  # a tick fails the run
        assert SEEN == ["start"]
        await env.advance(1)  # the next heartbeat finds the lease lost
        await busy
        assert SEEN == ["start", "cancelled"]
        assert not env.worker._inflight
        record = await env.client.get(handle.run_id)
        assert (record.status, record.reason) == (RunStatus.FAILED, "timed_out")


@pytest.mark.redis
async def test_a_serving_worker_interrupts_a_canceled_step_and_serves_the_next_run(
    real_store: RedisStore,
) -> None:
    # A real clock: the heartbeat (lease_ttl / 3) notices the cancel.
    worker = Worker(real_store, [holds, quick_flow], concurrency=1, lease_ttl=0.6)
    client = Client(real_store)
    serving = asyncio.create_task(worker.run())
    try:
        handle = await client.start(holds)
        await asyncio.wait_for(entered().wait(), 10)
        await client.cancel(handle.run_id, reason="no longer needed")
        await until(lambda: "cancelled" in SEEN, 10, "the step to be interrupted")
        await until(lambda: not worker._inflight, 10, "the slot to be free")
        other = await client.start(quick_flow, "next")
        assert await other.result(timeout=10) == "next"
        assert (await handle.status()) == RunStatus.CANCELED
    finally:
        await worker.stop()
        await serving
    assert SEEN == ["start", "cancelled"]


@pytest.mark.redis
@pytest.mark.slow
async def test_a_worker_process_interrupts_a_canceled_step_and_serves_another_run(
    workers: Workers, client: Client, tmp_path: Path
) -> None:
    markers, release = tmp_path / "markers", tmp_path / "release"
    proc = workers.spawn("--concurrency", "1")  # lease 1 s: a heartbeat every 1/3 s
    run_id = f"cancel-{uuid.uuid4().hex[:8]}"
    handle = await client.start(cancel_mid_step, str(markers), str(release), run_id=run_id)
    await until(lambda: labelled(markers, "holding"), 15, "the step to start", proc)

    await client.cancel(run_id, reason="operator")
    await until(lambda: labelled(markers, "interrupted"), 15, "the step to be interrupted", proc)
    with pytest.raises(RunCanceled):
        await handle.result(timeout=5)
    # the one slot is free: another run is served while the release never came
    other = await client.start(one_step, str(markers), "other")
    assert await other.result(timeout=15) == "other"
    assert [m.label for m in labelled(markers, "finished") + labelled(markers, "after")] == []
    assert labelled(markers, "interrupted")[0].pid == proc.pid


@pytest.mark.xdist_group("docs-composition")  # the snippets register flows once per process
async def test_the_cancellation_snippets_run() -> None:
    from tests.test_composition_doc import PAGE, section_code

    namespace: dict[str, Any] = {"__name__": "docs_composition_cancellation"}
    exec(compile(section_code("Cancellation"), str(PAGE), "exec"), namespace)
    await namespace["main"]()
