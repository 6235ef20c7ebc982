"""The partition-wide indexes: per-status sets, every run, timers, leases, expiry."""

from __future__ import annotations

import pytest

from sdk.store import EventType, Parked, RunStatus
from stores.redis import RedisStore
from tests.redis_layout._support import (
    OK_BOX,
    OWNER,
    RECOVERY_ERROR,
    T0,
    TTL,
    assert_indexed_once,
    indexed,
    new_run,
    run_hash,
    start_and_claim,
    status_index,
    step_record,
)


async def test_the_status_index_follows_every_transition(store: RedisStore) -> None:
    await store.create_run(new_run("r1"))
    await assert_indexed_once(store, "r1")  # pending

    (claim,) = await store.claim(OWNER, None, 1, T0, TTL)
    await assert_indexed_once(store, "r1")  # running

    parked = await store.suspend(
        "r1", claim.run.fence, T0, None, RunStatus.WAITING_FOR_HUMAN, [], [OK_BOX]
    )
    assert parked is Parked.PARKED
    await assert_indexed_once(store, "r1")

    assert await store.signal("r1", OK_BOX, "true", None) is True
    await assert_indexed_once(store, "r1")  # running again

    (claim,) = await store.claim(OWNER, None, 1, T0 + 1, TTL)
    await store.tick(T0 + 1 + TTL, 10, RECOVERY_ERROR)  # lease expired: replaying
    await assert_indexed_once(store, "r1")

    (claim,) = await store.claim(OWNER, None, 1, T0 + 20, TTL)
    await store.record("r1", claim.run.fence, "a#1", step_record("a#1", 0, 1))
    await store.finish("r1", claim.run.fence, RunStatus.FAILED, T0 + 21, reason="x")
    await assert_indexed_once(store, "r1")

    await store.resume("r1", "a#1")
    await assert_indexed_once(store, "r1")

    await store.cancel("r1", "enough", T0 + 30)
    await assert_indexed_once(store, "r1")
    assert set((await status_index(store))["canceled"]) == {"r1"}


async def test_the_status_index_holds_every_run_of_many_once(store: RedisStore) -> None:
    for i in range(6):
        await store.create_run(new_run(f"r{i}", created_at=T0 + i))
    claims = await store.claim(OWNER, None, 4, T0, TTL)  # r0..r3 running
    await store.finish("r0", claims[0].run.fence, RunStatus.COMPLETED, T0, result="1")
    await store.cancel("r4", "no", T0)

    index = await status_index(store)

    assert index["pending"] == {"r5"}
    assert index["running"] == {"r1", "r2", "r3"}
    assert index["completed"] == {"r0"}
    assert index["canceled"] == {"r4"}
    assert sum(len(ids) for ids in index.values()) == 6


async def test_a_derived_run_is_indexed_once_and_listed_by_its_creation_time(
    store: RedisStore,
) -> None:
    await store.derive_run(
        new_run("copy", created_at=T0 + 10, source_run_id="src"), [], [],
        EventType.RUN_REPLAYED, "{}",
    )  # fmt: skip

    await assert_indexed_once(store, "copy")
    assert await store.client.zscore(store.keys.all_runs(0), "copy") == T0 + 10
    assert await indexed(store, "copy") == {"pending", "runs", "queue"}


async def test_a_claim_and_a_suspend_move_the_run_between_queue_leases_and_timers(
    store: RedisStore,
) -> None:
    await store.create_run(new_run("r1"))
    assert await indexed(store, "r1") == {"pending", "runs", "queue"}

    (claim,) = await store.claim(OWNER, None, 1, T0, TTL)
    assert await indexed(store, "r1") == {"running", "runs", "leases"}

    await store.suspend("r1", claim.run.fence, T0, T0 + 5, RunStatus.WAITING_FOR_SIGNAL, [], [])
    assert await indexed(store, "r1") == {"waiting_for_signal", "runs", "timers"}


