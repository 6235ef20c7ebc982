"""Replay determinism: divergence detection, replay awareness, journaled time and ids."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sdk import current_run, flow, now, step, uuid4, wait_for
from sdk.engine._aio import FlowLoop
from sdk.errors import NonDeterminismError, RunFailed
from stores.redis import RedisStore
from testing import FakeClock, FlowTestEnv

RUNS: Counter[str] = Counter()
SEEN: list[Any] = []
# Which version of the flow code is "deployed": "v1" (original) or a changed variant.
CODE: dict[str, str] = {"version": "v1"}

START = datetime(2030, 3, 1, tzinfo=UTC)


@pytest.fixture(autouse=True, name="_reset")
def reset_fixture() -> None:
    RUNS.clear()
    SEEN.clear()
    CODE["version"] = "v1"


@step
async def reserve() -> str:
    RUNS["reserve"] += 1
    return "reserved"


@step
async def charge() -> str:
    RUNS["charge"] += 1
    return "charged"


@step
async def bill() -> str:
    RUNS["bill"] += 1
    return "billed"


@flow(name="tests.determinism.order")
async def order() -> str:
    await reserve()
    version = CODE["version"]
    if version == "v1":
        await charge()
    elif version == "renamed":
        await bill()  # the step that used to be `charge`
    elif version == "renamed_caught":
        try:
            await bill()
        except Exception as exc:  # a flow that swallows the divergence
            SEEN.append(exc)
    elif version == "wait_instead":
        await wait_for("charge")
    payload = await wait_for("go")
    return f"done:{payload}"


async def diverge(env: FlowTestEnv, version: str) -> RunFailed:
    """Record v1 up to its wait, deploy `version`, wake the run; return its failure."""
    handle = await env.start(order, run_id="ord-1")
    await env.run_until_idle()
    assert await handle.status() == "waiting_for_signal"
    CODE["version"] = version
    await env.client.signal(handle.run_id, "go", "yes")
    await env.run_until_idle()
    with pytest.raises(RunFailed) as info:
        await handle.result()
    return info.value


async def test_changed_code_raises_non_determinism_error_naming_both_keys(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(store=store, sticky_cache=0) as env:  # every wake-up replays
        failure = await diverge(env, "renamed")
    err = failure.error
    assert err.type == "sdk.errors:NonDeterminismError"
    assert err.reason == "non_determinism"
    assert "charge#1" in err.message and "bill#1" in err.message
    assert err.step_key == "bill#1"
    assert RUNS == {"reserve": 1, "charge": 1}  # nothing ran on the diverged replay


async def test_the_run_fails_on_non_determinism_even_when_the_flow_catches_it() -> None:
    async with FlowTestEnv(sticky_cache=0) as env:  # every wake-up replays
        failure = await diverge(env, "renamed_caught")
    assert failure.error.reason == "non_determinism"
    [caught] = SEEN
    assert isinstance(caught, NonDeterminismError)
    assert (caught.run_id, caught.position) == ("ord-1", 1)
    assert (caught.recorded, caught.called) == ("charge#1", "bill#1")
    assert RUNS["bill"] == 0


async def test_a_wait_where_a_step_was_recorded_also_diverges() -> None:
    async with FlowTestEnv(sticky_cache=0) as env:  # every wake-up replays
        failure = await diverge(env, "wait_instead")
    assert failure.error.reason == "non_determinism"
    assert "charge#1" in failure.error.message
    assert "~wait:charge#1" in failure.error.message


async def test_a_run_that_diverged_completes_when_resumed_with_fixed_code() -> None:
    async with FlowTestEnv(sticky_cache=0) as env:  # every wake-up replays
        await diverge(env, "renamed")
        CODE["version"] = "v1"  # the fix is deployed
        handle = await env.client.resume("ord-1")
        await env.run_until_idle()
        # The signal that woke the diverged activation was not consumed by it.
        assert await handle.result() == "done:yes"
    assert RUNS == {"reserve": 1, "charge": 1}


def test_non_determinism_error_for_a_key_recorded_elsewhere() -> None:
    err = NonDeterminismError("r-9", 4, None, "charge#2")
    assert err.recorded is None
    assert "charge#2" in str(err) and "another position" in str(err)


# -- replay awareness ----------------------------------------------------------------

log = logging.getLogger("tests.determinism")


@flow(name="tests.determinism.aware")
async def aware(customer: str) -> str:
    ctx = current_run()
    SEEN.append(("start", ctx.is_replaying))
    ctx.logger.info("welcoming %s", customer)
    await reserve()
    SEEN.append(("after reserve", ctx.is_replaying))
    await wait_for("go")
    SEEN.append(("after wait", ctx.is_replaying))
    ctx.logger.info("finishing %s", customer)
    await charge()
    return f"{ctx.run_id}|{ctx.flow}|{ctx.tenant_id}"


async def test_current_run_knows_when_it_is_replaying() -> None:
    async with FlowTestEnv(sticky_cache=0) as env:  # every wake-up replays
        handle = await env.start(aware, "ada", run_id="aw-1", tenant_id="acme")
        await env.run_until_idle()
        await env.client.signal(handle.run_id, "go")
        await env.run_until_idle()
        assert await handle.result() == "aw-1|tests.determinism.aware|acme"
    assert SEEN == [
        ("start", False),
        ("after reserve", False),
        ("start", True),
        ("after reserve", True),
        ("after wait", False),
    ]


async def test_the_run_logger_stays_quiet_while_replaying(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="steadyflow.flow")
    async with FlowTestEnv() as env:
        handle = await env.start(aware, "bea", run_id="aw-2")
        await env.run_until_idle()
        await env.client.signal(handle.run_id, "go")
        await env.run_until_idle()
        await handle.result()
    lines = [r for r in caplog.records if r.name == "steadyflow.flow"]
    assert [r.getMessage() for r in lines] == ["welcoming bea", "finishing bea"]
    assert all(getattr(r, "run_id", None) == "aw-2" for r in lines)


# -- journaled now() and uuid4() -------------------------------------------------------


@flow(name="tests.determinism.values")
async def values() -> list[Any]:
    stamp = await now()
    ident = await uuid4()
    SEEN.append((stamp, ident))
    await wait_for("go")
    return [stamp.isoformat(), str(ident)]


async def test_now_and_uuid4_replay_the_same_values() -> None:
    async with FlowTestEnv(clock=FakeClock(START), sticky_cache=0) as env:  # every wake-up replays
        handle = await env.start(values)
        await env.run_until_idle()
        await env.advance(timedelta(hours=5))
        await env.client.signal(handle.run_id, "go")
        await env.run_until_idle()
        result = await handle.result()
    (first_time, first_id), (second_time, second_id) = SEEN
    assert first_time == second_time == START  # not START + 5h
    assert first_time.tzinfo is not None
    assert isinstance(first_id, uuid.UUID) and first_id.version == 4
    assert first_id == second_id
    assert result == [START.isoformat(), str(first_id)]


@flow(name="tests.determinism.two_ids")
async def two_ids() -> list[str]:
    return [str(await uuid4()), str(await uuid4())]


async def test_uuid4_gives_a_new_value_per_call() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(two_ids)
        await env.run_until_idle()
        first, second = await handle.result()
    assert first != second


# -- a call removed from the end of the flow ----------------------------------------

TAIL = {"steps": 2, "wait": True}


@step(name="tests.determinism.tail")
async def tail_step(n: int) -> int:
    return n


@flow(name="tests.determinism.tail_flow")
async def tail_flow() -> int:
    total = 0
    for i in range(TAIL["steps"]):
        total += await tail_step(i)
    if TAIL["wait"]:
        await wait_for("finish")
    return total


async def test_a_flow_that_returns_before_its_recorded_calls_fails_with_non_determinism() -> None:
    try:
        async with FlowTestEnv(sticky_cache=0) as env:  # every wake-up replays
            handle = await env.start(tail_flow)
            await env.run_until_idle()
            assert await handle.status() == "waiting_for_signal"
            TAIL.update(steps=1, wait=False)  # "deploy" code without the last step and wait
            await env.client.signal(handle.run_id, "finish")
            await env.run_until_idle()
            with pytest.raises(RunFailed) as info:
                await handle.result()
    finally:
        TAIL.update(steps=2, wait=True)
    assert info.value.error.reason == "non_determinism"
    assert "the flow returned before call #1" in info.value.error.message
    assert "tests.determinism.tail#2" in info.value.error.message


# -- replaying a call the journal delivers alone: without a round trip through the driver --

TRAIL: list[str] = []


@step(name="tests.determinism.mark")
async def mark(label: str) -> str:
    TRAIL.append(label)
    return label


async def side(n: int) -> list[str]:
    return [await mark(f"side{i}") for i in range(n)]


@flow(name="tests.determinism.mixed")
async def mixed() -> list[str]:
    out = [await mark("a"), await mark("b")]  # sequential: replayed inline
    helper = asyncio.create_task(side(2))  # interleaves with the main task
    out.append(await mark("c"))
    out += await asyncio.gather(mark("g1"), mark("g2"))
    out += await helper
    out.append(str(await wait_for("go")))
    out.append(await mark("d"))
    return out


async def test_a_replay_takes_the_live_path_whether_or_not_calls_are_delivered_inline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    expected = ["a", "b", "c", "g1", "g2", "side0", "side1", "x", "d"]
    results = []
    for inline in (True, False):
        if not inline:  # the driver delivers every round itself
            monkeypatch.setattr(FlowLoop, "quiet", lambda self: False)
        TRAIL.clear()
        async with FlowTestEnv() as env:
            handle = await env.start(mixed)
            await env.run_until_idle()
            live = list(TRAIL)
            await env.client.signal(handle.run_id, "go", "x")
            await env.run_until_idle()
            results.append(await handle.result(timeout=1))
            assert [*live, "d"] == TRAIL  # the replay ran no recorded step again
    assert results == [expected, expected]


@flow(name="tests.determinism.chain")
async def chain(n: int) -> int:
    for i in range(n):
        await mark(str(i))
    await wait_for("go")
    return n


async def test_a_sequential_replay_runs_in_a_few_rounds_not_one_per_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rounds = 0
    run_ready = FlowLoop.run_ready

    def counted(self: FlowLoop) -> None:
        nonlocal rounds
        rounds += 1
        run_ready(self)

    async with FlowTestEnv() as env:
        handle = await env.start(chain, 200)
        await env.run_until_idle()
        monkeypatch.setattr(FlowLoop, "run_ready", counted)
        await env.client.signal(handle.run_id, "go")
        await env.run_until_idle()
        assert await handle.result(timeout=1) == 200
    assert rounds < 5  # not one per replayed step
