"""Queue limits at claim time (`QueueLimits`), max_pending, delayed starts, queue_stats."""

from __future__ import annotations

from sdk.store import Mailbox, QueueLimits, RunStatus, Store
from testing.conformance._support import (
    OWNER,
    RECOVERY_ERROR,
    T0,
    TTL,
    async_checks,
    new_run,
    status_of,
    tick,
    together,
)

Q = "limited"


async def _claim(
    store: Store, limits: list[QueueLimits], *, now: float = T0, owner: str = OWNER,
    limit: int = 100,
) -> list[str]:  # fmt: skip
    claims = await store.claim(owner, None, limit, now, TTL, limits=limits)
    return [c.run.run_id for c in claims]


async def _stats(store: Store, limits: list[QueueLimits], now: float = T0) -> tuple[object, ...]:
    [s] = [s for s in await store.queue_stats([Q], limits, now) if s.queue == Q]
    return s.pending, s.executing, s.limited_by


@async_checks
class QueueLimitChecks:
    """`claim(limits=...)`, `create_run(max_pending=...)`, delayed starts, `queue_stats`."""

    # The limits of a queue hold per partition on a store with several (so do
    # FIFO and max_pending): these checks put their runs in one (`together`).

    async def test_concurrency_caps_executing_runs_of_a_queue(self, store: Store) -> None:
        r = together(store, *(f"r{i}" for i in range(5)))
        for run_id in r:
            await store.create_run(new_run(run_id, queue=Q))
        await store.create_run(new_run("free", queue="other", created_at=T0 + 1))
        limits = [QueueLimits(Q, concurrency=2)]

        assert await _claim(store, limits) == [r[0], r[1], "free"]
        assert await _claim(store, limits) == []  # the queue's two slots are taken
        assert await _stats(store, limits) == (3, 2, "concurrency")

    async def test_a_slot_comes_back_when_its_run_ends_parks_or_is_released(
        self, store: Store
    ) -> None:
        r = together(store, *(f"r{i}" for i in range(4)))
        for run_id in r:
            await store.create_run(new_run(run_id, queue=Q))
        limits = [QueueLimits(Q, concurrency=1)]
        (first,) = await store.claim(OWNER, None, 10, T0, TTL, limits=limits)
        await store.finish(r[0], first.run.fence, RunStatus.COMPLETED, T0, result="1")
        (second,) = await store.claim(OWNER, None, 10, T0, TTL, limits=limits)
        assert second.run.run_id == r[1]
        await store.suspend(r[1], second.run.fence, T0, None, RunStatus.WAITING_FOR_SIGNAL,
                            [], [Mailbox("go")])  # fmt: skip
        (third,) = await store.claim(OWNER, None, 10, T0, TTL, limits=limits)
        assert third.run.run_id == r[2]
        await store.release(r[2], third.run.fence)
        assert await _claim(store, limits) == [r[3]]  # the slot is free (r2 queued behind)

    async def test_an_expired_lease_gives_its_slot_back(self, store: Store) -> None:
        r = together(store, "r0", "r1")
        for run_id in r:
            await store.create_run(new_run(run_id, queue=Q))
        limits = [QueueLimits(Q, concurrency=1)]
        assert await _claim(store, limits) == [r[0]]
        claims, result = await store.poll(
            "other", None, 10, T0 + TTL + 1, TTL, 10, RECOVERY_ERROR, limits=limits
        )
        assert result.recovered == 1
        assert [c.run.run_id for c in claims] == [r[1]]  # r0 went back behind r1

    async def test_worker_room_caps_one_claim_and_is_reported(self, store: Store) -> None:
        r = together(store, "r0", "r1", "r2")
        for run_id in r:
            await store.create_run(new_run(run_id, queue=Q))
        claims, result = await store.poll(
            OWNER, None, 10, T0, TTL, 10, RECOVERY_ERROR,
            limits=[QueueLimits(Q, worker_room=2)],
        )  # fmt: skip
        assert [c.run.run_id for c in claims] == [r[0], r[1]]
        assert result.capped  # r2 waits for this worker's own cap
        assert await _claim(store, [QueueLimits(Q, worker_room=1)], owner="w2") == [r[2]]

    async def test_worker_room_caps_a_claim_across_partitions(self, store: Store) -> None:
        # A worker's own cap is the worker's, wherever its runs live.
        for i in range(6):
            await store.create_run(new_run(f"r{i}", queue=Q, created_at=T0 + i))
        claims, result = await store.poll(
            OWNER, None, 10, T0 + 9, TTL, 10, RECOVERY_ERROR,
            limits=[QueueLimits(Q, worker_room=4)],
        )  # fmt: skip
        assert [c.run.run_id for c in claims] == ["r0", "r1", "r2", "r3"]
        assert result.capped

    async def test_key_concurrency_passes_over_a_full_key(self, store: Store) -> None:
        r = together(store, *(f"r{i}" for i in range(5)), "nokey")
        for run_id, key in zip(r, ["a", "a", "b", "a", "b"], strict=False):
            await store.create_run(new_run(run_id, queue=Q, concurrency_key=key))
        await store.create_run(new_run(r[5], queue=Q))
        limits = [QueueLimits(Q, key_concurrency=1)]

        assert await _claim(store, limits) == [r[0], r[2], r[5]]
        assert await _stats(store, limits) == (3, 3, "key")
        assert (await store.get_run(r[0])).concurrency_key == "a"  # type: ignore[union-attr]

    async def test_a_rate_limit_spaces_first_activations(self, store: Store) -> None:
        r = together(store, "r0", "r1", "r2")
        for run_id in r:
            await store.create_run(new_run(run_id, queue=Q))
        limits = [QueueLimits(Q, rate_interval=5.0)]

        assert await _claim(store, limits) == [r[0]]
        for free in (10, 0):  # a caller with no slot left is told too
            claims, result = await store.poll(
                OWNER, None, free, T0 + 4, TTL, 10, RECOVERY_ERROR, limits=limits
            )
            assert claims == []
            assert result.next_due == T0 + 5  # the queue's next room (r0's lease ends later)
        assert await _stats(store, limits, T0 + 4) == (2, 1, "rate")
        assert await _claim(store, limits, now=T0 + 5) == [r[1]]
        assert await _claim(store, limits, now=T0 + 100) == [r[2]]  # no burst after idling

    async def test_max_pending_refuses_a_new_run_but_not_a_repeat(self, store: Store) -> None:
        r0, r1 = together(store, "r0", "r1")
        await store.create_run(new_run(r0, queue=Q), max_pending=1)
        refused = await store.create_run(new_run(r1, queue=Q), max_pending=1)
        assert (refused.created, refused.full) == (False, 1)
        assert await store.get_run(r1) is None
        again = await store.create_run(new_run(r0, queue=Q), max_pending=1)
        assert (again.created, again.conflict, again.full) == (False, False, None)

    async def test_a_delayed_start_is_queued_when_it_is_due(self, store: Store) -> None:
        later, at = together(store, "later", "at")
        await store.create_run(new_run(later, queue=Q, start_in=30.0))
        await store.create_run(new_run(at, queue=Q, start_at=T0 + 60))
        assert await _claim(store, []) == []
        assert await status_of(store, later) == RunStatus.PENDING
        assert (await store.tick(T0 + 1, 10, RECOVERY_ERROR)).next_due == T0 + 30
        assert await tick(store, T0 + 30) == (1, 0)
        assert await _claim(store, [], now=T0 + 30) == [later]
        fired, _ = await tick(store, T0 + 60)  # (also recovers `later`: its lease ran out)
        assert fired == 1
        assert await _claim(store, [], now=T0 + 60) == [at, later]
        assert (await store.get_run(at)).start_at == T0 + 60  # type: ignore[union-attr]
