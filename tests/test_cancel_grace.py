"""A flow can handle its cancellation: `Client.cancel(..., grace=...)` asks a run to
stop, the flow gets `asyncio.CancelledError` where it waits (or at the step that was
executing, interrupted), its compensation steps are journaled like any others, and
the run ends `canceled` with the reason. The grace period, a second cancel and
``grace=0`` force the cancel; a pending run is canceled at once.

Some flows here are served by real worker processes too
(``python -m sdk.worker tests.test_cancel_grace``).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from sdk import Client, RunStatus, flow, sleep, step, wait_for
from sdk.errors import InvalidArgument, InvalidTransition, RunCanceled
from stores.redis import RedisStore
from testing import FlowTestEnv
from tests.crashflows import Workers, hold, labelled, note, until

RAN: Counter[str] = Counter()
SEEN: list[str] = []
ENTERED: dict[str, asyncio.Event] = {}


@pytest.fixture(autouse=True, name="_reset")
def reset_fixture() -> None:
    RAN.clear()
    SEEN.clear()
    ENTERED.clear()


def entered(label: str) -> asyncio.Event:
    return ENTERED.setdefault(label, asyncio.Event())


@step(name="tests.cg.reserve")
async def reserve(order: str) -> str:
    RAN["reserve"] += 1
    return f"hold-{order}"


@step(name="tests.cg.release")
async def release(hold_id: str) -> str:
    RAN["release"] += 1
    return f"released {hold_id}"


@step(name="tests.cg.notify")
async def notify(what: str) -> str:
    RAN[f"notify {what}"] += 1
    return what


@step(name="tests.cg.charge")
async def charge(order: str) -> str:
    """Hangs until its task is cancelled."""
    RAN["charge"] += 1
    SEEN.append("charging")
    entered("charge").set()
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        SEEN.append("charge interrupted")
        raise
    return "charged"  # never reached


@step(name="tests.cg.hung_release")
async def hung_release(hold_id: str) -> str:
    """A compensation that never ends (until its task is cancelled)."""
    RAN["hung_release"] += 1
    entered("hung").set()
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        SEEN.append("hung release interrupted")
        raise
    return "released"  # never reached


@flow(name="tests.cg.order")
async def order_flow(order: str) -> str:
    hold_id = await reserve(order)
    try:
        await wait_for("paid")
    except asyncio.CancelledError:
        SEEN.append("cancelled at the wait")
        await release(hold_id)
        raise
    return "paid"


@flow(name="tests.cg.charging")
async def charging_flow(order: str) -> str:
    hold_id = await reserve(order)
    try:
        return await charge(order)
    except asyncio.CancelledError:
        SEEN.append("cancelled at the step")
        await release(hold_id)
        raise


@flow(name="tests.cg.slow_cleanup")
async def slow_cleanup_flow(order: str) -> str:
    hold_id = await reserve(order)
    try:
        await wait_for("paid")
    except asyncio.CancelledError:
        SEEN.append("cancelled")
        await asyncio.gather(release(hold_id), notify("customer"))
        await sleep(10)  # the cleanup parks: the next activation replays through the cancel
        await notify("ops")
        raise
    return "paid"


@flow(name="tests.cg.hung_cleanup")
async def hung_cleanup_flow(order: str) -> str:
    hold_id = await reserve(order)
    try:
        await wait_for("paid")
    except asyncio.CancelledError:
        await release(hold_id)
        await sleep(3600)  # longer than any grace
        await notify("never")
        raise
    return "paid"


@flow(name="tests.cg.hung_step_cleanup")
async def hung_step_cleanup_flow(order: str) -> str:
    hold_id = await reserve(order)
    try:
        await wait_for("paid")
    except asyncio.CancelledError:
        await hung_release(hold_id)
        raise
    return "paid"


@flow(name="tests.cg.swallow")
async def swallowing_flow(order: str) -> str:
    hold_id = await reserve(order)
    try:
        await wait_for("paid")
    except asyncio.CancelledError:
        await release(hold_id)
        return "refunded"  # swallows the cancel: the run is canceled all the same
    return "paid"


@flow(name="tests.cg.side_by_side")
async def side_by_side_flow(order: str) -> list[str]:
    try:
        return list(await asyncio.gather(reserve(order), charge(order)))
    except asyncio.CancelledError:
        await asyncio.sleep(5)  # a timer of the flow's loop: durable, journaled
        await release(order)
        raise


async def _events(env: FlowTestEnv, run_id: str, type_: str) -> list[Any]:
    return [e.data for e in await env.client.events(run_id, limit=1000) if e.type == type_]


async def _journal(store: RedisStore, run_id: str) -> dict[str, dict[str, Any]]:
    lin = await store.read_lineage(run_id)
    assert lin is not None
    return {key: json.loads(text) for key, text in lin.journal.items()}


async def test_cancel_of_a_parked_run_delivers_cancelled_error_at_the_wait(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(order_flow, "o-1")
        await env.run_until_idle()
        assert await handle.status() == RunStatus.WAITING_FOR_SIGNAL
        before = env.clock.time()
        await env.client.cancel(handle.run_id, reason="customer left", actor="support")
        # a request, not the end: the run is woken for its flow to clean up
        assert await handle.status() == RunStatus.RUNNING
        (asked,) = await _events(env, handle.run_id, "run.cancel_requested")
        assert asked == {"reason": "customer left", "actor": "support",
                         "grace_until": before + 30}  # fmt: skip
        await env.run_until_idle()
        assert SEEN == ["cancelled at the wait"]
        assert RAN == {"reserve": 1, "release": 1}
        with pytest.raises(RunCanceled):
            await handle.result()
        record = await env.client.get(handle.run_id)
        assert (record.status, record.reason) == (RunStatus.CANCELED, "customer left")
        journal = await _journal(store, handle.run_id)
        assert journal["tests.cg.release#1"]["state"] == "ok"  # journaled like any step
        assert journal["~cancel"]["value"] == {"reason": "customer left"}
        assert journal["~cancel"]["r"] < journal["tests.cg.release#1"]["r"]
        assert len(await _events(env, handle.run_id, "run.canceled")) == 1


async def test_cancel_of_a_run_executing_a_step_interrupts_it_and_the_cleanup_runs(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(store=store, concurrency=1) as env:
        handle = await env.start(charging_flow, "o-2")
        busy = asyncio.create_task(env.run_until_idle())
        await entered("charge").wait()
        await env.client.cancel(handle.run_id, reason="fraud suspected")
        assert SEEN == ["charging"]  # the cancel itself does not reach into the worker
        await env.advance(env.worker.lease_ttl / 3)  # one heartbeat: it learns of the cancel
        await busy
        assert SEEN == ["charging", "charge interrupted", "cancelled at the step"]
        assert RAN == {"reserve": 1, "charge": 1, "release": 1}
        assert not env.worker._inflight
        record = await env.client.get(handle.run_id)
        assert (record.status, record.reason) == (RunStatus.CANCELED, "fraud suspected")
        journal = await _journal(store, handle.run_id)
        assert "tests.cg.charge#1" not in journal  # nothing of the interrupted step
        assert journal["tests.cg.release#1"]["state"] == "ok"
        types = [e.type for e in await env.client.events(handle.run_id)]
        assert types.count("step.completed") == 2  # reserve and release


async def test_a_replay_after_the_cleanup_parked_gives_the_cancel_at_the_same_point(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(store=store, sticky_cache=0) as env:  # every wake-up replays
        handle = await env.start(slow_cleanup_flow, "o-3")
        await env.run_until_idle()
        await env.client.cancel(handle.run_id, reason="out of stock", grace=60)
        await env.run_until_idle()
        # the cleanup ran its compensations and parks on its sleep
        assert await handle.status() == RunStatus.WAITING_FOR_SIGNAL
        assert RAN == {"reserve": 1, "release": 1, "notify customer": 1}
        parked = await _journal(store, handle.run_id)
        await env.advance(10)
        # the next activation replayed the journal through the cancel: nothing ran twice
        assert SEEN == ["cancelled", "cancelled"]
        assert RAN == {"reserve": 1, "release": 1, "notify customer": 1, "notify ops": 1}
        record = await env.client.get(handle.run_id)
        assert (record.status, record.reason) == (RunStatus.CANCELED, "out of stock")
        journal = await _journal(store, handle.run_id)
        for key, rec in parked.items():  # the replay rewrote nothing it had
            if rec["state"] == "ok":
                assert journal[key] == rec
        assert journal["tests.cg.notify#2"]["r"] > journal["~cancel"]["r"]


async def test_the_grace_period_running_out_forces_the_cancel(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(hung_cleanup_flow, "o-4")
        await env.run_until_idle()
        await env.client.cancel(handle.run_id, reason="timeout", grace=timedelta(seconds=20))
        await env.run_until_idle()
        assert await handle.status() == RunStatus.WAITING_FOR_SIGNAL  # the cleanup sleeps
        await env.advance(19)
        assert await handle.status() == RunStatus.WAITING_FOR_SIGNAL
        await env.advance(1)
        record = await env.client.get(handle.run_id)
        assert (record.status, record.reason) == (RunStatus.CANCELED, "timeout")
        assert RAN == {"reserve": 1, "release": 1}  # the rest of the cleanup never ran
        (forced,) = await _events(env, handle.run_id, "run.canceled")
        assert forced["forced"] == "grace_expired"
        await env.advance(3600)
        assert RAN == {"reserve": 1, "release": 1}
        with pytest.raises(RunCanceled):
            await handle.result()


async def test_the_grace_period_running_out_interrupts_a_hung_compensation_step(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(store=store, concurrency=1) as env:
        handle = await env.start(hung_step_cleanup_flow, "o-5")
        await env.run_until_idle()
        await env.client.cancel(handle.run_id, reason="stop", grace=5)
        busy = asyncio.create_task(env.run_until_idle())
        await entered("hung").wait()
        moving = asyncio.create_task(env.advance(5))  # the deadline forces the cancel...
        with pytest.raises(RunCanceled):
            await handle.result()
        assert SEEN == []  # ...while the worker's cleanup still runs
        await env.advance(1)  # its next heartbeat finds the lease lost
        await moving
        await busy
        assert SEEN == ["hung release interrupted"]
        assert not env.worker._inflight
        record = await env.client.get(handle.run_id)
        assert (record.status, record.reason) == (RunStatus.CANCELED, "stop")


async def test_a_second_cancel_during_the_cleanup_forces_it_at_once(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(hung_cleanup_flow, "o-6")
        await env.run_until_idle()
        await env.client.cancel(handle.run_id, reason="customer left", grace=600)
        await env.run_until_idle()
        assert await handle.status() == RunStatus.WAITING_FOR_SIGNAL
        await env.client.cancel(handle.run_id, reason="now, please", actor="ops")
        record = await env.client.get(handle.run_id)
        # forced at once; the run keeps the reason it was asked to stop for
        assert (record.status, record.reason) == (RunStatus.CANCELED, "customer left")
        (forced,) = await _events(env, handle.run_id, "run.canceled")
        assert forced == {"reason": "now, please", "actor": "ops", "forced": "second_cancel"}
        with pytest.raises(InvalidTransition):
            await env.client.cancel(handle.run_id, reason="a third time")
        await env.advance(3600)
        assert RAN == {"reserve": 1, "release": 1}


async def test_a_pending_run_is_canceled_at_once(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(order_flow, "o-7")
        await env.client.cancel(handle.run_id, reason="never mind", grace=60)
        record = await env.client.get(handle.run_id)
        assert (record.status, record.reason) == (RunStatus.CANCELED, "never mind")
        assert await _events(env, handle.run_id, "run.cancel_requested") == []
        await env.run_until_idle()
        assert RAN == {}  # no flow code ran


async def test_grace_zero_cancels_a_parked_run_at_once(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(order_flow, "o-8")
        await env.run_until_idle()
        await env.client.cancel(handle.run_id, reason="abort", grace=0)
        assert await handle.status() == RunStatus.CANCELED
        await env.run_until_idle()
        assert SEEN == [] and RAN == {"reserve": 1}  # no cleanup


async def test_a_flow_that_swallows_the_cancel_ends_canceled_with_its_result_kept(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(swallowing_flow, "o-9")
        await env.run_until_idle()
        await env.client.cancel(handle.run_id, reason="changed plans")
        await env.run_until_idle()
        record = await env.client.get(handle.run_id)
        assert (record.status, record.reason) == (RunStatus.CANCELED, "changed plans")
        assert record.result == "refunded"
        with pytest.raises(RunCanceled):
            await handle.result()


@pytest.mark.parametrize(
    "grace", [-1, -0.5, timedelta(seconds=-1), "30", None, True, float("nan"), float("inf")]
)
async def test_an_invalid_grace_is_refused_naming_it(grace: Any) -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(order_flow, "o-10")
        await env.run_until_idle()
        with pytest.raises(InvalidArgument, match="grace"):
            await env.client.cancel(handle.run_id, reason="x", grace=grace)
        assert await handle.status() == RunStatus.WAITING_FOR_SIGNAL  # nothing changed
        assert await _events(env, handle.run_id, "run.cancel_requested") == []


CLIENTS: list[Client] = []


@step(name="tests.cg.cancel_myself")
async def cancel_myself(run_id: str) -> str:
    """Asks for the run's own cancel while its activation is running (no heartbeat
    comes before the flow parks)."""
    await CLIENTS[0].cancel(run_id, reason="raced the park")
    return "asked"


@flow(name="tests.cg.parks_after_the_request")
async def parks_after_the_request(own_id: str) -> str:
    await cancel_myself(own_id)
    try:
        await wait_for("paid")
    except asyncio.CancelledError:
        await release("raced")
        raise
    return "paid"


async def test_a_request_that_came_in_before_the_run_parked_is_not_lost(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(store=store) as env:
        CLIENTS[:] = [env.client]
        handle = await env.start(parks_after_the_request, "p-1", run_id="p-1")
        await env.run_until_idle()  # the park script saw the request: queued again
        assert RAN == {"release": 1}
        record = await env.client.get(handle.run_id)
        assert (record.status, record.reason) == (RunStatus.CANCELED, "raced the park")


# -- a real worker process killed during the cleanup ------------------------------------


@flow(name="tests.cg.process_cleanup")
async def process_cleanup(markers: str, release_file: str) -> str:
    await note(markers, "reserved")
    try:
        await wait_for("paid")
    except asyncio.CancelledError:
        await note(markers, "compensated")
        await hold(markers, "releasing", release_file)  # the first worker dies in here
        raise
    return "paid"


@pytest.mark.redis
@pytest.mark.slow
async def test_a_worker_killed_during_the_cleanup_is_replaced_without_compensating_twice(
    workers: Workers, client: Client, real_store: RedisStore, tmp_path: Path
) -> None:
    markers, release_file = tmp_path / "markers", tmp_path / "release"
    first = workers.spawn("--concurrency", "1", module="tests.test_cancel_grace")
    run_id = f"cg-{uuid.uuid4().hex[:8]}"
    handle = await client.start(process_cleanup, str(markers), str(release_file), run_id=run_id)

    async def parked() -> bool:
        return await handle.status() == RunStatus.WAITING_FOR_SIGNAL

    await until(parked, 15, "the run to park on its wait", first)
    await client.cancel(run_id, reason="customer left", grace=120)
    await until(lambda: labelled(markers, "releasing"), 15, "the cleanup to run", first)
    first.kill()  # mid-cleanup: the compensation is recorded, the release in flight

    second = workers.spawn("--concurrency", "1", module="tests.test_cancel_grace")
    await until(lambda: len(labelled(markers, "releasing")) == 2, 15, "a takeover", second)
    release_file.touch()
    with pytest.raises(RunCanceled):
        await handle.result(timeout=15)
    record = await client.get(run_id)
    assert (record.status, record.reason) == (RunStatus.CANCELED, "customer left")
    assert [m.pid for m in labelled(markers, "reserved")] == [first.pid]
    assert [m.pid for m in labelled(markers, "compensated")] == [first.pid]  # not re-run
    assert [m.pid for m in labelled(markers, "releasing")] == [first.pid, second.pid]
    journal = await _journal(real_store, run_id)
    assert journal["~cancel"]["value"] == {"reason": "customer left"}


async def test_resuming_a_run_that_handled_its_cancel_continues_from_before_it(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(order_flow, "o-11")
        await env.run_until_idle()
        await env.client.cancel(handle.run_id, reason="customer left")
        await env.run_until_idle()
        assert await handle.status() == RunStatus.CANCELED
        before = await env.client.checkpoints(handle.run_id)
        assert [(c.kind, c.step_key) for c in before] == [
            ("run_started", None), ("step_completed", "tests.cg.reserve#1"),
            ("waiting_for_signal", None), ("step_completed", "tests.cg.release#1"),
            ("run_finished", None),
        ]  # fmt: skip

        await env.client.resume(handle.run_id, actor="ops")
        await env.run_until_idle()

        # not canceled again: it waits where it was when the cancel came
        assert await handle.status() == RunStatus.WAITING_FOR_SIGNAL
        types = [e.type for e in await env.client.events(handle.run_id)]
        assert types[types.index("run.resumed") :] == ["run.resumed", "run.waiting_for_signal"]
        record = await env.client.get(handle.run_id)
        assert record.resume_from_checkpoint_id == "3"  # it parked there, before the cancel
        journal = await _journal(store, handle.run_id)
        assert sorted(journal) == ["tests.cg.reserve#1", "~wait:paid#1"]  # no cancel, no cleanup
        # the cleanup's checkpoint is history: still listed
        assert (await env.client.checkpoints(handle.run_id))[: len(before)] == before

        assert await env.client.signal(handle.run_id, "paid") is True
        await env.run_until_idle()
        assert await handle.result() == "paid"
        assert SEEN == ["cancelled at the wait"]
        assert RAN == {"reserve": 1, "release": 1}  # nothing recorded ran twice


async def test_a_resumed_run_canceled_again_cleans_up_again(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(order_flow, "o-13")
        await env.run_until_idle()
        await env.client.cancel(handle.run_id, reason="customer left")
        await env.run_until_idle()
        await env.client.resume(handle.run_id)
        await env.run_until_idle()

        await env.client.cancel(handle.run_id, reason="out of stock")
        await env.run_until_idle()

        record = await env.client.get(handle.run_id)
        assert (record.status, record.reason) == (RunStatus.CANCELED, "out of stock")
        assert SEEN == ["cancelled at the wait", "cancelled at the wait"]
        assert RAN == {"reserve": 1, "release": 2}  # the second cancel's own cleanup
        journal = await _journal(store, handle.run_id)
        assert journal["~cancel"]["value"] == {"reason": "out of stock"}
        steps = [c.step_key for c in await env.client.checkpoints(handle.run_id) if c.step_key]
        assert steps == ["tests.cg.reserve#1", "tests.cg.release#1", "tests.cg.release#1"]


async def test_a_fork_of_a_run_that_handled_its_cancel_is_canceled_again(
    memory_store: RedisStore,
) -> None:
    async with FlowTestEnv(store=memory_store) as env:
        handle = await env.start(order_flow, "o-11")
        await env.run_until_idle()
        await env.client.cancel(handle.run_id, reason="customer left")
        await env.run_until_idle()
        forked = await env.client.fork(handle.run_id)  # from its head: after the cancel
        await env.run_until_idle()
        copy = await env.client.get(forked.run_id)
        assert (copy.status, copy.reason) == (RunStatus.CANCELED, "customer left")
        assert RAN == {"reserve": 1, "release": 1}  # the copy replayed the cleanup


@flow(name="tests.cg.side_wait")
async def side_wait_flow(order: str) -> str:
    hold_id = await reserve(order)
    extra = asyncio.ensure_future(wait_for("extra"))  # a task the cancel does not reach
    try:
        await wait_for("paid")
    except asyncio.CancelledError:
        SEEN.append(f"cleanup got {await extra}")
        await release(hold_id)
        raise
    return f"paid with {await extra}"


async def test_a_resume_keeps_what_a_call_made_before_the_cancel_got_during_the_cleanup(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(side_wait_flow, "o-14")
        await env.run_until_idle()
        await env.client.cancel(handle.run_id, reason="customer left")
        await env.run_until_idle()  # the cleanup waits for "extra"
        await env.client.signal(handle.run_id, "extra", "gift wrap")
        await env.run_until_idle()
        assert await handle.status() == RunStatus.CANCELED

        await env.client.resume(handle.run_id)
        await env.run_until_idle()
        journal = await _journal(store, handle.run_id)
        # the wait was called before the cancel: its signal is kept, not asked again
        assert journal["~wait:extra#1"]["value"] == "gift wrap"
        assert "~cancel" not in journal and "tests.cg.release#1" not in journal
        await env.client.signal(handle.run_id, "paid")
        await env.run_until_idle()
        assert await handle.result() == "paid with gift wrap"
        assert SEEN == ["cleanup got gift wrap"]
        assert RAN == {"reserve": 1, "release": 1}


async def test_a_worker_keeping_the_cleanup_in_memory_does_not_continue_it_after_a_resume(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(store=store) as env:  # sticky: parked runs are kept in memory
        handle = await env.start(slow_cleanup_flow, "o-15")
        await env.run_until_idle()
        await env.client.cancel(handle.run_id, reason="out of stock", grace=60)
        await env.run_until_idle()  # the cleanup parks on its sleep, kept by the worker
        kept = env.worker._sticky
        assert kept is not None and handle.run_id in kept
        await env.client.cancel(handle.run_id, reason="now")  # forced: the cleanup never ends

        await env.client.resume(handle.run_id)
        await env.advance(10)  # when the kept cleanup's sleep would have ended

        assert await handle.status() == RunStatus.WAITING_FOR_SIGNAL  # on "paid", again
        assert RAN == {"reserve": 1, "release": 1, "notify customer": 1}  # no "notify ops"
        assert SEEN == ["cancelled"]
        await env.client.signal(handle.run_id, "paid")
        await env.run_until_idle()
        assert await handle.result() == "paid"


async def test_a_cancel_reaches_a_gather_whose_sibling_is_executing(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(side_by_side_flow, "o-12")
        busy = asyncio.create_task(env.run_until_idle())
        await entered("charge").wait()
        await env.client.cancel(handle.run_id, reason="stop")
        await env.advance(env.worker.lease_ttl / 3)
        await busy
        assert SEEN == ["charging", "charge interrupted"]
        assert await handle.status() == RunStatus.WAITING_FOR_SIGNAL  # its cleanup's timer
        await env.advance(5)
        record = await env.client.get(handle.run_id)
        assert (record.status, record.reason) == (RunStatus.CANCELED, "stop")
        assert RAN == {"reserve": 1, "charge": 1, "release": 1}
        journal = await _journal(store, handle.run_id)
        assert journal["tests.cg.reserve#1"]["r"] < journal["~cancel"]["r"]
        assert "tests.cg.charge#1" not in journal


@flow(name="tests.cg.process_resume")
async def process_resume(markers: str) -> str:
    await note(markers, "reserved")
    try:
        paid = await wait_for("paid")
    except asyncio.CancelledError:
        await note(markers, "compensated")
        await sleep(3600)  # the cleanup parks: the worker keeps it in memory
        raise
    await note(markers, "shipped")
    return f"paid {paid}"


@pytest.mark.redis
@pytest.mark.slow
async def test_a_worker_process_continues_a_resumed_run_from_before_its_cancel(
    workers: Workers, client: Client, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    worker = workers.spawn("--concurrency", "1", module="tests.test_cancel_grace")
    run_id = f"cg-{uuid.uuid4().hex[:8]}"
    handle = await client.start(process_resume, str(markers), run_id=run_id)

    async def parked_after(event: str) -> bool:
        types = [e.type for e in await client.events(run_id, limit=1000)]
        return event in types and "run.waiting_for_signal" in types[types.index(event) :]

    await until(lambda: parked_after("run.started"), 15, "the run to park", worker)
    await client.cancel(run_id, reason="customer left", grace=600)
    await until(lambda: parked_after("run.cancel_requested"), 15, "the cleanup to park", worker)
    await client.cancel(run_id, reason="now")  # forced, with the cleanup held in memory

    await client.resume(run_id, actor="ops")
    await until(lambda: parked_after("run.resumed"), 15, "the resumed run to park", worker)
    assert await client.signal(run_id, "paid", "in full") is True

    assert await handle.result(timeout=15) == "paid in full"
    assert [len(labelled(markers, label)) for label in ("reserved", "compensated", "shipped")] == [
        1, 1, 1,
    ]  # fmt: skip
    assert "~cancel" not in (await _journal_of(client, run_id))


async def _journal_of(client: Client, run_id: str) -> dict[str, str]:
    lin = await client.store.read_lineage(run_id)
    assert lin is not None
    return lin.journal
