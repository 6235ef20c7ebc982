"""The run lifecycle: the transition table, terminal states, cancel, resume, recovery, priority."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from typing import Any

import pytest

from sdk import RunStatus, Worker, flow, sleep, step, wait_for
from sdk._core._lifecycle import TRANSITIONS, check_transition
from sdk.errors import InvalidTransition, RunCanceled, RunFailed
from stores._keys import SUFFIX
from stores.redis import RedisStore
from testing import FlowTestEnv

RUNS: Counter[str] = Counter()
ORDER: list[str] = []
BROKEN: dict[str, bool] = {"on": False}


@pytest.fixture(autouse=True, name="_reset")
def reset_fixture() -> None:
    RUNS.clear()
    ORDER.clear()
    BROKEN["on"] = False


S = RunStatus

# The lifecycle of docs/lifecycle.md, written out independently of the code's table.
ALLOWED = {
    (S.PENDING, S.RUNNING),
    (S.PENDING, S.CANCELED),
    *((S.RUNNING, to) for to in (S.WAITING_FOR_HUMAN, S.WAITING_FOR_SIGNAL, S.REPLAYING,
                                 S.COMPLETED, S.FAILED, S.CANCELED)),
    *((w, to) for w in (S.WAITING_FOR_HUMAN, S.WAITING_FOR_SIGNAL)
      for to in (S.RUNNING, S.CANCELED, S.FAILED)),
    (S.REPLAYING, S.RUNNING),
    (S.REPLAYING, S.FAILED),
    (S.REPLAYING, S.CANCELED),
}  # fmt: skip
PAIRS = list(itertools.product(RunStatus, RunStatus))


def test_there_are_eight_statuses_equal_to_their_strings() -> None:
    assert [s.value for s in RunStatus] == [
        "pending", "running", "waiting_for_human", "waiting_for_signal",
        "replaying", "completed", "failed", "canceled",
    ]  # fmt: skip
    assert all(s == s.value and str(s) == s.value for s in RunStatus)
    assert {s for s in RunStatus if s.is_terminal} == {S.COMPLETED, S.FAILED, S.CANCELED}


def test_the_transition_table_is_the_documented_one() -> None:
    table = {(a, b) for a, targets in TRANSITIONS.items() for b in targets}
    assert table == ALLOWED


@pytest.mark.parametrize(("current", "requested"), PAIRS, ids=lambda s: str(s))
def test_every_transition_is_allowed_or_raises_invalid_transition(
    current: RunStatus, requested: RunStatus
) -> None:
    if (current, requested) in ALLOWED:
        check_transition("run-1", current, requested)
        return
    with pytest.raises(InvalidTransition) as info:
        check_transition("run-1", current, requested)
    exc = info.value
    assert (exc.run_id, exc.current, exc.requested) == ("run-1", current, requested)
    message = str(exc)
    assert "run-1" in message and current.value in message and requested.value in message


def test_resume_is_the_only_way_out_of_failed_and_canceled() -> None:
    for status in (S.FAILED, S.CANCELED):
        check_transition("r", status, S.RUNNING, resume=True)
        with pytest.raises(InvalidTransition):
            check_transition("r", status, S.RUNNING)
        with pytest.raises(InvalidTransition):
            check_transition("r", status, S.PENDING, resume=True)
    with pytest.raises(InvalidTransition):
        check_transition("r", S.COMPLETED, S.RUNNING, resume=True)


# -- flows ---------------------------------------------------------------------


@step
async def work(label: str) -> str:
    RUNS[label] += 1
    if label == "fragile" and BROKEN["on"]:
        raise RuntimeError("fragile is broken")
    return label


@flow(name="tests.lifecycle.simple")
async def simple() -> str:
    return await work("simple")


@flow(name="tests.lifecycle.failing")
async def failing() -> str:
    raise ValueError("nope")


@flow(name="tests.lifecycle.waiting")
async def waiting() -> Any:
    await work("before")
    payload = await wait_for("go")
    await work("after")
    return payload


@flow(name="tests.lifecycle.sleeping")
async def sleeping() -> str:
    await sleep(600)
    return await work("woke")


@flow(name="tests.lifecycle.fragile")
async def fragile() -> list[str]:
    return [await work("one"), await work("fragile"), await work("three")]


async def raw_state(env: FlowTestEnv) -> dict[str, Any]:
    """Everything the env's store holds (run hashes, journals, mailboxes, indexes),
    but the repair pass's cursor (the workers' bookkeeping, moved by every tick)."""
    store = env.store
    assert isinstance(store, RedisStore)
    keys = sorted([k async for k in store.client.scan_iter(match=f"{store.keys.prefix}:*")])
    state: dict[str, Any] = {}
    for key in keys:
        if key == store.keys.base(0) + SUFFIX["repair"]:
            continue
        kind = await store.client.type(key)
        if kind == "hash":
            state[key] = await store.client.hgetall(key)
        elif kind == "list":
            state[key] = await store.client.lrange(key, 0, -1)
        elif kind == "set":
            state[key] = sorted(await store.client.smembers(key))
        elif kind == "zset":
            state[key] = await store.client.zrange(key, 0, -1, withscores=True)
        elif kind == "stream":
            state[key] = await store.client.xrange(key)
        else:
            state[key] = await store.client.get(key)
    return state


async def ended_runs(env: FlowTestEnv) -> dict[str, str]:
    """One completed, one failed and one canceled run: status -> run id."""
    done = await env.start(simple, run_id="done")
    bad = await env.start(failing, run_id="bad")
    gone = await env.start(waiting, run_id="gone")
    await env.run_until_idle()
    await env.client.cancel(gone.run_id, reason="no longer needed", grace=0)
    assert await done.status() == "completed"
    assert await bad.status() == "failed"
    assert await gone.status() == "canceled"
    return {"completed": "done", "failed": "bad", "canceled": "gone"}


# -- terminal states -------------------------------------------------------------


async def test_terminal_states_are_immutable(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        runs = await ended_runs(env)
        before = await raw_state(env)
        for status, run_id in runs.items():
            with pytest.raises(InvalidTransition) as info:
                await env.client.signal(run_id, "go", "late", dedup_id="d")
            assert (info.value.current, info.value.run_id) == (status, run_id)
            with pytest.raises(InvalidTransition):
                await env.client.approve(run_id, "go", actor="alice")
            with pytest.raises(InvalidTransition) as info:
                await env.client.cancel(run_id, reason="again", grace=0)
            assert (info.value.current, info.value.requested) == (status, "canceled")
        await env.advance(3600)
        assert await raw_state(env) == before  # nothing was written


# -- cancel ----------------------------------------------------------------------


async def test_cancel_of_a_waiting_run(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(waiting)
        await env.run_until_idle()
        assert await handle.status() == "waiting_for_signal"

        await env.client.cancel(handle.run_id, reason="customer asked", grace=0)

        record = await env.client.get(handle.run_id)
        assert record.status == "canceled"
        assert record.reason == "customer asked"
        assert record.finished_at is not None
        with pytest.raises(RunCanceled) as info:
            await handle.result()
        assert info.value.reason == "customer asked"
        assert info.value.run_id == handle.run_id
        with pytest.raises(InvalidTransition):
            await env.client.signal(handle.run_id, "go")
        await env.advance(3600)
        assert RUNS == {"before": 1}


async def test_cancel_of_a_pending_run_means_it_never_runs() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(simple)
        await env.client.cancel(handle.run_id, reason="changed my mind")
        await env.run_until_idle()
        assert await handle.status() == "canceled"
        assert RUNS == {}


async def test_cancel_of_a_sleeping_run_removes_its_timer() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(sleeping)
        await env.run_until_idle()
        await env.client.cancel(handle.run_id, reason="stop")
        await env.advance(600)
        assert await handle.status() == "canceled"
        assert RUNS == {}


async def test_cancel_of_a_human_wait() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(human_wait)
        await env.run_until_idle()
        assert await handle.status() == "waiting_for_human"
        await env.client.cancel(handle.run_id, reason="expired offer", grace=0)
        with pytest.raises(RunCanceled):
            await handle.result()


@flow(name="tests.lifecycle.human_wait")
async def human_wait() -> bool:
    decision = await wait_for("ok", human=True)
    return bool(decision.approved)


# Events of the running test's loop: "started" (set by the step), "release" (by the test).
GATE: dict[str, asyncio.Event] = {}


@step
async def blocking() -> str:
    RUNS["blocking"] += 1
    GATE["started"].set()
    await GATE["release"].wait()
    return "finished anyway"


@flow(name="tests.lifecycle.blocking")
async def blocking_flow() -> str:
    value = await blocking()
    await work("after-blocking")
    return value


async def test_cancel_while_a_step_runs_refuses_the_activations_later_writes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    GATE.update(started=asyncio.Event(), release=asyncio.Event())
    async with FlowTestEnv() as env:
        handle = await env.start(blocking_flow)
        worker = asyncio.create_task(env.run_until_idle())
        await asyncio.wait_for(GATE["started"].wait(), timeout=10)

        await env.client.cancel(handle.run_id, reason="operator", grace=0)
        GATE["release"].set()
        await asyncio.wait_for(worker, timeout=10)

        record = await env.client.get(handle.run_id)
        assert (record.status, record.reason) == ("canceled", "operator")
        assert record.current_step_id is None  # blocking#1 was not recorded
        with pytest.raises(RunCanceled):
            await handle.result()
    assert RUNS == {"blocking": 1}
    assert any("lease lost" in r.getMessage() for r in caplog.records)


# -- resume ----------------------------------------------------------------------


async def test_resume_of_a_failed_run_reruns_only_the_failed_step() -> None:
    BROKEN["on"] = True
    async with FlowTestEnv() as env:
        handle = await env.start(fragile)
        await env.run_until_idle()
        with pytest.raises(RunFailed) as info:
            await handle.result()
        assert info.value.error.step_key == "work#2"

        BROKEN["on"] = False
        resumed = await env.client.resume(handle.run_id)
        assert resumed.run_id == handle.run_id
        record = await env.client.get(handle.run_id)
        assert (record.status, record.error, record.reason) == ("running", None, None)
        await env.run_until_idle()

        assert await handle.result() == ["one", "fragile", "three"]
    assert RUNS == {"one": 1, "fragile": 2, "three": 1}


async def test_resume_of_a_canceled_run_continues_where_it_was() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(waiting)
        await env.run_until_idle()
        await env.client.cancel(handle.run_id, reason="oops", grace=0)
        await env.client.resume(handle.run_id)
        await env.run_until_idle()
        assert await handle.status() == "waiting_for_signal"
        await env.client.signal(handle.run_id, "go", 42)
        await env.run_until_idle()
        assert await handle.result() == 42
    assert RUNS == {"before": 1, "after": 1}


async def test_resume_of_a_run_whose_flow_was_given_its_cancel_is_not_canceled_again(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(waiting)
        await env.run_until_idle()
        await env.client.cancel(handle.run_id, reason="oops")  # the flow is given it
        await env.run_until_idle()
        assert await handle.status() == "canceled"

        await env.client.resume(handle.run_id)
        await env.run_until_idle()

        types = [e.type for e in await env.client.events(handle.run_id)]
        assert types[-2:] == ["run.resumed", "run.waiting_for_signal"]
        assert await env.client.signal(handle.run_id, "go", 42) is True
        await env.run_until_idle()
        assert await handle.result() == 42
        record = await env.client.get(handle.run_id)
        assert (record.status, record.reason, record.resume_from_checkpoint_id) == (
            "completed", None, "3",  # its wait's checkpoint, before the cancel
        )  # fmt: skip
    assert RUNS == {"before": 1, "after": 1}


async def test_resume_of_a_completed_run_is_an_invalid_transition() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(simple)
        await env.run_until_idle()
        with pytest.raises(InvalidTransition) as info:
            await env.client.resume(handle.run_id)
        assert info.value.current == "completed"
        assert await handle.result() == "simple"


# -- flow not registered ------------------------------------------------------------


async def test_a_run_of_a_flow_no_worker_serves_waits_queued_until_one_does() -> None:
    async with FlowTestEnv(flows=[simple]) as env:
        other = await env.start(waiting)
        mine = await env.start(simple)
        await env.run_until_idle()
        assert await mine.result() == "simple"  # not blocked behind the other flow's run
        assert await other.status() == "pending"
        assert RUNS == {"simple": 1}  # nothing of the unserved flow ran

        # A worker that serves it comes up (e.g. after a rolling deploy).
        serving = Worker(env.store, [waiting], clock=env.clock, inline_backoff_max=0)
        await env.client.signal(other.run_id, "go", "late but fine")
        await serving.run_until_idle()
        assert await other.result() == "late but fine"
    assert RUNS == {"simple": 1, "before": 1, "after": 1}


# -- lease expiry and recovery --------------------------------------------------


async def test_an_expired_lease_moves_the_run_to_replaying_until_claimed() -> None:
    async with FlowTestEnv() as env:
        env.crash_at("work#1", when="before")
        handle = await env.start(simple)
        await env.run_until_idle()
        assert await handle.status() == "running"

        env.clock.advance(31)
        result = await env.store.tick(env.clock.time(), 10, "{}")
        assert result.recovered == 1
        assert await handle.status() == "replaying"

        await env.run_until_idle()
        assert await handle.result() == "simple"
        assert (await env.client.get(handle.run_id)).recoveries == 0


async def test_a_run_that_keeps_crashing_fails_with_max_recoveries_exceeded() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(simple)
        env.crash_at("work#1", when="before")
        await env.run_until_idle()
        for _ in range(env.worker.max_recoveries):
            env.crash_at("work#1", when="before")
            await env.advance(31)
            assert await handle.status() == "running"
        await env.advance(31)  # one expiry too many
        with pytest.raises(RunFailed) as info:
            await handle.result()
    assert info.value.error.reason == "max_recoveries_exceeded"
    assert RUNS == {}


# -- priority ----------------------------------------------------------------------


@flow(name="tests.lifecycle.ordered")
async def ordered(label: str) -> None:
    ORDER.append(label)


async def test_lower_priority_numbers_run_first_fifo_within_a_priority(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(store=store, concurrency=1) as env:
        plan = [("a", 5), ("b", -3), ("c", 0), ("d", -3), ("e", 5), ("f", 0), ("g", -4095)]
        for label, priority in plan:
            await env.start(ordered, label, priority=priority)
        await env.run_until_idle()
    assert ORDER == ["g", "b", "d", "c", "f", "a", "e"]


@flow(name="tests.lifecycle.slow_lane", queue="slow")
async def slow_lane(label: str) -> None:
    ORDER.append(label)


async def test_a_worker_serves_only_its_queues() -> None:
    async with FlowTestEnv() as env:
        fast_worker = Worker(env.store, clock=env.clock, queues=["fast"])
        on_slow = await env.start(slow_lane, "slow")  # the flow's default queue
        on_fast = await env.start(slow_lane, "fast", queue="fast")
        await fast_worker.run_until_idle()
        assert await on_fast.status() == "completed"
        assert await on_slow.status() == "pending"
        await env.run_until_idle()  # the env's worker serves every queue
        assert await on_slow.status() == "completed"
    assert ORDER == ["fast", "slow"]
