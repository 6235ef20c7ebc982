"""Retry policies: attempt and failure budgets, reasons, durable counts, parked backoffs."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from typing import Any

import pytest

from sdk import RetryPolicy, current_step, flow, step, wait_for
from sdk.errors import InvalidArgument, RunFailed
from stores.redis import RedisStore
from testing import FlowTestEnv

# Attempt numbers (current_step().attempt) seen by each step, by label.
ATTEMPTS: defaultdict[str, list[int]] = defaultdict(list)
# How many times each label should still fail before succeeding.
FAILS_LEFT: Counter[str] = Counter()


@pytest.fixture(autouse=True, name="_reset")
def reset_fixture() -> None:
    ATTEMPTS.clear()
    FAILS_LEFT.clear()


class Flaky(Exception):
    """A transient failure."""


def attempt(label: str) -> None:
    """Note the attempt; fail while `FAILS_LEFT[label]` says so."""
    ATTEMPTS[label].append(current_step().attempt)
    if FAILS_LEFT[label] > 0:
        FAILS_LEFT[label] -= 1
        raise Flaky(f"{label} failed")


# -- no policy: run once ---------------------------------------------------------


@step
async def once() -> str:
    attempt("once")
    return "ok"


@flow(name="tests.retries.no_policy")
async def no_policy() -> str:
    return await once()


async def test_a_step_without_a_policy_runs_once_and_fails_the_run() -> None:
    FAILS_LEFT["once"] = 1
    async with FlowTestEnv() as env:
        handle = await env.start(no_policy)
        await env.run_until_idle()
        await env.advance(3600)
        with pytest.raises(RunFailed) as info:
            await handle.result()
    assert info.value.error.reason == "step_failed"
    assert info.value.error.step_key == "once#1"
    assert info.value.error.type == f"{Flaky.__module__}:Flaky"
    assert ATTEMPTS["once"] == [1]


# -- max_attempts ----------------------------------------------------------------

THREE = RetryPolicy(max_attempts=3, initial_interval=1.0, backoff=2.0)


@step(retry=THREE)
async def call_api() -> str:
    attempt("api")
    return "ok"


@flow(name="tests.retries.api")
async def api_flow() -> str:
    return await call_api()


async def test_retries_are_exhausted_after_max_attempts() -> None:
    FAILS_LEFT["api"] = 100
    async with FlowTestEnv() as env:
        handle = await env.start(api_flow)
        await env.run_until_idle()
        assert ATTEMPTS["api"] == [1]
        await env.advance(1)
        assert ATTEMPTS["api"] == [1, 2]
        await env.advance(2)
        with pytest.raises(RunFailed) as info:
            await handle.result()
        await env.advance(3600)  # nothing more happens
    assert ATTEMPTS["api"] == [1, 2, 3]
    err = info.value.error
    assert (err.reason, err.step_key, err.message) == (
        "retries_exhausted",
        "call_api#1",
        "api failed",
    )


async def test_a_step_that_recovers_within_its_budget_completes() -> None:
    FAILS_LEFT["api"] = 2
    async with FlowTestEnv() as env:
        handle = await env.start(api_flow)
        await env.run_until_idle()
        await env.advance(1)
        await env.advance(2)
        assert await handle.result() == "ok"
    assert ATTEMPTS["api"] == [1, 2, 3]


async def test_retry_backoff_grows_exponentially() -> None:
    FAILS_LEFT["api"] = 2
    async with FlowTestEnv() as env:
        handle = await env.start(api_flow)
        await env.run_until_idle()
        await env.advance(0.999)
        assert ATTEMPTS["api"] == [1]  # first backoff: 1s
        await env.advance(0.001)
        assert ATTEMPTS["api"] == [1, 2]
        await env.advance(1.999)
        assert ATTEMPTS["api"] == [1, 2]  # second backoff: 2s
        await env.advance(0.001)
        assert await handle.result() == "ok"


async def test_a_long_backoff_parks_the_run_and_holds_no_worker_slot() -> None:
    FAILS_LEFT["api"] = 1
    async with FlowTestEnv(concurrency=1) as env:
        parked = await env.start(api_flow)
        await env.run_until_idle()
        assert await parked.status() == "waiting_for_signal"

        # With one slot, another run still gets served while the first waits.
        other = await env.start(no_policy)
        await env.run_until_idle()
        assert await other.result() == "ok"
        assert await parked.status() == "waiting_for_signal"
        assert ATTEMPTS["api"] == [1]

        await env.advance(1)
        assert await parked.result() == "ok"


async def test_retry_attempt_count_is_durable_across_a_crash(store: RedisStore) -> None:
    FAILS_LEFT["api"] = 100
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(api_flow)
        await env.run_until_idle()
        await env.advance(1)
        assert ATTEMPTS["api"] == [1, 2]

        env.crash_at("call_api#1", when="before")  # the worker dies before attempt 3
        await env.advance(2)
        assert ATTEMPTS["api"] == [1, 2]
        assert await handle.status() == "running"

        await env.advance(env.worker.lease_ttl + 1)

        with pytest.raises(RunFailed) as info:
            await handle.result()
    assert info.value.error.reason == "retries_exhausted"
    assert ATTEMPTS["api"] == [1, 2, 3]  # the crash did not reset the count


async def test_resume_after_exhaustion_gives_the_step_a_fresh_budget() -> None:
    FAILS_LEFT["api"] = 4  # three attempts fail; after the resume, one more fails
    async with FlowTestEnv() as env:
        handle = await env.start(api_flow)
        await env.run_until_idle()
        await env.advance(1)
        await env.advance(2)
        assert await handle.status() == "failed"

        await env.client.resume(handle.run_id)
        await env.run_until_idle()
        await env.advance(1)
        assert await handle.result() == "ok"
    assert ATTEMPTS["api"] == [1, 2, 3, 1, 2]


@step
async def steady(label: str) -> str:
    await asyncio.sleep(0)  # still running when its sibling's backoff parks the run
    attempt(label)
    return label


@flow(name="tests.retries.gathered")
async def gathered() -> list[str]:
    return list(await asyncio.gather(call_api(), steady("x"), steady("y")))


async def test_a_backoff_inside_gather_parks_the_run_after_its_siblings_record() -> None:
    FAILS_LEFT["api"] = 1
    async with FlowTestEnv() as env:
        handle = await env.start(gathered)
        await env.run_until_idle()
        assert await handle.status() == "waiting_for_signal"
        assert (ATTEMPTS["x"], ATTEMPTS["y"]) == ([1], [1])
        await env.advance(1)
        assert await handle.result() == ["ok", "x", "y"]
    assert (ATTEMPTS["api"], ATTEMPTS["x"], ATTEMPTS["y"]) == ([1, 2], [1], [1])


# -- non_retryable ---------------------------------------------------------------


@step(retry=RetryPolicy(max_attempts=5, non_retryable=(PermissionError,)))
async def guarded(kind: str) -> str:
    ATTEMPTS[kind].append(current_step().attempt)
    if kind == "denied":
        raise PermissionError("no access")
    raise Flaky("transient")


@flow(name="tests.retries.guarded")
async def guarded_flow(kind: str) -> str:
    return await guarded(kind)


async def test_a_non_retryable_error_fails_the_step_at_once() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(guarded_flow, "denied")
        await env.run_until_idle()
        await env.advance(3600)
        with pytest.raises(RunFailed) as info:
            await handle.result()
    assert ATTEMPTS["denied"] == [1]
    err = info.value.error
    assert (err.reason, err.type) == ("non_retryable", "builtins:PermissionError")


# -- flow policy, step policy, run-wide budget -----------------------------------


@step
async def plain_step(label: str) -> str:
    attempt(label)
    return label


@step(retry=RetryPolicy(max_attempts=1))
async def strict_step(label: str) -> str:
    attempt(label)
    return label


@flow(name="tests.retries.flow_policy", retry=RetryPolicy(max_attempts=2, initial_interval=5))
async def flow_policy(which: str) -> str:
    if which == "strict":
        return await strict_step("strict")
    return await plain_step("plain")


async def test_the_flow_policy_is_the_default_for_its_steps() -> None:
    FAILS_LEFT["plain"] = 100
    async with FlowTestEnv() as env:
        handle = await env.start(flow_policy, "plain")
        await env.run_until_idle()
        await env.advance(5)
        with pytest.raises(RunFailed) as info:
            await handle.result()
    assert ATTEMPTS["plain"] == [1, 2]
    assert info.value.error.reason == "retries_exhausted"


async def test_a_step_policy_overrides_the_flow_policy() -> None:
    FAILS_LEFT["strict"] = 100
    async with FlowTestEnv() as env:
        handle = await env.start(flow_policy, "strict")
        await env.run_until_idle()
        with pytest.raises(RunFailed) as info:
            await handle.result()
    assert ATTEMPTS["strict"] == [1]
    assert info.value.error.reason == "retries_exhausted"


@flow(
    name="tests.retries.budget",
    retry=RetryPolicy(max_attempts=5, initial_interval=1, backoff=1, max_failures=3),
)
async def budget_flow() -> str:
    await plain_step("first")
    await plain_step("second")
    return "done"


async def test_the_run_wide_failure_budget_ends_retries_across_steps() -> None:
    FAILS_LEFT["first"] = 2  # two failures recorded, then success
    FAILS_LEFT["second"] = 100
    async with FlowTestEnv() as env:
        handle = await env.start(budget_flow)
        await env.run_until_idle()
        for _ in range(10):
            await env.advance(1)
        with pytest.raises(RunFailed) as info:
            await handle.result()
    assert ATTEMPTS["first"] == [1, 2, 3]
    assert ATTEMPTS["second"] == [1]  # the third failure of the run was the last
    err = info.value.error
    assert (err.reason, err.step_key) == ("failure_budget_exhausted", "plain_step#2")


@flow(name="tests.retries.caught")
async def caught_flow() -> str:
    try:
        await call_api()
    except Flaky as exc:
        await wait_for("ack")
        return f"gave up: {exc}"
    return "ok"


async def test_a_flow_can_catch_an_exhausted_step_and_continue() -> None:
    FAILS_LEFT["api"] = 100
    async with FlowTestEnv() as env:
        handle = await env.start(caught_flow)
        await env.run_until_idle()
        await env.advance(1)
        await env.advance(2)
        assert await handle.status() == "waiting_for_signal"
        await env.client.signal(handle.run_id, "ack")
        await env.run_until_idle()  # replay re-raises the recorded failure
        assert await handle.result() == "gave up: api failed"
    assert ATTEMPTS["api"] == [1, 2, 3]


# -- the policy itself -----------------------------------------------------------


def test_retry_policy_delay_is_exponential_and_capped() -> None:
    policy = RetryPolicy(initial_interval=1.0, backoff=3.0, max_interval=20.0)
    assert [policy.delay(n) for n in (1, 2, 3, 4)] == [1.0, 3.0, 9.0, 20.0]


def test_retry_policy_jitter_stays_within_its_fraction() -> None:
    policy = RetryPolicy(initial_interval=10.0, backoff=1.0, jitter=0.5)
    delays = {policy.delay(1) for _ in range(200)}
    assert all(10.0 <= d <= 15.0 for d in delays)
    assert len(delays) > 1


def test_retry_policy_verdicts() -> None:
    policy = RetryPolicy(max_attempts=3, max_failures=5, non_retryable=[KeyError])
    assert policy.non_retryable == (KeyError,)
    assert policy.verdict(ValueError(), 1, 1) is None
    assert policy.verdict(KeyError(), 1, 1) == "non_retryable"
    assert policy.verdict(ValueError(), 3, 3) == "retries_exhausted"
    assert policy.verdict(ValueError(), 1, 5) == "failure_budget_exhausted"


@pytest.mark.parametrize(
    "kwargs",
    [{"max_attempts": 0}, {"initial_interval": -1}, {"backoff": 0.5}, {"jitter": 2}],
    ids=["attempts", "interval", "backoff", "jitter"],
)
def test_retry_policy_rejects_invalid_settings(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_the_backoff_never_overflows_however_many_failures() -> None:
    # 2.0 ** 1024 overflows a float: a policy with many attempts (the engine's own
    # deliveries of a child's end use a million) waits max_interval, never raises
    many = RetryPolicy(max_attempts=1_000_000, initial_interval=0.5, max_interval=60.0)
    assert [many.delay(n) for n in (1, 2, 8, 1025, 2000, 10**6)] == [
        0.5, 1.0, 60.0, 60.0, 60.0, 60.0,
    ]  # fmt: skip
    assert RetryPolicy(max_attempts=5000, initial_interval=0).delay(3000) == 0.0


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"max_attempts": [1]}, "max_attempts must be an int >= 1"),
        ({"max_attempts": 0}, "max_attempts must be an int >= 1"),
        ({"max_failures": True}, "max_failures must be an int >= 1"),
        ({"initial_interval": float("inf")}, "initial_interval must be a finite number"),
        ({"max_interval": float("nan")}, "max_interval must be a finite number"),
        ({"backoff": 0.5}, "backoff must be a finite number from 1"),
        ({"jitter": 2}, "jitter must be a finite number from 0 to 1"),
    ],
)
def test_a_bad_retry_policy_is_refused_naming_the_field(given: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidArgument, match=f"RetryPolicy: {named}"):
        RetryPolicy(**given)
