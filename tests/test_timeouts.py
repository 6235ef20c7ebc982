"""Timeouts: a step attempt's (`@step(timeout=)`) and a run's (`@flow(timeout=)`)."""

from __future__ import annotations

import asyncio
import re
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from sdk import (
    Client,
    Reason,
    RetryPolicy,
    RunStatus,
    Worker,
    current_step,
    flow,
    step,
    wait_for,
)
from sdk.errors import (
    InvalidArgument,
    InvalidTransition,
    RunFailed,
    SteadyflowError,
    StepTimeout,
)
from stores.redis import RedisStore
from testing import FlowTestEnv

# What each step body saw, by label: "start:<attempt>", "cancelled", "end".
SEEN: defaultdict[str, list[str]] = defaultdict(list)
# Set when a step body has started (the test then moves the clock).
ENTERED: dict[str, asyncio.Event] = {}
# How many attempts of a label hang before one returns at once.
HANGS: defaultdict[str, int] = defaultdict(int)
# Set by a test to let a held step return.
RELEASE: dict[str, asyncio.Event] = {}


@pytest.fixture(autouse=True, name="_reset")
def reset_fixture() -> None:
    SEEN.clear()
    ENTERED.clear()
    HANGS.clear()
    RELEASE.clear()


def entered(label: str) -> asyncio.Event:
    return ENTERED.setdefault(label, asyncio.Event())


async def body(label: str) -> str:
    """A step body: hangs (until cancelled) while `HANGS[label]` says so."""
    SEEN[label].append(f"start:{current_step().attempt}")
    entered(label).set()
    if HANGS[label] > 0:
        HANGS[label] -= 1
        try:
            await asyncio.Event().wait()  # hung: only a cancel ends it
        except asyncio.CancelledError:
            SEEN[label].append("cancelled")
            raise
        SEEN[label].append("end")  # never reached
    return f"{label} done"


async def hang_then_advance(env: FlowTestEnv, label: str, seconds: float) -> None:
    """Run until idle while moving the clock `seconds` once `label`'s body runs."""
    busy = asyncio.create_task(env.run_until_idle())
    await entered(label).wait()
    ENTERED.pop(label)
    await env.advance(seconds)
    await busy


# -- step timeouts ------------------------------------------------------------------


@step(timeout=30)
async def slow_once() -> str:
    return await body("once")


@flow(name="tests.timeouts.no_policy")
async def no_policy() -> str:
    return await slow_once()


async def test_a_step_past_its_timeout_is_cancelled_and_fails_the_run(store: RedisStore) -> None:
    HANGS["once"] = 1
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(no_policy)
        await hang_then_advance(env, "once", 30)
        with pytest.raises(RunFailed) as info:
            await handle.result()
    assert SEEN["once"] == ["start:1", "cancelled"]  # cancelled, never finished
    err = info.value.error
    assert err.type == "sdk.errors:StepTimeout"
    assert err.step_key == "slow_once#1"
    assert err.reason == Reason.STEP_FAILED
    assert "'slow_once#1'" in err.message and "30 seconds" in err.message


async def test_a_step_does_not_time_out_before_its_deadline(store: RedisStore) -> None:
    HANGS["once"] = 1
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(no_policy)
        busy = asyncio.create_task(env.run_until_idle())
        await entered("once").wait()
        env.clock.advance(29.5)
        await asyncio.sleep(0)
        assert not busy.done()
        assert SEEN["once"] == ["start:1"]
        assert (await handle.status()) == RunStatus.RUNNING
        await env.advance(0.5)
        await busy
        assert (await handle.status()) == RunStatus.FAILED
    assert SEEN["once"] == ["start:1", "cancelled"]


@step(timeout=timedelta(seconds=10), retry=RetryPolicy(max_attempts=3, initial_interval=5))
async def slow_retried() -> str:
    return await body("retried")


@flow(name="tests.timeouts.retried")
async def retried() -> str:
    return await slow_retried()


async def test_a_timed_out_attempt_is_retried_and_the_next_one_succeeds(
    store: RedisStore,
) -> None:
    HANGS["retried"] = 1
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(retried)
        await hang_then_advance(env, "retried", 10)
        assert (await handle.status()) == RunStatus.WAITING_FOR_SIGNAL  # the retry backoff
        await env.advance(5)
        assert await handle.result() == "retried done"
        events = await env.client.events(handle.run_id)
    assert SEEN["retried"] == ["start:1", "cancelled", "start:2"]
    scheduled = [e for e in events if e.type == "step.retry_scheduled"]
    assert [e.data["type"] for e in scheduled] == ["sdk.errors:StepTimeout"]