async def test_a_completed_run_with_a_retention_is_due_in_the_expiry_index(
    store: RedisStore,
) -> None:
    claim = await start_and_claim(store, "r1")

    await store.finish("r1", claim.run.fence, RunStatus.COMPLETED, T0 + 1, result="1",
                       retention=60.0)  # fmt: skip

    assert float((await run_hash(store, "r1"))["expires_at"]) == T0 + 61
    assert await store.client.zscore(store.keys.expiry(0), "r1") == T0 + 61


async def test_a_derived_run_keeps_its_flows_retention_in_the_expiry_index(
    store: RedisStore,
) -> None:
    await store.derive_run(new_run("copy", retention=60.0), [], [], EventType.RUN_REPLAYED, "{}")

    await store.cancel("copy", "not needed", T0 + 20)

    assert await store.client.zscore(store.keys.expiry(0), "copy") == T0 + 80


async def test_resuming_a_canceled_run_takes_it_off_the_expiry_index(store: RedisStore) -> None:
    await store.create_run(new_run("r1", retention=60.0))
    await store.cancel("r1", "oops", T0 + 1)
    assert "expiry" in await indexed(store, "r1")

    await store.resume("r1", None, now=T0 + 2)

    assert "expiry" not in await indexed(store, "r1")
    assert "expires_at" not in await run_hash(store, "r1")


async def test_a_failed_run_is_never_put_on_the_expiry_index(store: RedisStore) -> None:
    await store.create_run(new_run("r1", retention=60.0))
    (claim,) = await store.claim(OWNER, None, 1, T0, TTL)

    await store.finish("r1", claim.run.fence, RunStatus.FAILED, T0 + 1, error="{}",
                       retention=60.0)  # fmt: skip

    assert "expiry" not in await indexed(store, "r1")


@pytest.mark.parametrize("status", [RunStatus.PENDING, RunStatus.FAILED])
async def test_a_stray_expiry_entry_never_deletes_a_pending_or_failed_run(
    store: RedisStore, status: RunStatus
) -> None:
    if status is RunStatus.PENDING:
        await store.create_run(new_run("r1"))
    else:
        claim = await start_and_claim(store, "r1")
        await store.finish("r1", claim.run.fence, RunStatus.FAILED, T0, error="{}")
    await store.client.zadd(store.keys.expiry(0), {"r1": T0})  # e.g. written by hand

    await store.tick(T0 + 1, 10, RECOVERY_ERROR)

    assert (await run_hash(store, "r1"))["status"] == status.value
    assert "expiry" not in await indexed(store, "r1")  # the stray entry is dropped


async def test_a_started_run_with_a_timeout_is_due_in_the_deadline_index(
    store: RedisStore,
) -> None:
    await store.create_run(new_run("r1", timeout=60.0))
    assert "deadlines" not in await indexed(store, "r1")  # pending: not started yet

    (claim,) = await store.claim(OWNER, None, 1, T0 + 5, TTL)

    assert float((await run_hash(store, "r1"))["deadline"]) == T0 + 65
    assert await store.client.zscore(store.keys.base(0) + "deadlines", "r1") == T0 + 65
    await store.finish("r1", claim.run.fence, RunStatus.COMPLETED, T0 + 6, result="1")
    assert "deadlines" not in await indexed(store, "r1")


async def test_a_timed_out_run_is_off_every_index_but_its_status_and_runs(
    store: RedisStore,
) -> None:
    await store.create_run(new_run("r1", timeout=60.0))
    (claim,) = await store.claim(OWNER, None, 1, T0, TTL)
    await store.suspend("r1", claim.run.fence, T0, T0 + 3600, RunStatus.WAITING_FOR_SIGNAL, [], [])

    await store.tick(T0 + 60, 10, RECOVERY_ERROR)

    assert await indexed(store, "r1") == {"failed", "runs"}
    assert (await run_hash(store, "r1"))["reason"] == "timed_out"
