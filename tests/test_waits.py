"""Waits, signals, human decisions, timeouts and durable sleeps."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sdk import Decision, current_step, flow, now, sleep, sleep_until, step, uuid4, wait_for
from sdk.errors import (
    InvalidTransition,
    NotInRunError,
    NotWaiting,
    RunFailed,
    SerializationError,
    WaitTimeout,
)
from stores.redis import RedisStore
from testing import FakeClock, FlowTestEnv

RUNS: Counter[str] = Counter()
SEEN: list[Any] = []

START = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.fixture(autouse=True, name="_reset")
def reset_fixture() -> None:
    RUNS.clear()
    SEEN.clear()


@step
async def mark(label: str) -> str:
    RUNS[label] += 1
    return label


# -- signals ------------------------------------------------------------------------


@flow(name="tests.waits.wait_once")
async def wait_once() -> Any:
    await mark("before")
    payload = await wait_for("go")
    await mark("after")
    return payload


async def test_a_signal_sent_before_the_wait_is_kept(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(wait_once)
        assert await env.client.signal(handle.run_id, "go", {"ok": True}) is True
        assert await handle.status() == "pending"
        await env.run_until_idle()
        assert await handle.result() == {"ok": True}
    assert RUNS == {"before": 1, "after": 1}


async def test_a_signal_wakes_a_waiting_run() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(wait_once)
        await env.run_until_idle()
        assert await handle.status() == "waiting_for_signal"
        assert RUNS == {"before": 1}

        await env.client.signal(handle.run_id, "go", [1, "two"])
        await env.run_until_idle()

        assert await handle.result() == [1, "two"]
        assert RUNS == {"before": 1, "after": 1}


async def test_a_signal_with_another_name_does_not_wake_the_wait() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(wait_once)
        await env.run_until_idle()
        await env.client.signal(handle.run_id, "stop", 1)
        await env.run_until_idle()
        assert await handle.status() == "waiting_for_signal"
        assert RUNS == {"before": 1}


@flow(name="tests.waits.wait_three")
async def wait_three() -> list[Any]:
    return [await wait_for("item"), await wait_for("item"), await wait_for("item")]


async def test_signals_of_one_name_are_consumed_in_order() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(wait_three)
        await env.client.signal(handle.run_id, "item", "first")
        await env.client.signal(handle.run_id, "item", "second")
        await env.run_until_idle()
        assert await handle.status() == "waiting_for_signal"
        await env.client.signal(handle.run_id, "item", "third")
        await env.run_until_idle()
        assert await handle.result() == ["first", "second", "third"]


@flow(name="tests.waits.two_waits")
async def two_waits() -> list[Any]:
    return list(await asyncio.gather(wait_for("a"), wait_for("b", timeout=100)))


async def test_gathered_waits_each_take_their_own_signal() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(two_waits)
        await env.run_until_idle()
        await env.client.signal(handle.run_id, "b", "bee")
        await env.run_until_idle()
        assert await handle.status() == "waiting_for_signal"
        await env.advance(100)  # b was consumed already: its deadline no longer matters
        assert await handle.status() == "waiting_for_signal"
        await env.client.signal(handle.run_id, "a", "ay")
        await env.run_until_idle()
        assert await handle.result() == ["ay", "bee"]


@flow(name="tests.waits.wait_twice")
async def wait_twice() -> list[Any]:
    first = await wait_for("pay")
    try:
        second = await wait_for("pay", timeout=60)
    except WaitTimeout:
        second = None
    return [first, second]


async def test_a_duplicate_dedup_id_is_delivered_once(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(wait_twice)
        assert await env.client.signal(handle.run_id, "pay", "a", dedup_id="evt-1") is True
        assert await env.client.signal(handle.run_id, "pay", "b", dedup_id="evt-1") is False
        await env.run_until_idle()
        # The first signal was consumed; its dedup id is still remembered.
        assert await env.client.signal(handle.run_id, "pay", "c", dedup_id="evt-1") is False
        assert await handle.status() == "waiting_for_signal"

        await env.advance(60)

        assert await handle.result() == ["a", None]


@flow(name="tests.waits.paid_once")
async def paid_once() -> Any:
    return await wait_for("pay")


async def test_a_duplicate_dedup_id_after_the_run_finished_is_answered_as_a_duplicate(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(paid_once)
        assert await env.client.signal(handle.run_id, "pay", "a", dedup_id="evt-1") is True
        await env.run_until_idle()
        assert await handle.result() == "a"  # the signal finished the run
        events = await env.client.events(handle.run_id)

        # a retried webhook: the same delivery again, after the run completed
        assert await env.client.signal(handle.run_id, "pay", "a", dedup_id="evt-1") is False

        assert await env.client.events(handle.run_id) == events  # nothing written
        with pytest.raises(InvalidTransition):  # a new signal to a finished run is refused
            await env.client.signal(handle.run_id, "pay", "b", dedup_id="evt-2")


async def test_distinct_dedup_ids_are_all_delivered() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(wait_twice)
        assert await env.client.signal(handle.run_id, "pay", "a", dedup_id="evt-1")
        assert await env.client.signal(handle.run_id, "pay", "b", dedup_id="evt-2")
        await env.run_until_idle()
        assert await handle.result() == ["a", "b"]


# -- human decisions ----------------------------------------------------------------


@flow(name="tests.waits.approval")
async def approval() -> Decision:
    decision: Decision = await wait_for("manager", human=True)
    SEEN.append(decision)
    return decision


async def test_a_human_approval_resumes_the_run_with_a_decision() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(approval)
        await env.run_until_idle()
        assert await handle.status() == "waiting_for_human"

        await env.client.approve(
            handle.run_id, "manager", actor="alice", reason="looks fine", payload={"limit": 5}
        )
        await env.run_until_idle()

        decision = await handle.result()
    assert decision == Decision(
        approved=True, actor="alice", reason="looks fine", payload={"limit": 5}
    )
    assert [decision] == SEEN
    assert type(SEEN[0]) is Decision


async def test_a_human_denial_resumes_the_run_with_a_negative_decision() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(approval)
        await env.run_until_idle()
        await env.client.deny(handle.run_id, "manager", actor="bob", reason="too expensive")
        await env.run_until_idle()
        assert await handle.result() == Decision(False, "bob", "too expensive", None)


async def test_a_plain_signal_does_not_satisfy_a_human_wait() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(approval)
        await env.run_until_idle()
        await env.client.signal(handle.run_id, "manager", {"approved": True})
        await env.run_until_idle()
        assert await handle.status() == "waiting_for_human"
        assert SEEN == []

        await env.client.approve(handle.run_id, "manager", actor="carol")
        await env.run_until_idle()
        assert await handle.result() == Decision(True, "carol")


async def test_an_approval_before_the_run_waits_for_it_is_refused_and_changes_nothing() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(approval)
        with pytest.raises(NotWaiting, match="'manager'"):
            await env.client.approve(handle.run_id, "manager", actor="dan")
        await env.run_until_idle()
        assert await handle.status() == "waiting_for_human"  # no decision was kept
        await env.client.approve(handle.run_id, "manager", actor="dan")
        await env.run_until_idle()
        assert await handle.result() == Decision(True, "dan")


async def test_a_decision_for_another_wait_name_is_refused() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(approval)
        await env.run_until_idle()
        with pytest.raises(NotWaiting):
            await env.client.deny(handle.run_id, "someone-else", actor="dan")
        assert await handle.status() == "waiting_for_human"


# -- timeouts ---------------------------------------------------------------------


@flow(name="tests.waits.with_timeout")
async def with_timeout() -> str:
    try:
        outcome = await wait_for("reply", timeout=60)
    except WaitTimeout as exc:
        SEEN.append((type(exc), isinstance(exc, TimeoutError), exc.name, exc.step_key, str(exc)))
        outcome = "timed out"
    await mark("after-wait")
    await wait_for("finish")
    await mark("final")
    return str(outcome)


async def test_a_wait_timeout_raises_wait_timeout_at_its_deadline() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(with_timeout)
        await env.run_until_idle()
        await env.advance(59)
        assert await handle.status() == "waiting_for_signal"
        assert SEEN == []

        await env.advance(1)

        assert len(SEEN) == 1
        exc_type, is_timeout_error, name, key, message = SEEN[0]
        assert exc_type is WaitTimeout
        assert is_timeout_error
        assert (name, key) == ("reply", "~wait:reply#1")
        assert "reply" in message
        assert RUNS == {"after-wait": 1}
        assert await handle.status() == "waiting_for_signal"  # now on "finish"


async def test_a_wait_timeout_is_raised_identically_on_replay_after_a_crash() -> None:
    async with FlowTestEnv(sticky_cache=0) as env:  # every wake-up replays
        handle = await env.start(with_timeout)
        await env.run_until_idle()
        await env.advance(60)
        # A late reply changes nothing: the timeout is recorded.
        await env.client.signal(handle.run_id, "reply", "late")
        env.crash_at("mark#2", when="before")  # mark("final")
        await env.client.signal(handle.run_id, "finish")
        await env.run_until_idle()
        assert await handle.status() == "running"  # crashed

        await env.advance(31)

        assert await handle.result() == "timed out"
    assert RUNS == {"after-wait": 1, "final": 1}
    # live timeout, replay before the crash, replay after the recovery: all the same
    assert len(SEEN) == 3
    assert len(set(SEEN)) == 1


async def test_a_signal_beats_an_expired_deadline_it_arrived_before() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(with_timeout)
        await env.run_until_idle()
        env.clock.advance(120)  # past the deadline, but no worker has looked yet
        await env.client.signal(handle.run_id, "reply", "in time")
        await env.run_until_idle()
        await env.client.signal(handle.run_id, "finish")
        await env.run_until_idle()
        assert await handle.result() == "in time"
    assert SEEN == []


@flow(name="tests.waits.timedelta_timeout")
async def timedelta_timeout() -> str:
    try:
        await wait_for("reply", timeout=timedelta(hours=2))
    except TimeoutError:  # WaitTimeout is a TimeoutError
        return "timeout"
    return "reply"


async def test_a_timedelta_timeout_fires_at_its_deadline() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(timedelta_timeout)
        await env.run_until_idle()
        await env.advance(timedelta(hours=2) - timedelta(seconds=1))
        assert await handle.status() == "waiting_for_signal"
        await env.advance(1)
        assert await handle.result() == "timeout"


@flow(name="tests.waits.uncaught_timeout")
async def uncaught_timeout() -> None:
    await wait_for("reply", timeout=5)


async def test_an_uncaught_wait_timeout_fails_the_run() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(uncaught_timeout)
        await env.run_until_idle()
        await env.advance(5)
        with pytest.raises(RunFailed) as info:
            await handle.result()
    assert info.value.error.type == "sdk.errors:WaitTimeout"
    assert info.value.error.step_key == "~wait:reply#1"


@flow(name="tests.waits.zero_timeout")
async def zero_timeout() -> str:
    try:
        return str(await wait_for("x", timeout=0))
    except WaitTimeout:
        return "timeout"


async def test_a_zero_timeout_takes_a_kept_signal_or_times_out_at_once() -> None:
    async with FlowTestEnv() as env:
        empty = await env.start(zero_timeout)
        kept = await env.start(zero_timeout)
        await env.client.signal(kept.run_id, "x", "kept")
        await env.run_until_idle()
        assert await empty.result() == "timeout"
        assert await kept.result() == "kept"


@flow(name="tests.waits.human_timeout")
async def human_timeout() -> str:
    try:
        decision = await wait_for("ok", human=True, timeout=timedelta(days=2))
    except WaitTimeout:
        return "nobody answered"
    return "approved" if decision.approved else "denied"


async def test_a_human_wait_can_time_out() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(human_timeout)
        await env.run_until_idle()
        await env.advance(timedelta(days=2) - timedelta(seconds=1))
        assert await handle.status() == "waiting_for_human"
        await env.advance(1)
        assert await handle.result() == "nobody answered"


async def test_mailboxes_of_runs_whose_ids_contain_colons_stay_apart() -> None:
    async with FlowTestEnv() as env:
        # Keys built as "{run id}:s:{name}" would make run "a" + signal "b:s:go"
        # collide with run "a:s:b" + signal "go".
        inner = await env.start(wait_once, run_id="a:s:b")
        outer = await env.start(wait_once, run_id="a")
        await env.run_until_idle()
        await env.client.signal("a", "b:s:go", "for a")
        await env.run_until_idle()
        assert await inner.status() == "waiting_for_signal"
        assert await outer.status() == "waiting_for_signal"
        await env.client.signal("a:s:b", "go", "for a:s:b")
        await env.run_until_idle()
        assert await inner.result() == "for a:s:b"
        assert await outer.status() == "waiting_for_signal"


async def test_an_unserializable_signal_payload_is_rejected() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(wait_once)
        with pytest.raises(SerializationError, match="signal 'go'"):
            await env.client.signal(handle.run_id, "go", object())
        await env.run_until_idle()
        assert await handle.status() == "waiting_for_signal"


@flow(name="tests.waits.swallowing")
async def swallowing() -> Any:
    try:
        payload = await wait_for("go")
    except Exception:  # must not catch the suspension
        SEEN.append("swallowed")
        payload = "swallowed"
    return payload


async def test_except_exception_around_wait_for_does_not_swallow_the_suspension() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(swallowing)
        await env.run_until_idle()
        assert await handle.status() == "waiting_for_signal"
        assert SEEN == []
        await env.client.signal(handle.run_id, "go", "real")
        await env.run_until_idle()
        assert await handle.result() == "real"
    assert SEEN == []


def test_the_suspension_cannot_be_constructed_by_user_code() -> None:
    from sdk.engine._machine import _Evicted as _Suspend

    assert not issubclass(_Suspend, Exception)
    with pytest.raises(TypeError):
        _Suspend(object())


# -- sleeps -------------------------------------------------------------------------


@flow(name="tests.waits.nap")
async def nap(seconds: float) -> str:
    await mark("before")
    await sleep(seconds)
    await mark("after")
    return "rested"


async def test_a_sleep_fires_only_at_its_deadline(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(nap, 3600)
        await env.run_until_idle()
        assert await handle.status() == "waiting_for_signal"

        await env.advance(3599)
        assert await handle.status() == "waiting_for_signal"
        assert RUNS == {"before": 1}

        await env.advance(1)
        assert await handle.result() == "rested"
        assert RUNS == {"before": 1, "after": 1}


async def test_a_30_day_sleep_completes_in_milliseconds_of_wall_time() -> None:
    loop = asyncio.get_running_loop()  # its clock stays real under FakeClock
    began = loop.time()
    async with FlowTestEnv() as env:
        handle = await env.start(nap, timedelta(days=30).total_seconds())
        await env.run_until_idle()
        await env.advance(timedelta(days=30))
        assert await handle.result() == "rested"
        record = await env.client.get(handle.run_id)
    assert record.finished_at is not None
    assert record.finished_at - record.created_at == timedelta(days=30)
    assert loop.time() - began < 10  # generous: it must not really sleep


@flow(name="tests.waits.nap_timedelta")
async def nap_timedelta() -> datetime:
    await sleep(timedelta(minutes=90))
    return await now()


async def test_sleep_accepts_a_timedelta() -> None:
    async with FlowTestEnv(clock=FakeClock(START)) as env:
        handle = await env.start(nap_timedelta)
        await env.run_until_idle()
        await env.advance(timedelta(minutes=89))
        assert await handle.status() == "waiting_for_signal"
        await env.advance(timedelta(minutes=1))
        assert await handle.result() == START + timedelta(minutes=90)


WAKE_AT = START + timedelta(days=2, hours=3)


@flow(name="tests.waits.until")
async def until(when: datetime) -> datetime:
    await sleep_until(when)
    return await now()


async def test_sleep_until_fires_at_the_given_time() -> None:
    async with FlowTestEnv(clock=FakeClock(START)) as env:
        handle = await env.start(until, WAKE_AT)
        await env.run_until_idle()
        await env.advance((WAKE_AT - START) - timedelta(seconds=1))
        assert await handle.status() == "waiting_for_signal"
        await env.advance(1)
        assert await handle.result() == WAKE_AT


async def test_sleep_until_a_past_time_returns_at_once() -> None:
    async with FlowTestEnv(clock=FakeClock(START)) as env:
        handle = await env.start(until, START - timedelta(days=1))
        await env.run_until_idle()
        assert await handle.result() == START


@flow(name="tests.waits.naive_until")
async def naive_until() -> None:
    await sleep_until(datetime(2030, 1, 2))


async def test_sleep_until_a_naive_datetime_is_an_invalid_argument() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(naive_until)
        await env.run_until_idle()
        with pytest.raises(RunFailed) as info:
            await handle.result()
    assert info.value.error.type == "sdk.errors:InvalidArgument"
    assert "timezone-aware" in info.value.error.message


# -- outside a run / inside a step ----------------------------------------------


def test_run_only_calls_outside_a_run_raise_not_in_run_error() -> None:
    calls: list[Callable[[], object]] = [
        lambda: wait_for("x"),
        lambda: sleep(1),
        lambda: sleep_until(START),
        lambda: now(),
        lambda: uuid4(),
    ]
    for call in calls:
        with pytest.raises(NotInRunError, match="FlowTestEnv"):
            call()


@step
async def waits_inside() -> None:
    RUNS["waits_inside"] += 1
    current_step()  # we are in a step
    await wait_for("x")


@flow(name="tests.waits.wait_in_step")
async def wait_in_step() -> None:
    await waits_inside()


async def test_wait_for_inside_a_step_raises_not_in_run_error() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(wait_in_step)
        await env.run_until_idle()
        with pytest.raises(RunFailed) as info:
            await handle.result()
    err = info.value.error
    assert err.type == "sdk.errors:NotInRunError"
    assert err.step_key == "waits_inside#1"
    assert "@step" in err.message
    assert RUNS == {"waits_inside": 1}


def test_wait_for_rejects_bad_arguments_at_call_time() -> None:
    with pytest.raises(ValueError):
        wait_for("")  # type: ignore[unused-coroutine]
    with pytest.raises(ValueError):
        wait_for("x", timeout=-1)  # type: ignore[unused-coroutine]
