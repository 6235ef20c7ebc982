"""Queue limits at claim time (`QueueLimits`), max_pending, delayed starts, queue_stats."""

from __future__ import annotations

from stores.protocol import Mailbox, QueueLimits, RunStatus, Store
from testing.conformance._support import (
    OWNER,
    RECOVERY_ERROR,
    T0,
    TTL,
    async_checks,
    new_run,
    status_of,
    tick,
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

    async def test_concurrency_caps_executing_runs_of_a_queue(self, store: Store) -> None:
        for i in range(5):
            await store.create_run(new_run(f"r{i}", queue=Q))
        await store.create_run(new_run("free", queue="other"))
        limits = [QueueLimits(Q, concurrency=2)]

        assert await _claim(store, limits) == ["r0", "r1", "free"]
        assert await _claim(store, limits) == []  # the queue's two slots are taken
        assert await _stats(store, limits) == (3, 2, "concurrency")

    async def test_a_slot_comes_back_when_its_run_ends_parks_or_is_released(
        self, store: Store
    ) -> None:
        for i in range(4):
            await store.create_run(new_run(f"r{i}", queue=Q))
        limits = [QueueLimits(Q, concurrency=1)]
        (first,) = await store.claim(OWNER, None, 10, T0, TTL, limits=limits)
        await store.finish("r0", first.run.fence, RunStatus.COMPLETED, T0, result="1")
        (second,) = await store.claim(OWNER, None, 10, T0, TTL, limits=limits)
        assert second.run.run_id == "r1"
        await store.suspend("r1", second.run.fence, T0, None, RunStatus.WAITING_FOR_SIGNAL,
                            [], [Mailbox("go")])  # fmt: skip
        (third,) = await store.claim(OWNER, None, 10, T0, TTL, limits=limits)
        assert third.run.run_id == "r2"
        await store.release("r2", third.run.fence)
        assert await _claim(store, limits) == ["r3"]  # the slot is free (r2 queued behind)

    async def test_an_expired_lease_gives_its_slot_back(self, store: Store) -> None:
        for i in range(2):
            await store.create_run(new_run(f"r{i}", queue=Q))
        limits = [QueueLimits(Q, concurrency=1)]
        assert await _claim(store, limits) == ["r0"]
        claims, result = await store.poll(
            "other", None, 10, T0 + TTL + 1, TTL, 10, RECOVERY_ERROR, limits=limits
        )
        assert result.recovered == 1
        assert [c.run.run_id for c in claims] == ["r1"]  # r0 went back behind r1

    async def test_worker_room_caps_one_claim_and_is_reported(self, store: Store) -> None:
        for i in range(3):
            await store.create_run(new_run(f"r{i}", queue=Q))
        claims, result = await store.poll(
            OWNER, None, 10, T0, TTL, 10, RECOVERY_ERROR,
            limits=[QueueLimits(Q, worker_room=2)],
        )  # fmt: skip
        assert [c.run.run_id for c in claims] == ["r0", "r1"]
        assert result.capped  # r2 waits for this worker's own cap
        assert await _claim(store, [QueueLimits(Q, worker_room=1)], owner="w2") == ["r2"]

    async def test_key_concurrency_passes_over_a_full_key(self, store: Store) -> None:
        for i, key in enumerate(["a", "a", "b", "a", "b"]):
            await store.create_run(new_run(f"r{i}", queue=Q, concurrency_key=key))
        await store.create_run(new_run("nokey", queue=Q))
        limits = [QueueLimits(Q, key_concurrency=1)]

        assert await _claim(store, limits) == ["r0", "r2", "nokey"]
        assert await _stats(store, limits) == (3, 3, "key")
        assert (await store.get_run("r0")).concurrency_key == "a"  # type: ignore[union-attr]

    async def test_a_rate_limit_spaces_first_activations(self, store: Store) -> None:
        for i in range(3):
            await store.create_run(new_run(f"r{i}", queue=Q))
        limits = [QueueLimits(Q, rate_interval=5.0)]

        assert await _claim(store, limits) == ["r0"]
        for free in (10, 0):  # a caller with no slot left is told too
            claims, result = await store.poll(
                OWNER, None, free, T0 + 4, TTL, 10, RECOVERY_ERROR, limits=limits
            )
            assert claims == []
            assert result.next_due == T0 + 5  # the queue's next room (r0's lease ends later)
        assert await _stats(store, limits, T0 + 4) == (2, 1, "rate")
        assert await _claim(store, limits, now=T0 + 5) == ["r1"]
        assert await _claim(store, limits, now=T0 + 100) == ["r2"]  # no burst after idling

    async def test_max_pending_refuses_a_new_run_but_not_a_repeat(self, store: Store) -> None:
        await store.create_run(new_run("r0", queue=Q), max_pending=1)
        refused = await store.create_run(new_run("r1", queue=Q), max_pending=1)
        assert (refused.created, refused.full) == (False, 1)
        assert await store.get_run("r1") is None
        again = await store.create_run(new_run("r0", queue=Q), max_pending=1)
        assert (again.created, again.conflict, again.full) == (False, False, None)

    async def test_a_delayed_start_is_queued_when_it_is_due(self, store: Store) -> None:
        await store.create_run(new_run("later", queue=Q, start_in=30.0))
        await store.create_run(new_run("at", queue=Q, start_at=T0 + 60))
        assert await _claim(store, []) == []
        assert await status_of(store, "later") == RunStatus.PENDING
        assert (await store.tick(T0 + 1, 10, RECOVERY_ERROR)).next_due == T0 + 30
        assert await tick(store, T0 + 30) == (1, 0)
        assert await _claim(store, [], now=T0 + 30) == ["later"]
        fired, _ = await tick(store, T0 + 60)  # (also recovers `later`: its lease ran out)
        assert fired == 1
        assert await _claim(store, [], now=T0 + 60) == ["at", "later"]
        assert (await store.get_run("at")).start_at == T0 + 60  # type: ignore[union-attr]
