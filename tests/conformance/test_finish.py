"""Finishing a run, and the blocking waits that callers and workers use."""

from __future__ import annotations

import asyncio

import pytest

from sdk._types import RunStatus
from sdk.errors import InvalidTransition, LeaseLost
from stores.redis import RedisStore
from tests.conformance._support import (
    T0,
    TTL,
    claim_ids,
    new_run,
    start_and_claim,
    status_of,
)

# Generous: these waits must be woken, not time out; nothing here measures speed.
WAKE_TIMEOUT = 5.0


async def test_finish_completes_the_run_with_its_fields(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")

    await store.finish(
        "r1", claim.run.fence, RunStatus.COMPLETED, T0 + 2,
        {"result": '{"total":12345678901234567890}', "result_type": "m:T"},
    )  # fmt: skip

    stored = await store.get_run("r1")
    assert stored is not None
    assert stored.record.status is RunStatus.COMPLETED
    assert stored.raw_result == '{"total":12345678901234567890}'
    assert stored.record.result == {"total": 12345678901234567890}
    assert stored.result_type == "m:T"
    assert stored.record.finished_at is not None
    assert stored.record.finished_at.timestamp() == T0 + 2
    assert (await store.tick(T0 + TTL + 1, 10, "{}")).recovered == 0  # lease gone
    assert await claim_ids(store, now=T0 + TTL + 1) == []


async def test_finish_twice_is_refused(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")
    await store.finish("r1", claim.run.fence, RunStatus.COMPLETED, T0, {"result": "1"})

    with pytest.raises(LeaseLost):
        await store.finish("r1", claim.run.fence, RunStatus.FAILED, T0, {})

    assert await status_of(store, "r1") is RunStatus.COMPLETED


async def test_finish_to_a_status_the_table_forbids_raises_invalid_transition(
    store: RedisStore,
) -> None:
    claim = await start_and_claim(store, "r1")

    with pytest.raises(InvalidTransition):
        await store.finish("r1", claim.run.fence, RunStatus.PENDING, T0, {})

    assert await status_of(store, "r1") is RunStatus.RUNNING


async def test_wait_finished_times_out_until_the_run_finishes(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")
    assert await store.wait_finished("r1", 0.05) is False
    assert await store.wait_finished("unknown", 0.05) is False

    await store.finish("r1", claim.run.fence, RunStatus.COMPLETED, T0, {"result": "1"})

    assert await store.wait_finished("r1", 0.05) is True
    assert await store.wait_finished("r1", 0.05) is True  # reading does not consume it


async def test_wait_finished_wakes_every_waiter_on_finish(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")
    waiters = [asyncio.create_task(store.wait_finished("r1", WAKE_TIMEOUT)) for _ in range(3)]
    await asyncio.sleep(0.05)  # let the waiters block (a later start sees the notice anyway)

    await store.finish("r1", claim.run.fence, RunStatus.FAILED, T0, {"reason": "x"})

    assert await asyncio.gather(*waiters) == [True, True, True]


async def test_wait_finished_is_woken_by_cancel(store: RedisStore) -> None:
    await store.create_run(new_run("r1"))
    waiter = asyncio.create_task(store.wait_finished("r1", WAKE_TIMEOUT))
    await asyncio.sleep(0)

    await store.cancel("r1", "stop", T0)

    assert await waiter is True


async def test_resume_clears_the_finish_notice(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")
    await store.finish("r1", claim.run.fence, RunStatus.FAILED, T0, {"reason": "x"})
    await store.resume("r1", None)

    assert await store.wait_finished("r1", 0.05) is False


async def test_wait_ready_is_woken_by_create_run(store: RedisStore) -> None:
    waiter = asyncio.create_task(store.wait_ready(None, WAKE_TIMEOUT))
    await asyncio.sleep(0)

    await store.create_run(new_run("r1"))

    assert await waiter is True  # False would mean it ran into its timeout


async def test_wait_ready_for_a_queue_is_woken_by_a_run_on_it(store: RedisStore) -> None:
    waiter = asyncio.create_task(store.wait_ready(["mail"], WAKE_TIMEOUT))
    await asyncio.sleep(0)

    await store.create_run(new_run("r1", queue="mail"))

    assert await waiter is True


async def test_wait_ready_times_out_when_nothing_is_ready(store: RedisStore) -> None:
    assert await store.wait_ready(None, 0.05) is False
    await store.create_run(new_run("r1", queue="other"))
    assert await store.wait_ready(["mail"], 0.05) is False


async def test_wait_ready_is_woken_by_a_signal_that_wakes_a_run(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")
    await store.suspend("r1", claim.run.fence, T0, None, RunStatus.WAITING_FOR_SIGNAL, [], ["s:go"])
    while await store.wait_ready(None, 0.01):  # drain the tokens start left
        pass
    waiter = asyncio.create_task(store.wait_ready(None, WAKE_TIMEOUT))
    await asyncio.sleep(0)

    await store.signal("r1", "s:go", "1", None)

    assert await waiter is True