async def test_a_step_that_times_out_every_attempt_exhausts_its_retries(
    store: RedisStore,
) -> None:
    HANGS["retried"] = 3
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(retried)
        await hang_then_advance(env, "retried", 10)
        for backoff in (5, 10):  # each retry's backoff fires a timer: the attempt hangs
            busy = asyncio.create_task(env.advance(backoff))
            await entered("retried").wait()
            ENTERED.pop("retried")
            await env.advance(10)  # its timeout
            await busy
        with pytest.raises(RunFailed) as info:
            await handle.result()
    assert info.value.error.type == "sdk.errors:StepTimeout"
    assert info.value.error.reason == Reason.RETRIES_EXHAUSTED
    assert SEEN["retried"].count("cancelled") == 3


@flow(name="tests.timeouts.caught")
async def caught() -> str:
    try:
        return await slow_once()
    except StepTimeout as exc:
        SEEN["caught"].append(f"{type(exc).__name__}|{exc}|{exc.step_key}|{exc.timeout}")
        await wait_for("go")  # a replay (after the signal) rebuilds the recorded failure
        return "gave up"


async def test_a_recorded_step_timeout_replays_identically(store: RedisStore) -> None:
    HANGS["once"] = 1
    async with FlowTestEnv(store=store, sticky_cache=0) as env:  # every wake-up replays
        handle = await env.start(caught)
        await hang_then_advance(env, "once", 30)
        assert (await handle.status()) == RunStatus.WAITING_FOR_SIGNAL
        await env.client.signal(handle.run_id, "go")
        await env.run_until_idle()
        assert await handle.result() == "gave up"
    live, replayed = SEEN["caught"]
    assert live == replayed
    assert live.startswith("StepTimeout|step 'slow_once#1' timed out")
    assert live.endswith("|slow_once#1|30.0") or live.endswith("|slow_once#1|30")
    assert SEEN["once"] == ["start:1", "cancelled"]  # not run again on replay


def test_step_timeout_is_a_timeout_error_and_an_sdk_error() -> None:
    exc = StepTimeout("charge#1", 2.5)
    assert isinstance(exc, TimeoutError)
    assert isinstance(exc, SteadyflowError)
    assert str(exc) == (
        "step 'charge#1' timed out: an attempt ran longer than its timeout of 2.5 seconds "
        "and was cancelled"
    )


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), "5", True, timedelta(0)])
def test_a_step_timeout_must_be_a_finite_positive_duration(bad: object) -> None:
    with pytest.raises(InvalidArgument, match="timeout"):

        @step(timeout=bad)  # type: ignore[call-overload,untyped-decorator]
        async def nope() -> None: ...


def test_a_step_timeout_needs_an_async_step() -> None:
    with pytest.raises(InvalidArgument, match="async def"):

        @step(timeout=1)
        def blocking() -> None: ...


# -- flow timeouts --------------------------------------------------------------------


@step
async def held() -> str:
    """Runs until the test releases it."""
    SEEN["held"].append("start")
    entered("held").set()
    await RELEASE.setdefault("held", asyncio.Event()).wait()
    SEEN["held"].append("end")
    return "held done"


@flow(name="tests.timeouts.bounded_step", timeout=60)
async def bounded_step() -> str:
    return await held()


@flow(name="tests.timeouts.bounded_wait", timeout=timedelta(minutes=1))
async def bounded_wait() -> str:
    SEEN["waited"].append("start")
    return str(await wait_for("go"))


@flow(name="tests.timeouts.quick", timeout=60)
async def quick() -> str:
    return "quick"


