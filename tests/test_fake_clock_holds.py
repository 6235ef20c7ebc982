"""A short sleep or retry backoff is waited for in place on a fake clock as on a real one.

A production worker waits for a backoff or sleep of at most ``inline_backoff_max``
in place instead of parking the run. The engine takes that path whatever the
clock (`sdk._core._clock.wait_until`): on a `FakeClock` the activation waits
until the test advances the clock, `run_until_idle` counts it as idle
meanwhile, and the env keeps its lease alive through the jump. The env's
default (``inline_backoff_max=0``) still parks every one, as documented.
"""

from __future__ import annotations

from collections import Counter

import pytest

from sdk import RetryPolicy, RunStatus, Worker, flow, sleep, step
from sdk.model._intercept import ActivationInfo, Interceptor
from stores import open_store
from testing import FakeClock, FlowTestEnv

_calls: Counter[str] = Counter()


@step
async def note(what: str) -> str:
    _calls[what] += 1
    return what


@step(retry=RetryPolicy(max_attempts=3, initial_interval=0.5, backoff=1.0))
async def flaky() -> str:
    _calls["flaky"] += 1
    if _calls["flaky"] == 1:
        raise ConnectionError("refused")
    return "ok"


@flow(name="tests.fake_clock_holds.nap")
async def nap() -> list[str]:
    first = await note("before")
    await sleep(0.9)
    return [first, await note("after")]


@flow(name="tests.fake_clock_holds.retry")
async def retried() -> str:
    return await flaky()


class Activations(Interceptor):
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def activation_started(self, info: ActivationInfo) -> None:
        self.reasons.append(info.reason.value)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    _calls.clear()


async def test_a_short_sleep_waits_in_place_until_the_test_advances_the_clock() -> None:
    acts = Activations()
    async with FlowTestEnv(inline_backoff_max=1.0, interceptors=[acts]) as env:
        handle = await env.start(nap)
        await env.run_until_idle()  # returns: the run waits for nothing but time
        assert (await env.client.get(handle.run_id)).status is RunStatus.RUNNING
        assert _calls == {"before": 1}
        await env.advance(0.9)
        assert await handle.result() == ["before", "after"]
    assert acts.reasons == ["start"]  # one activation: no park, no wake-up, no replay


async def test_a_short_retry_backoff_waits_in_place_too() -> None:
    acts = Activations()
    async with FlowTestEnv(inline_backoff_max=1.0, interceptors=[acts]) as env:
        handle = await env.start(retried)
        await env.run_until_idle()
        assert (await env.client.get(handle.run_id)).status is RunStatus.RUNNING
        assert _calls == {"flaky": 1}
        await env.advance(0.5)
        assert await handle.result() == "ok"
    assert acts.reasons == ["start"]


async def test_a_jump_past_the_lease_ttl_does_not_recover_a_run_waiting_in_place() -> None:
    acts = Activations()
    async with FlowTestEnv(inline_backoff_max=1.0, lease_ttl=30.0, interceptors=[acts]) as env:
        handle = await env.start(nap)
        await env.run_until_idle()
        await env.advance(3600)  # the worker lived through the hour: its lease did too
        assert await handle.result() == ["before", "after"]
    assert acts.reasons == ["start"]
    assert _calls == {"before": 1, "after": 1}


async def test_the_envs_default_parks_every_sleep_on_a_durable_timer() -> None:
    acts = Activations()
    async with FlowTestEnv(interceptors=[acts]) as env:
        handle = await env.start(nap)
        await env.run_until_idle()
        assert (await env.client.get(handle.run_id)).status is not RunStatus.RUNNING
        await env.advance(0.9)
        assert await handle.result() == ["before", "after"]
    assert acts.reasons == ["start", "wake_up"]


async def test_a_worker_on_a_fake_clock_takes_the_production_path() -> None:
    clock = FakeClock().start()
    store = open_store("memory://")
    acts = Activations()
    worker = Worker(store, [nap], clock=clock, interceptors=[acts])
    try:
        client = worker.engine.client()
        handle = await client.start(nap)
        await worker.run_until_idle()
        assert (await client.get(handle.run_id)).status is RunStatus.RUNNING
        clock.advance(0.9)
        await worker.run_until_idle()
        assert await handle.result() == ["before", "after"]
    finally:
        await worker.stop()
        clock.stop()
        await store.close()
    assert acts.reasons == ["start"]


def test_inline_backoff_max_is_checked() -> None:
    with pytest.raises(ValueError, match="inline_backoff_max"):
        FlowTestEnv(inline_backoff_max=-1)
