"""`poll` (a worker's loop: tick then claim, one round trip) and `watch` (a waiter's read)."""

from __future__ import annotations

from sdk._types import RunStatus
from stores.redis import RedisStore
from tests.conformance._support import (
    OWNER,
    RECOVERY_ERROR,
    T0,
    TTL,
    new_run,
    start_and_claim,
    status_of,
)


async def poll(
    store: RedisStore, now: float, *, limit: int = 10, queues: list[str] | None = None,
    max_recoveries: int = 10,
) -> tuple[list[str], int, int, float | None]:  # fmt: skip
    claims, tick = await store.poll(OWNER, queues, limit, now, TTL, max_recoveries, RECOVERY_ERROR)
    return [c.run.record.run_id for c in claims], tick.fired, tick.recovered, tick.next_due


async def test_poll_claims_like_claim(store: RedisStore) -> None:
    await store.create_run(new_run("low", priority=5, queue="qa"))
    await store.create_run(new_run("high", priority=-5, queue="qb"))
    await store.create_run(new_run("mid", queue="qc"))

    assert await poll(store, T0, queues=["qa", "qb"]) == (["high", "low"], 0, 0, None)
    # next_due is read before this poll's claims: here, the leases the first one took
    assert await poll(store, T0) == (["mid"], 0, 0, T0 + TTL)


async def test_poll_claims_a_run_whose_timer_fired_in_the_same_call(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")
    await store.suspend("r1", claim.run.fence, T0, T0 + 30, RunStatus.WAITING_FOR_SIGNAL, [], [])

    assert await poll(store, T0 + 29.999) == ([], 0, 0, T0 + 30)
    assert await poll(store, T0 + 30) == (["r1"], 1, 0, None)
    assert await status_of(store, "r1") is RunStatus.RUNNING


async def test_poll_recovers_an_expired_lease_and_claims_the_run_again(
    store: RedisStore,
) -> None:
    claim = await start_and_claim(store, "r1")

    taken, fired, recovered, _ = await poll(store, T0 + TTL)

    assert (taken, fired, recovered) == (["r1"], 0, 1)
    stored = await store.get_run("r1")
    assert stored is not None
    assert stored.record.status is RunStatus.RUNNING
    assert stored.fence >= claim.run.fence + 2  # one bump to fence out, one for the claim


async def test_poll_with_no_free_slot_still_ticks(store: RedisStore) -> None:
    await start_and_claim(store, "r1")
    await store.create_run(new_run("r2"))

    assert await poll(store, T0 + TTL, limit=0) == ([], 0, 1, None)

    assert await status_of(store, "r1") is RunStatus.REPLAYING
    assert await status_of(store, "r2") is RunStatus.PENDING


async def test_poll_fails_a_run_recovered_too_often(store: RedisStore) -> None:
    await start_and_claim(store, "r1")

    taken, _, recovered, _ = await poll(store, T0 + TTL, max_recoveries=0)

    assert (taken, recovered) == ([], 1)
    stored = await store.get_run("r1")
    assert stored is not None
    assert stored.record.status is RunStatus.FAILED
    assert stored.record.reason == "max_recoveries_exceeded"