async def test_a_parked_run_fails_timed_out_at_its_deadline(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(bounded_wait)
        await env.run_until_idle()
        await env.advance(59)
        assert (await handle.status()) == RunStatus.WAITING_FOR_SIGNAL
        await env.advance(1)
        with pytest.raises(RunFailed) as info:
            await handle.result()
        run = await env.client.get(handle.run_id)
        types = [e.type for e in await env.client.events(handle.run_id)]
        # a signal now is refused: the run has ended
        with pytest.raises(InvalidTransition):
            await env.client.signal(handle.run_id, "go", 1)
    assert (run.status, run.reason) == (RunStatus.FAILED, Reason.TIMED_OUT)
    assert info.value.error.type == "builtins:TimeoutError"
    assert info.value.error.reason == "timed_out"
    assert "60 seconds" in info.value.error.message
    assert types[-1] == "run.failed"


async def test_a_flow_timeout_counts_from_the_start_not_the_creation(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(bounded_wait)
        env.clock.advance(600)  # queued ten minutes: no worker ran
        await env.run_until_idle()
        assert SEEN["waited"] == ["start"]
        await env.advance(59)
        assert (await handle.status()) == RunStatus.WAITING_FOR_SIGNAL
        await env.advance(1)
        assert (await handle.status()) == RunStatus.FAILED


async def test_a_flow_timeout_fails_a_run_whose_step_is_running(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(bounded_step)
        busy = asyncio.create_task(env.run_until_idle())
        await entered("held").wait()
        moving = asyncio.create_task(env.advance(60))
        # the run fails at its deadline while its step still runs...
        with pytest.raises(RunFailed):
            await handle.result()
        assert SEEN["held"] == ["start"]
        RELEASE["held"].set()  # ...and the step's late result is refused
        await moving
        await busy
        run = await env.client.get(handle.run_id)
        cps = await env.client.checkpoints(handle.run_id)
    assert (run.status, run.reason) == (RunStatus.FAILED, Reason.TIMED_OUT)
    assert SEEN["held"] == ["start", "end"]
    assert [c.kind for c in cps] == ["run_started", "run_finished"]  # the step never recorded


async def test_a_run_that_finishes_in_time_is_not_timed_out(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(quick)
        await env.run_until_idle()
        await env.advance(3600)
        assert await handle.result() == "quick"
        assert (await env.client.get(handle.run_id)).reason is None


async def test_a_resumed_timed_out_run_gets_its_whole_timeout_again(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(bounded_wait)
        await env.run_until_idle()
        await env.advance(60)
        assert (await handle.status()) == RunStatus.FAILED
        await env.client.resume(handle.run_id)
        await env.run_until_idle()
        assert (await handle.status()) == RunStatus.WAITING_FOR_SIGNAL
        await env.advance(59)
        await env.client.signal(handle.run_id, "go", 7)
        await env.run_until_idle()
        assert await handle.result() == "7"


@pytest.mark.parametrize("bad", [0, -5, float("inf"), "60", True, timedelta(0)])
def test_a_flow_timeout_must_be_a_finite_positive_duration(bad: object) -> None:
    with pytest.raises(InvalidArgument, match="timeout"):

        @flow(name="tests.timeouts.invalid", timeout=bad)  # type: ignore[call-overload,untyped-decorator]
        async def invalid() -> None: ...


# -- the docs ---------------------------------------------------------------------------

PAGE = Path(__file__).resolve().parent.parent / "docs" / "composition.md"


@pytest.mark.xdist_group("docs-composition")  # the snippets register flows once per process
async def test_the_timeouts_snippets_of_the_composition_page_run() -> None:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("\n## Timeouts\n")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end != -1 else len(text)]
    blocks = re.findall(r"^```python\n(.*?)^```$", section, re.S | re.M)
    assert len(blocks) == 2
    namespace: dict[str, Any] = {"__name__": "docs_composition_timeouts"}
    exec(compile("\n".join(blocks), str(PAGE), "exec"), namespace)
    await namespace["main"]()
    assert namespace["CALLS"] == ["tea", "tea"]


# -- the real clock ---------------------------------------------------------------------


@step(timeout=0.05)
async def hangs_on_the_real_clock() -> str:
    return await body("real")


@flow(name="tests.timeouts.real_clock")
async def real_clock() -> str:
    return await hangs_on_the_real_clock()


async def test_with_the_system_clock_the_event_loop_timer_enforces_a_step_timeout(
    store: RedisStore,
) -> None:
    HANGS["real"] = 1
    client = Client(store)
    worker = Worker(store, [real_clock], lease_ttl=30.0)
    handle = await client.start(real_clock)
    await worker.run_until_idle()  # returns: the hung attempt was cancelled
    with pytest.raises(RunFailed) as info:
        await handle.result()
    assert info.value.error.type == "sdk.errors:StepTimeout"
    assert SEEN["real"] == ["start:1", "cancelled"]
