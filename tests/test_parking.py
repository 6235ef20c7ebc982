"""Parking runs no user code with effects: cleanup code runs when the run really reaches it.

When a run parks (a wait, a sleep, a durable backoff) or its activation is
abandoned (crash, lost lease), the flow's remaining code is unwound without
effects: a step called from a ``finally`` block, an ``__aexit__`` or an
``except BaseException`` handler records nothing, emits nothing and registers
no wait. That code runs for real when a later activation reaches it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sdk import emit, flow, step, wait_for
from sdk.errors import RunFailed
from sdk.model._decorators import channel
from stores.redis import RedisStore
from testing import FlowTestEnv

RUNS: Counter[str] = Counter()
EVENTS: list[str] = []


@pytest.fixture(autouse=True, name="reset")
def reset_fixture() -> None:
    RUNS.clear()
    EVENTS.clear()


@step
async def acquire(what: str) -> str:
    RUNS[f"acquire {what}"] += 1
    return what


@step
async def release(what: str) -> None:
    RUNS[f"release {what}"] += 1
    emit("tests.parking.audit", {"released": what})


@channel("tests.parking.audit")
async def audit(intent: Any) -> None:
    EVENTS.append(intent.idempotency_key)


async def steps_recorded(env: FlowTestEnv, run_id: str) -> list[str]:
    events = await env.client.events(run_id, limit=1000)
    return [e.step_key or "" for e in events if e.type == "step.completed"]


@flow(name="tests.parking.try_finally")
async def try_finally() -> str:
    held = await acquire("lock")
    try:
        return str(await wait_for("go"))
    finally:
        await release(held)


async def test_a_finally_block_runs_its_step_only_when_the_run_gets_there(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(try_finally)
        await env.run_until_idle()
        assert await handle.status() == "waiting_for_signal"
        assert RUNS == {"acquire lock": 1}  # parking did not run release()
        assert await steps_recorded(env, handle.run_id) == ["acquire#1"]
        assert await env.client.intents(handle.run_id) == []
        await env.advance(3600)  # nothing else wakes it either
        assert RUNS == {"acquire lock": 1}

        await env.client.signal(handle.run_id, "go", "now")
        await env.run_until_idle()
        assert await handle.result() == "now"
        assert RUNS == {"acquire lock": 1, "release lock": 1}
        assert await steps_recorded(env, handle.run_id) == ["acquire#1", "release#1"]
        assert len(await env.client.intents(handle.run_id)) == 1


@contextlib.asynccontextmanager
async def holding(what: str) -> AsyncIterator[str]:
    held = await acquire(what)
    try:
        yield held
    finally:
        await release(held)


@flow(name="tests.parking.async_with")
async def async_with() -> list[Any]:
    async with holding("a") as a, holding("b") as b:
        payload = await wait_for("go")
    return [a, b, payload]


async def test_an_async_with_exit_runs_its_step_only_after_the_signal() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(async_with)
        await env.run_until_idle()
        assert RUNS == {"acquire a": 1, "acquire b": 1}
        await env.client.signal(handle.run_id, "go", 1)
        await env.run_until_idle()
        assert await handle.result() == ["a", "b", 1]
    assert RUNS == {"acquire a": 1, "acquire b": 1, "release a": 1, "release b": 1}


async def branch(name: str) -> str:
    held = await acquire(name)
    try:
        inner = await asyncio.gather(wait_for(f"{name}-1"), wait_for(f"{name}-2"))
        return f"{held}:{inner}"
    finally:
        await release(held)


@flow(name="tests.parking.nested_gathers")
async def nested_gathers() -> list[str]:
    return list(await asyncio.gather(branch("x"), branch("y")))


async def test_nested_gathers_park_without_running_any_cleanup() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(nested_gathers)
        await env.run_until_idle()
        assert RUNS == {"acquire x": 1, "acquire y": 1}
        for name in ("x-1", "y-2"):
            await env.client.signal(handle.run_id, name, name)
            await env.run_until_idle()
            assert await handle.status() == "waiting_for_signal"
        assert RUNS == {"acquire x": 1, "acquire y": 1}  # each branch still waits
        await env.client.signal(handle.run_id, "x-2", "x-2")
        await env.run_until_idle()  # branch x is done: its finally runs, once, for real
        assert RUNS == {"acquire x": 1, "acquire y": 1, "release x": 1}
        await env.client.signal(handle.run_id, "y-1", "y-1")
        await env.run_until_idle()
        assert await handle.result() == ["x:['x-1', 'x-2']", "y:['y-1', 'y-2']"]
    assert RUNS == {"acquire x": 1, "acquire y": 1, "release x": 1, "release y": 1}


@flow(name="tests.parking.except_base")
async def except_base() -> str:
    try:
        return str(await wait_for("go"))
    except BaseException:
        await release("on error")  # must not run when the run parks
        raise


async def test_a_step_in_an_except_base_exception_handler_does_not_run_on_parking() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(except_base)
        await env.run_until_idle()
        assert await handle.status() == "waiting_for_signal"
        assert RUNS == {}
        await env.client.signal(handle.run_id, "go", "fine")
        await env.run_until_idle()
        assert await handle.result() == "fine"
    assert RUNS == {}


@flow(name="tests.parking.swallowing")
async def swallowing() -> str:
    try:  # noqa: SIM105  # swallows the unwinding, on purpose
        await wait_for("go")
    except BaseException:
        pass
    await release("after swallow")  # ...so it makes another call: refused too
    return "done"


async def test_a_flow_that_swallows_the_unwinding_still_runs_nothing() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(swallowing)
        await env.run_until_idle()
        assert await handle.status() == "waiting_for_signal"
        assert RUNS == {}
        await env.client.signal(handle.run_id, "go")
        await env.run_until_idle()
        assert await handle.result() == "done"
    assert RUNS == {"release after swallow": 1}


@step
async def slow(label: str) -> str:
    RUNS[label] += 1
    return label


@flow(name="tests.parking.crash_cleanup")
async def crash_cleanup() -> str:
    held = await acquire("c")
    try:
        return await slow("work")
    finally:
        await release(held)


async def test_a_crash_unwinds_the_flow_without_running_its_cleanup() -> None:
    async with FlowTestEnv() as env:
        env.crash_at("slow#1", "before")
        handle = await env.start(crash_cleanup)
        await env.run_until_idle()
        assert RUNS == {"acquire c": 1}  # the crash ran no finally step
        await env.advance(31)  # the lease expires; another activation continues
        assert await handle.result() == "work"
    assert RUNS == {"acquire c": 1, "work": 1, "release c": 1}


GATE: dict[str, asyncio.Event] = {}


@step
async def gated(label: str) -> str:
    RUNS[label] += 1
    GATE["started"].set()
    await GATE["open"].wait()
    return label


@flow(name="tests.parking.lost_lease_cleanup")
async def lost_lease_cleanup() -> str:
    held = await acquire("l")
    try:
        return await gated("gated")
    finally:
        await release(held)


async def test_a_lost_lease_unwinds_the_flow_without_running_its_cleanup(
    store: RedisStore,
) -> None:
    GATE["open"], GATE["started"] = asyncio.Event(), asyncio.Event()
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(lost_lease_cleanup)
        idle = asyncio.create_task(env.run_until_idle())
        await asyncio.wait_for(GATE["started"].wait(), 5)  # the step is running
        # Another worker took the run over meanwhile: this activation's token is stale.
        await store.client.hincrby(store.keys.run(handle.run_id), "fence", 1)
        GATE["open"].set()
        await idle  # the result's write is refused: the activation stops
        assert RUNS == {"acquire l": 1, "gated": 1}  # and ran no cleanup
        assert await steps_recorded(env, handle.run_id) == ["acquire#1"]
        assert await env.client.intents(handle.run_id) == []

        await env.advance(env.worker.lease_ttl + 1)  # recovered: the flow gets there
        assert await handle.result(timeout=5) == "gated"
    assert RUNS == {"acquire l": 1, "gated": 2, "release l": 1}


@flow(name="tests.parking.cancel_cleanup")
async def cancel_cleanup() -> str:
    held = await acquire("k")
    try:
        return str(await wait_for("never"))
    finally:
        await release(held)


async def test_canceling_a_parked_run_runs_none_of_its_cleanup_steps() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(cancel_cleanup)
        await env.run_until_idle()
        await env.client.cancel(handle.run_id, reason="test", grace=0)
        await env.run_until_idle()
        assert await handle.status() == "canceled"
    assert RUNS == {"acquire k": 1}


# -- a flow that waits on something nothing can complete ----------------------------


@flow(name="tests.parking.blocked")
async def blocked() -> None:
    await asyncio.Event().wait()


async def test_a_flow_blocked_on_a_plain_asyncio_event_fails_with_flow_blocked() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(blocked)
        await env.run_until_idle()
        with pytest.raises(RunFailed) as info:
            await handle.result()
    assert info.value.error.type == "sdk.errors:FlowBlocked"
    assert "cannot go on" in info.value.error.message


@flow(name="tests.parking.io_in_body")
async def io_in_body() -> str:
    return await asyncio.to_thread(str, 1)


async def test_io_in_a_flow_body_fails_with_a_clear_error() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(io_in_body)
        await env.run_until_idle()
        with pytest.raises(RunFailed) as info:
            await handle.result()
    assert info.value.error.type == "sdk.errors:NotInStepError"
    assert "@step" in info.value.error.message


# -- crashes are deterministic ---------------------------------------------------------

SQUARES: Counter[int] = Counter()


@step
async def square(i: int) -> int:
    SQUARES[i] += 1
    return i * i


@flow(name="tests.parking.squares")
async def squares() -> list[int]:
    return list(await asyncio.gather(*(square(i) for i in range(6))))


@pytest.mark.parametrize("turns", [0, 1, 5, 50])
async def test_a_crash_in_a_gather_behaves_the_same_whatever_the_test_awaits(
    turns: int, store: RedisStore
) -> None:
    SQUARES.clear()
    async with FlowTestEnv(store=store) as env:
        env.crash_at("square#4", "after")
        handle = await env.start(squares)
        await env.run_until_idle()
        # run_until_idle returned: nothing of the crashed activation is in flight
        for _ in range(turns):
            await asyncio.sleep(0)
        assert SQUARES == {0: 1, 1: 1, 2: 1, 3: 1}  # #5 and #6 never started
        await env.advance(env.worker.lease_ttl + 1)
        assert await handle.result() == [0, 1, 4, 9, 16, 25]
    # what was recorded before the crash did not run again; square#4 ran twice
    assert SQUARES == {0: 1, 1: 1, 2: 1, 3: 2, 4: 1, 5: 1}
