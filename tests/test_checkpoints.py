"""Checkpoints: exactly one at each mandatory boundary, the optional ones only when
asked for, `checkpoint_head` always the newest, and where `resume` continues from.

Mandatory boundaries: run started (the first claim only), every completed step,
entering ``waiting_for_human`` / ``waiting_for_signal``, run finished (completed,
failed, canceled). Optional (``@flow(optional_checkpoints=True)``): a step
attempt starting, a retry being scheduled.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sdk import (
    Checkpoint,
    CheckpointKind,
    Client,
    Decision,
    RetryPolicy,
    current_run,
    flow,
    now,
    sleep,
    step,
    uuid4,
    wait_for,
)
from sdk.errors import RunFailed, RunNotFound
from stores.redis import RedisStore
from testing import FakeClock, FlowTestEnv

START = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)
LEASE_TTL = 30.0

CALLS: Counter[str] = Counter()
FAIL: set[str] = set()
FLAKY: Counter[str] = Counter()  # label -> failures still to come
ENTRIES: Counter[str] = Counter()  # flow bodies entered (one per activation)
CLIENTS: list[Client] = []


@pytest.fixture(autouse=True, name="_reset")
def reset_fixture() -> None:
    CALLS.clear()
    FAIL.clear()
    FLAKY.clear()
    ENTRIES.clear()
    CLIENTS.clear()


@step
async def work(label: str) -> str:
    CALLS[label] += 1
    if label in FAIL:
        raise ValueError(f"{label} failed")
    return label


@step
async def flaky(label: str) -> str:
    CALLS[label] += 1
    if FLAKY[label] > 0:
        FLAKY[label] -= 1
        raise ConnectionError(f"{label} is flaky")
    return label


@step
async def signal_myself(name: str) -> None:
    await CLIENTS[0].signal(current_run().run_id, name, "sent from inside")


# -- flows ---------------------------------------------------------------------------


@flow(name="tests.checkpoints.steps_and_values")
async def steps_and_values() -> list[str]:
    a = await work("a")
    await now()
    b = await work("b")
    await uuid4()
    await sleep(0)  # due at once: recorded, never parked
    c = await work("c")
    return [a, b, c]


@flow(name="tests.checkpoints.sleeper")
async def sleeper() -> str:
    await work("a")
    await sleep(60)
    await work("b")
    return "slept"


@flow(name="tests.checkpoints.signal_wait")
async def signal_wait() -> Any:
    await work("a")
    payload = await wait_for("go")
    await work("b")
    return payload


@flow(name="tests.checkpoints.human_wait")
async def human_wait() -> bool:
    await work("a")
    decision: Decision = await wait_for("ship", human=True)
    return decision.approved


@flow(name="tests.checkpoints.self_signal")
async def self_signal() -> Any:
    ENTRIES["self_signal"] += 1
    await signal_myself("go")
    return await wait_for("go")


@flow(name="tests.checkpoints.degraded")
async def degraded() -> str:
    a = await work("a")
    try:
        b = await work("b")
    except ValueError:
        b = "fallback"  # the flow carries on without that result
    return await work(a + "+" + b)


@flow(name="tests.checkpoints.raises")
async def raises() -> None:
    await work("a")
    raise RuntimeError("the flow itself failed")


@flow(name="tests.checkpoints.retrying", retry=RetryPolicy(max_attempts=3, initial_interval=10))
async def retrying() -> str:
    await work("a")
    return await flaky("b")


@flow(
    name="tests.checkpoints.optional",
    optional_checkpoints=True,
    retry=RetryPolicy(max_attempts=3, initial_interval=10),
)
async def optional() -> str:
    await work("a")
    b = await flaky("b")
    await now()
    await uuid4()
    await sleep(0)
    return b


# -- helpers -------------------------------------------------------------------------


Row = tuple[str, str | None, str]


async def rows(env: FlowTestEnv, run_id: str) -> list[Row]:
    """(kind, step key, status) of every checkpoint, after checking ids and head."""
    cps = await checked(env, run_id)
    return [(c.kind.value, c.step_key, c.status.value) for c in cps]


async def checked(env: FlowTestEnv, run_id: str) -> list[Checkpoint]:
    """The run's checkpoints; asserts ids "1", "2", ... in order and the head is the newest."""
    cps = await env.client.checkpoints(run_id)
    assert [c.checkpoint_id for c in cps] == [str(i) for i in range(1, len(cps) + 1)]
    assert all(c.run_id == run_id for c in cps)
    assert all(isinstance(c.kind, CheckpointKind) for c in cps)
    head = (await env.client.get(run_id)).checkpoint_head
    assert head == (cps[-1].checkpoint_id if cps else None)
    return cps


