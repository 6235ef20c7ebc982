"""Racing waits, and asyncio's own timers inside a flow.

``asyncio.wait(..., return_when=FIRST_COMPLETED)`` over waits parks the run
until the first of them can complete; the winner is journaled (a replay picks
the same one) and the losers are withdrawn: a signal for a loser that arrives
later neither wakes the run nor is consumed. ``asyncio.sleep``,
``asyncio.timeout`` and ``asyncio.wait_for`` in a flow body are durable timers.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from sdk import current_run, flow, sleep, step, wait_for
from sdk._core._journal import Kind, Record, State
from stores.redis import RedisStore
from testing import FakeClock, FlowTestEnv

START = 1_900_000_000.0
DAYS3 = 3 * 86400
SEEN: list[Any] = []
RUNS: Counter[str] = Counter()


@pytest.fixture(autouse=True, name="reset")
def reset_fixture() -> None:
    SEEN.clear()
    RUNS.clear()


@step
async def note(winner: str) -> str:
    RUNS[winner] += 1
    return winner


async def race() -> str:
    approve = asyncio.create_task(wait_for("approve"))
    reject = asyncio.create_task(wait_for("reject"))
    expire = asyncio.create_task(sleep(DAYS3))
    done, _ = await asyncio.wait({approve, reject, expire}, return_when=asyncio.FIRST_COMPLETED)
    if approve in done:
        return "approved"
    if reject in done:
        return "rejected"
    return "expired"


@flow(name="tests.racing.review")
async def review() -> list[Any]:
    winner = await race()
    SEEN.append((winner, current_run().is_replaying))
    await note(winner)
    late = await wait_for("late")
    # an approval that came after the race was decided is still in the mailbox
    kept = await wait_for("approve", timeout=0)
    return [winner, late, kept]


async def event_types(env: FlowTestEnv, run_id: str) -> list[str]:
    return [e.type for e in await env.client.events(run_id, limit=1000)]


async def test_the_first_wait_wins_and_a_late_signal_for_a_loser_stays_in_the_mailbox(
    store: RedisStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="asyncio")
    async with FlowTestEnv(store=store, sticky_cache=0) as env:  # every wake-up replays
        handle = await env.start(review)
        await env.run_until_idle()
        assert await handle.status() == "waiting_for_signal"
        await env.client.signal(handle.run_id, "reject", "no")
        await env.run_until_idle()
        assert SEEN == [("rejected", False)]
        assert await handle.status() == "waiting_for_signal"  # now on "late"

        before = await event_types(env, handle.run_id)
        await env.client.signal(handle.run_id, "approve", "too late")
        await env.advance(DAYS3 + 1)  # the loser's sleep is withdrawn too
        after = await event_types(env, handle.run_id)
        assert after == [*before, "signal.received"]  # nothing woke the run
        assert await handle.status() == "waiting_for_signal"

        await env.client.signal(handle.run_id, "late", "finally")
        await env.run_until_idle()
        assert await handle.result() == ["rejected", "finally", "too late"]
    assert RUNS == {"rejected": 1}
    assert SEEN == [("rejected", False), ("rejected", True)]  # the replay took the same branch
    assert not [r for r in caplog.records if r.name == "asyncio" and r.levelno >= logging.ERROR]


async def test_the_race_replays_the_recorded_winner_after_a_crash() -> None:
    async with FlowTestEnv(sticky_cache=0) as env:  # every wake-up replays
        env.crash_at("note#1", "before")
        handle = await env.start(review)
        await env.run_until_idle()
        await env.client.signal(handle.run_id, "reject", "no")
        await env.run_until_idle()  # the race is won by reject; then the crash
        await env.client.signal(handle.run_id, "approve", "yes")  # before recovery
        await env.advance(31)  # the lease expires: a new activation replays the race
        assert await handle.status() == "waiting_for_signal"
        await env.client.signal(handle.run_id, "late", 1)
        await env.run_until_idle()
        assert await handle.result() == ["rejected", 1, "yes"]
    assert [w for w, _ in SEEN] == ["rejected", "rejected", "rejected"]
    assert RUNS == {"rejected": 1}


async def test_waits_that_can_all_complete_complete_one_at_a_time_in_call_order() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(review)
        await env.client.signal(handle.run_id, "reject", "no")
        await env.client.signal(handle.run_id, "approve", "yes")
        await env.run_until_idle()
        assert SEEN == [("approved", False)]  # called first; reject stays in its mailbox
        await env.client.signal(handle.run_id, "approve", "again")
        await env.client.signal(handle.run_id, "late", 2)
        await env.run_until_idle()
        assert await handle.result() == ["approved", 2, "again"]


async def test_a_race_nobody_answers_ends_at_the_timer() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(review)
        await env.run_until_idle()
        await env.advance(DAYS3 - 1)
        assert SEEN == []
        await env.advance(1)
        assert SEEN == [("expired", False)]
        await env.client.signal(handle.run_id, "approve", "x")
        await env.client.signal(handle.run_id, "late", 3)
        await env.run_until_idle()
        assert await handle.result() == ["expired", 3, "x"]


# -- asyncio's timers are durable timers in a flow --------------------------------------


@flow(name="tests.racing.patient")
async def patient() -> str:
    try:
        async with asyncio.timeout(3600):
            return str(await wait_for("go"))
    except TimeoutError:
        return "timed out"


async def test_asyncio_timeout_in_a_flow_is_a_durable_deadline(store: RedisStore) -> None:
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        handle = await env.start(patient)
        await env.run_until_idle()
        assert await handle.status() == "waiting_for_signal"
        await env.advance(3599)
        assert await handle.status() == "waiting_for_signal"
        await env.advance(1)
        assert await handle.result() == "timed out"
        raw = await store.client.hgetall(store.keys.journal(handle.run_id))
        timer = Record.from_json(raw["~timer#1"])  # journaled like any wait
        assert (timer.kind, timer.state, timer.due) == (Kind.TIMER, State.OK, START + 3600)


async def test_a_signal_before_the_asyncio_timeout_cancels_the_timer() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(patient)
        await env.run_until_idle()
        await env.client.signal(handle.run_id, "go", "in time")
        await env.run_until_idle()
        assert await handle.result() == "in time"


@flow(name="tests.racing.napping")
async def napping() -> list[str]:
    before = await sleep_marker("before")
    await asyncio.sleep(timedelta(minutes=10).total_seconds())
    return [before, await sleep_marker("after")]


@step
async def sleep_marker(label: str) -> str:
    RUNS[label] += 1
    return label


async def test_asyncio_sleep_in_a_flow_parks_the_run_on_a_durable_timer() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(napping)
        await env.run_until_idle()
        assert await handle.status() == "waiting_for_signal"
        assert RUNS == {"before": 1}
        await env.advance(600)
        assert await handle.result() == ["before", "after"]
    assert RUNS == {"before": 1, "after": 1}


@flow(name="tests.racing.wait_for_with_timeout")
async def wait_for_with_timeout() -> str:
    try:
        return str(await asyncio.wait_for(wait_for("x"), timeout=10))
    except TimeoutError:
        return "late"


async def test_asyncio_wait_for_around_a_wait_times_out_durably() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(wait_for_with_timeout)
        await env.run_until_idle()
        await env.advance(10)
        assert await handle.result() == "late"
        # the withdrawn wait did not consume the signal sent afterwards
        again = await env.start(wait_for_with_timeout)
        await env.client.signal(again.run_id, "x", "on time")
        await env.run_until_idle()
        assert await again.result() == "on time"
