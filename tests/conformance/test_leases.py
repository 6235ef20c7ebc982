"""Leases: renewal, expiry, recovery, and giving up after too many recoveries."""

from __future__ import annotations

import json

import pytest

from sdk._types import RunStatus
from sdk.errors import LeaseLost
from stores.redis import RedisStore
from tests.conformance._support import (
    RECOVERY_ERROR,
    T0,
    TTL,
    claim_ids,
    journal_of,
    new_run,
    start_and_claim,
    status_of,
    step_record,
)


async def test_tick_leaves_a_live_lease_alone(store: RedisStore) -> None:
    await start_and_claim(store, "r1")

    result = await store.tick(T0 + TTL - 0.001, 10, RECOVERY_ERROR)

    assert (result.fired, result.recovered) == (0, 0)
    assert result.next_due == T0 + TTL
    assert await status_of(store, "r1") is RunStatus.RUNNING


async def test_tick_recovers_an_expired_lease_and_fences_out_the_old_owner(
    store: RedisStore,
) -> None:
    claim = await start_and_claim(store, "r1")
    await store.record("r1", claim.run.fence, "a#1", step_record("a#1", 0, "a"))

    result = await store.tick(T0 + TTL, 10, RECOVERY_ERROR)

    assert result.recovered == 1
    stored = await store.get_run("r1")
    assert stored is not None
    assert stored.record.status is RunStatus.REPLAYING
    assert stored.fence > claim.run.fence
    assert stored.record.recoveries == 1
    with pytest.raises(LeaseLost):
        await store.record("r1", claim.run.fence, "b#1", step_record("b#1", 1, "old"))
    with pytest.raises(LeaseLost):
        await store.finish("r1", claim.run.fence, RunStatus.COMPLETED, T0 + TTL, {"result": "1"})

    (again,) = await store.claim("worker-b", None, 1, T0 + TTL, TTL)
    assert again.run.record.run_id == "r1"
    assert again.run.record.status is RunStatus.RUNNING
    assert again.run.fence > stored.fence
    assert again.journal == {"a#1": step_record("a#1", 0, "a")}


async def test_tick_recovers_each_expired_lease_once(store: RedisStore) -> None:
    await start_and_claim(store, "r1")

    first = await store.tick(T0 + TTL, 10, RECOVERY_ERROR)
    second = await store.tick(T0 + TTL + 1, 10, RECOVERY_ERROR)

    assert (first.recovered, second.recovered) == (1, 0)


async def test_too_many_recoveries_without_progress_fail_the_run(store: RedisStore) -> None:
    now = T0
    await start_and_claim(store, "r1", now=now)
    for expected in (1, 2):
        now += TTL
        assert (await store.tick(now, 2, RECOVERY_ERROR)).recovered == 1
        assert await status_of(store, "r1") is RunStatus.REPLAYING
        assert await claim_ids(store, now=now) == ["r1"]
        stored = await store.get_run("r1")
        assert stored is not None and stored.record.recoveries == expected

    now += TTL
    assert (await store.tick(now, 2, RECOVERY_ERROR)).recovered == 1

    stored = await store.get_run("r1")
    assert stored is not None
    rec = stored.record
    assert rec.status is RunStatus.FAILED
    assert rec.reason == "max_recoveries_exceeded"
    assert rec.error is not None
    assert rec.error.reason == "max_recoveries_exceeded"
    assert rec.error.message == json.loads(RECOVERY_ERROR)["message"]
    assert rec.finished_at is not None and rec.finished_at.timestamp() == now
    assert await claim_ids(store, now=now) == []
    assert await store.wait_finished("r1", 0.05) is True


async def test_progress_resets_the_recovery_count(store: RedisStore) -> None:
    now = T0
    claim = await start_and_claim(store, "r1", now=now)
    for i in range(4):  # with max 2, four expiries would fail it without progress
        await store.record("r1", claim.run.fence, f"s#{i + 1}", step_record(f"s#{i + 1}", i))
        now += TTL
        assert (await store.tick(now, 2, RECOVERY_ERROR)).recovered == 1
        (claim,) = await store.claim("w", None, 1, now, TTL)

    assert await status_of(store, "r1") is RunStatus.RUNNING
    assert len(await journal_of(store, "r1")) == 4


async def test_renew_extends_a_held_lease(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")

    lost = await store.renew([("r1", claim.run.fence)], T0 + 3 * TTL)

    assert lost == []
    assert (await store.tick(T0 + 2 * TTL, 10, RECOVERY_ERROR)).recovered == 0
    assert (await store.tick(T0 + 3 * TTL, 10, RECOVERY_ERROR)).recovered == 1


async def test_renew_returns_the_leases_that_are_lost(store: RedisStore) -> None:
    await store.create_run(new_run("kept"))
    await store.create_run(new_run("expired"))
    await store.create_run(new_run("canceled"))
    await store.create_run(new_run("finished"))
    claims = {c.run.record.run_id: c.run.fence for c in await store.claim("w", None, 4, T0, TTL)}
    await store.cancel("canceled", "x", T0)
    await store.finish("finished", claims["finished"], RunStatus.COMPLETED, T0, {"result": "1"})
    await store.renew([("kept", claims["kept"])], T0 + 2 * TTL)
    await store.tick(T0 + TTL, 10, RECOVERY_ERROR)  # "expired" loses its lease

    lost = await store.renew(list(claims.items()), T0 + 3 * TTL)

    assert sorted(lost) == ["canceled", "expired", "finished"]
    assert await status_of(store, "kept") is RunStatus.RUNNING
    assert await status_of(store, "expired") is RunStatus.REPLAYING


async def test_renew_with_a_stale_fence_does_not_extend(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")

    assert await store.renew([("r1", claim.run.fence - 1)], T0 + 5 * TTL) == ["r1"]

    assert (await store.tick(T0 + TTL, 10, RECOVERY_ERROR)).recovered == 1


async def test_release_requeues_and_bumps_the_fence(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")

    await store.release("r1", claim.run.fence)

    assert (await store.tick(T0 + TTL, 10, RECOVERY_ERROR)).recovered == 0
    (again,) = await store.claim("w", None, 1, T0, TTL)
    assert again.run.fence > claim.run.fence
    await store.release("r1", claim.run.fence)  # stale release: ignored
    assert await claim_ids(store) == []