STARTED: Row = ("run_started", None, "running")


def completed(key: str) -> Row:
    return ("step_completed", key, "running")


def finished(status: str) -> Row:
    return ("run_finished", None, status)


# -- mandatory boundaries ------------------------------------------------------------


async def test_a_run_checkpoints_its_start_each_completed_step_and_its_finish(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        handle = await env.start(steps_and_values)
        assert await env.client.checkpoints(handle.run_id) == []
        assert (await env.client.get(handle.run_id)).checkpoint_head is None
        await env.run_until_idle()
        assert await handle.result() == ["a", "b", "c"]

        # none for now(), uuid4() or sleep() records
        assert await rows(env, handle.run_id) == [
            STARTED, completed("work#1"), completed("work#2"), completed("work#3"),
            finished("completed"),
        ]  # fmt: skip


async def test_checkpoint_times_come_from_the_injected_clock(store: RedisStore) -> None:
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        handle = await env.start(sleeper)
        await env.advance(1)
        head = await checked(env, handle.run_id)
        assert head[-1].kind is CheckpointKind.WAITING_FOR_SIGNAL
        await env.advance(timedelta(minutes=1))
        assert await handle.result() == "slept"

        cps = await checked(env, handle.run_id)
    t1, t61 = START + timedelta(seconds=1), START + timedelta(seconds=61)
    assert [(c.kind, c.step_key, c.status, c.created_at) for c in cps] == [
        ("run_started", None, "running", t1),
        ("step_completed", "work#1", "running", t1),
        ("waiting_for_signal", None, "waiting_for_signal", t1),
        ("step_completed", "work#2", "running", t61),
        ("run_finished", None, "completed", t61),
    ]  # one run_started: the claim after the sleep is not a start


async def test_entering_waiting_for_signal_takes_one_checkpoint(store: RedisStore) -> None:
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        handle = await env.start(signal_wait)
        await env.run_until_idle()
        assert await rows(env, handle.run_id) == [
            STARTED, completed("work#1"), ("waiting_for_signal", None, "waiting_for_signal"),
        ]  # fmt: skip

        await env.client.signal(handle.run_id, "go", {"n": 1})
        await env.run_until_idle()
        assert await handle.result() == {"n": 1}
        assert await rows(env, handle.run_id) == [
            STARTED, completed("work#1"), ("waiting_for_signal", None, "waiting_for_signal"),
            completed("work#2"), finished("completed"),
        ]  # fmt: skip


async def test_entering_waiting_for_human_takes_one_checkpoint(store: RedisStore) -> None:
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        handle = await env.start(human_wait)
        await env.run_until_idle()
        assert await rows(env, handle.run_id) == [
            STARTED, completed("work#1"), ("waiting_for_human", None, "waiting_for_human"),
        ]  # fmt: skip

        await env.client.approve(handle.run_id, "ship", actor="ada")
        await env.run_until_idle()
        assert await handle.result() is True
        assert await rows(env, handle.run_id) == [
            STARTED, completed("work#1"), ("waiting_for_human", None, "waiting_for_human"),
            finished("completed"),
        ]  # fmt: skip


async def test_a_suspension_requeued_by_a_signal_already_there_takes_no_waiting_checkpoint(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(FakeClock(START), store=store, sticky_cache=0) as env:
        CLIENTS.append(env.client)
        handle = await env.start(self_signal)
        await env.run_until_idle()
        assert await handle.result() == "sent from inside"

        # The signal landed after the claim: the wait parked without looking, the
        # suspend script found the signal and re-queued the run (a second activation).
        assert ENTRIES["self_signal"] == 2
        assert await rows(env, handle.run_id) == [
            STARTED, completed("signal_myself#1"), finished("completed"),
        ]  # fmt: skip


async def test_a_retry_timer_is_a_wait_for_a_signal_and_no_retry_checkpoint_by_default(
    store: RedisStore,
) -> None:
    FLAKY["b"] = 1
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        handle = await env.start(retrying)
        await env.run_until_idle()
        await env.advance(10)
        assert await handle.result() == "b"

        assert CALLS == {"a": 1, "b": 2}
        assert await rows(env, handle.run_id) == [
            STARTED, completed("work#1"), ("waiting_for_signal", None, "waiting_for_signal"),
            completed("flaky#1"), finished("completed"),
        ]  # fmt: skip


async def test_a_lease_recovery_is_not_a_second_start(store: RedisStore) -> None:
    async with FlowTestEnv(FakeClock(START), store=store, lease_ttl=LEASE_TTL) as env:
        env.crash_at("work#1", when="before")
        handle = await env.start(steps_and_values)
        await env.run_until_idle()
        assert await rows(env, handle.run_id) == [STARTED]

        await env.advance(LEASE_TTL + 1)
        assert await handle.result() == ["a", "b", "c"]
        assert await rows(env, handle.run_id) == [
            STARTED, completed("work#1"), completed("work#2"), completed("work#3"),
            finished("completed"),
        ]  # fmt: skip


async def test_a_step_run_twice_across_a_crash_is_checkpointed_once() -> None:
    async with FlowTestEnv(FakeClock(START), lease_ttl=LEASE_TTL) as env:
        env.crash_at("work#2", when="after")  # ran, not recorded: runs again
        handle = await env.start(steps_and_values)
        await env.run_until_idle()
        await env.advance(LEASE_TTL + 1)
        assert await handle.result() == ["a", "b", "c"]

        assert CALLS == {"a": 1, "b": 2, "c": 1}
        assert await rows(env, handle.run_id) == [
            STARTED, completed("work#1"), completed("work#2"), completed("work#3"),
            finished("completed"),
        ]  # fmt: skip


async def test_a_step_that_fails_for_good_is_checkpointed_and_the_run_finishes_failed(
    store: RedisStore,
) -> None:
    FAIL.add("b")
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        handle = await env.start(steps_and_values)
        await env.run_until_idle()
        with pytest.raises(RunFailed):
            await handle.result()

        assert await rows(env, handle.run_id) == [
            STARTED, completed("work#1"), completed("work#2"), finished("failed"),
        ]  # fmt: skip


async def test_a_degraded_step_failed_but_caught_takes_one_step_checkpoint(
    store: RedisStore,
) -> None:
    FAIL.add("b")
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        handle = await env.start(degraded)
        await env.run_until_idle()
        assert await handle.result() == "a+fallback"

        assert await rows(env, handle.run_id) == [
            STARTED, completed("work#1"), completed("work#2"), completed("work#3"),
            finished("completed"),
        ]  # fmt: skip
        types = [(e.type, e.step_key) for e in await env.client.events(handle.run_id, limit=100)]
        assert ("step.failed", "work#2") in types
        assert ("step.completed", "work#2") not in types


async def test_a_flow_error_finishes_the_run_failed() -> None:
    async with FlowTestEnv(FakeClock(START)) as env:
        handle = await env.start(raises)
        await env.run_until_idle()
        with pytest.raises(RunFailed):
            await handle.result()

        assert await rows(env, handle.run_id) == [
            STARTED, completed("work#1"), finished("failed"),
        ]  # fmt: skip


async def test_canceling_a_waiting_run_takes_the_run_finished_checkpoint(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        handle = await env.start(signal_wait)
        await env.run_until_idle()
        env.clock.advance(5)
        await env.client.cancel(handle.run_id, reason="no longer needed", grace=0)

        cps = await checked(env, handle.run_id)
        assert [(c.kind, c.status) for c in cps] == [
            ("run_started", "running"), ("step_completed", "running"),
            ("waiting_for_signal", "waiting_for_signal"), ("run_finished", "canceled"),
        ]  # fmt: skip
        assert cps[-1].created_at == START + timedelta(seconds=5)


async def test_canceling_a_run_that_never_started_takes_only_the_finish() -> None:
    async with FlowTestEnv(FakeClock(START)) as env:
        handle = await env.start(signal_wait)
        await env.client.cancel(handle.run_id, reason="changed my mind")

        assert await rows(env, handle.run_id) == [finished("canceled")]


async def test_exceeding_max_recoveries_finishes_the_run_failed(store: RedisStore) -> None:
    async with FlowTestEnv(FakeClock(START), store=store, lease_ttl=LEASE_TTL) as env:
        handle = await env.start(steps_and_values)
        env.crash_at("work#1", when="before")
        await env.run_until_idle()
        for _ in range(env.worker.max_recoveries):
            env.crash_at("work#1", when="before")
            await env.advance(LEASE_TTL + 1)
        await env.advance(LEASE_TTL + 1)  # one expiry too many
        with pytest.raises(RunFailed) as info:
            await handle.result()

        assert info.value.error.reason == "max_recoveries_exceeded"
        assert await rows(env, handle.run_id) == [STARTED, finished("failed")]


async def test_checkpoints_of_an_unknown_run_raise_run_not_found() -> None:
    async with FlowTestEnv() as env:
        with pytest.raises(RunNotFound):
            await env.client.checkpoints("no-such-run")


# -- optional boundaries ----------------------------------------------------------------


async def test_optional_checkpoints_mark_each_live_step_attempt_and_each_scheduled_retry(
    store: RedisStore,
) -> None:
    FLAKY["b"] = 1
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        handle = await env.start(optional)
        await env.run_until_idle()
        await env.advance(10)
        assert await handle.result() == "b"

        cps = await checked(env, handle.run_id)
    assert [(c.kind.value, c.step_key, c.status.value) for c in cps] == [
        STARTED,
        ("step_started", "work#1", "running"),
        completed("work#1"),
        ("step_started", "flaky#1", "running"),
        ("retry_scheduled", "flaky#1", "running"),
        ("waiting_for_signal", None, "waiting_for_signal"),
        # the second activation replays work#1: no step_started for it
        ("step_started", "flaky#1", "running"),
        completed("flaky#1"),
        finished("completed"),
    ]
    assert cps[6].created_at == START + timedelta(seconds=10)


async def test_optional_checkpoints_are_off_by_default(store: RedisStore) -> None:
    FLAKY["b"] = 1
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        handle = await env.start(retrying)
        await env.run_until_idle()
        await env.advance(10)
        assert await handle.result() == "b"

        kinds = {c.kind for c in await env.client.checkpoints(handle.run_id)}
        types = {e.type for e in await env.client.events(handle.run_id)}
    assert not kinds & {CheckpointKind.STEP_STARTED, CheckpointKind.RETRY_SCHEDULED}
    assert "step.started" not in types
    assert "step.retry_scheduled" in types  # the event is always logged


async def test_optional_step_started_is_logged_as_an_event_too() -> None:
    async with FlowTestEnv(FakeClock(START)) as env:
        handle = await env.start(optional)
        await env.run_until_idle()
        assert await handle.result() == "b"

        started = [
            (e.step_key, e.at)
            for e in await env.client.events(handle.run_id)
            if e.type == "step.started"
        ]
    assert started == [("work#1", START), ("flaky#1", START)]


# -- where resume continues from -----------------------------------------------------------


async def test_resuming_a_waiting_run_continues_from_its_checkpoint_head(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        handle = await env.start(signal_wait)
        await env.run_until_idle()
        head = (await env.client.get(handle.run_id)).checkpoint_head
        assert head == "3"  # the waiting_for_signal checkpoint

        await env.client.resume(handle.run_id, actor="ops")

        record = await env.client.get(handle.run_id)
        assert record.resume_from_checkpoint_id == head
        assert record.checkpoint_head == head  # resuming is not a boundary
        await env.run_until_idle()  # still no signal: it waits again
        await env.client.signal(handle.run_id, "go", "late")
        await env.run_until_idle()
        assert await handle.result() == "late"
    assert CALLS == {"a": 1, "b": 1}


async def test_resuming_a_failed_run_continues_from_the_checkpoint_before_its_finish(
    store: RedisStore,
) -> None:
    FAIL.add("b")
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        handle = await env.start(steps_and_values)
        await env.run_until_idle()
        before = await rows(env, handle.run_id)
        assert before == [STARTED, completed("work#1"), completed("work#2"), finished("failed")]

        FAIL.clear()  # the fix is deployed
        await env.client.resume(handle.run_id, actor="ops")
        # the failure of work#2 is discarded: the run continues from before it
        assert (await env.client.get(handle.run_id)).resume_from_checkpoint_id == "2"
        await env.run_until_idle()
        assert await handle.result() == ["a", "b", "c"]

        assert CALLS == {"a": 1, "b": 2, "c": 1}  # recorded steps are not re-run
        assert await rows(env, handle.run_id) == [
            *before, completed("work#2"), completed("work#3"), finished("completed"),
        ]  # fmt: skip
        assert (await env.client.get(handle.run_id)).resume_from_checkpoint_id == "2"


async def test_resuming_a_canceled_run_continues_from_the_checkpoint_before_its_finish(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        handle = await env.start(signal_wait)
        await env.run_until_idle()
        await env.client.cancel(handle.run_id, reason="oops", grace=0)
        assert (await env.client.get(handle.run_id)).checkpoint_head == "4"

        await env.client.resume(handle.run_id, actor="ops")

        assert (await env.client.get(handle.run_id)).resume_from_checkpoint_id == "3"
        await env.client.signal(handle.run_id, "go", "after all")
        await env.run_until_idle()
        assert await handle.result() == "after all"
    assert CALLS == {"a": 1, "b": 1}
