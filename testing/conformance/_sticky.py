"""Sticky parking: `Store.suspend(sticky=...)`, `Claim.cached`, `wait_ready(owner=...)`."""

from __future__ import annotations

import asyncio

from sdk.store import Claim, Parked, RunStatus, Store
from testing.conformance._support import (
    GO,
    OWNER,
    T0,
    TTL,
    async_checks,
    new_run,
    start_and_claim,
    step_record,
)

OTHER = "worker-b"
DELAY = 5.0
WAIT = RunStatus.WAITING_FOR_SIGNAL


async def parked_sticky(store: Store, run_id: str = "r1") -> Claim:
    """A run that recorded one step and parked on GO, kept in memory by OWNER."""
    claim = await start_and_claim(store, run_id)
    assert await store.record(run_id, claim.run.fence, "a#1", step_record("a#1", 0, "x"))
    parked = await store.suspend(run_id, claim.run.fence, T0, None, WAIT, [], [GO], sticky=DELAY)
    assert parked is Parked.PARKED
    return claim


async def claim_one(store: Store, owner: str, now: float) -> Claim | None:
    claims = await store.claim(owner, None, 1, now, TTL)
    return claims[0] if claims else None


@async_checks
class StickyChecks:
    """A sticky park routes the wake-up to its owner first and lets it skip the journal."""

    async def test_the_owner_claims_a_sticky_run_without_its_journal(self, store: Store) -> None:
        await parked_sticky(store)
        await store.signal("r1", GO, '"go"', None, now=T0)

        claim = await claim_one(store, OWNER, T0 + 1)

        assert claim is not None and claim.cached
        assert (claim.journal, claim.lineage, claim.mail) == ({}, {}, frozenset({GO}))

    async def test_a_plain_park_claims_with_the_whole_journal(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        assert await store.record("r1", claim.run.fence, "a#1", step_record("a#1", 0, "x"))
        await store.suspend("r1", claim.run.fence, T0, None, WAIT, [], [GO])
        await store.signal("r1", GO, '"go"', None, now=T0)

        again = await claim_one(store, OWNER, T0 + 1)

        assert again is not None and not again.cached
        assert set(again.journal) == {"a#1"}

    async def test_another_worker_gets_a_sticky_run_only_after_the_delay(
        self, store: Store
    ) -> None:
        await parked_sticky(store)
        await store.signal("r1", GO, '"go"', None, now=T0)

        assert await claim_one(store, OTHER, T0 + 1) is None  # it starts counting here
        _, tick = await store.poll(OTHER, None, 1, T0 + 2, TTL, 10, "{}")
        assert tick.next_due == T0 + 1 + DELAY  # when it falls to anyone: look again then
        late = await claim_one(store, OTHER, T0 + 1 + DELAY)

        assert late is not None and not late.cached
        assert set(late.journal) == {"a#1"}

    async def test_a_sticky_run_does_not_hold_back_the_runs_behind_it(self, store: Store) -> None:
        await parked_sticky(store)
        await store.signal("r1", GO, '"go"', None, now=T0)
        await store.create_run(new_run("r2", created_at=T0))

        claim = await claim_one(store, OTHER, T0 + 1)

        assert claim is not None and claim.run.run_id == "r2"

    async def test_a_journal_write_since_the_park_means_no_cached_claim(self, store: Store) -> None:
        await parked_sticky(store)
        await store.signal("r1", GO, '"go"', None, now=T0)
        assert await claim_one(store, OTHER, T0 + 1) is None
        other = await claim_one(store, OTHER, T0 + 1 + DELAY)  # the delay passed: B takes it
        assert other is not None
        assert await store.record("r1", other.run.fence, "b#1", step_record("b#1", 1, "y"))
        await store.release("r1", other.run.fence)

        again = await claim_one(store, OWNER, T0 + 2 + DELAY)

        assert again is not None and not again.cached
        assert set(again.journal) == {"a#1", "b#1"}

    async def test_a_lost_lease_means_no_cached_claim(self, store: Store) -> None:
        await parked_sticky(store)
        await store.signal("r1", GO, '"go"', None, now=T0)
        first = await claim_one(store, OWNER, T0 + 1)
        assert first is not None and first.cached
        await store.tick(T0 + 1 + TTL, 10, "{}")  # its lease expires: recovered

        again = await claim_one(store, OWNER, T0 + 2 + TTL)

        assert again is not None and not again.cached
        assert set(again.journal) == {"a#1"}

    async def test_the_owners_wait_ready_wakes_for_its_sticky_run(self, store: Store) -> None:
        await parked_sticky(store)
        await store.wait_ready(None, 0.001)  # the park's own tokens, if any
        waiter = asyncio.create_task(store.wait_ready(["elsewhere"], 5.0, owner=OWNER))
        await asyncio.sleep(0.05)

        await store.signal("r1", GO, '"go"', None, now=T0)

        assert await asyncio.wait_for(waiter, 5.0) is True
