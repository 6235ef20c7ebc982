"""Failing a damaged run: `quarantine`; telling an outage from other errors."""

from __future__ import annotations

from sdk.store import RunStatus, Store
from testing.conformance._support import (
    OWNER,
    T0,
    TTL,
    async_checks,
    claim_ids,
    listed_under,
    new_run,
    seen,
    start_and_claim,
    stored,
    types_of,
)

CORRUPT = '{"type":"sdk.errors:CorruptRecord","message":"k: damaged","reason":"corrupt_record"}'


@async_checks
class QuarantineChecks:
    """A run the engine found damaged fails alone, once, and only on its lease."""

    async def test_quarantine_fails_a_leased_run_with_reason_corrupt_record(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "r1")

        assert await store.quarantine("r1", claim.run.fence, T0 + 1, CORRUPT)

        run = await stored(store, "r1")
        assert (run.status, run.reason, run.error) == (RunStatus.FAILED, "corrupt_record", CORRUPT)
        assert run.finished_at == T0 + 1
        assert (await types_of(store, "r1"))[-1] == "run.failed"
        assert await listed_under(store, "r1") == {RunStatus.FAILED}
        assert await store.wait_finished("r1", 0.01)
        assert not await store.record("r1", claim.run.fence, "s#1", "{}", now=T0 + 2)
        await store.tick(T0 + TTL + 1, 10, CORRUPT)
        assert await claim_ids(store, now=T0 + TTL + 1) == []  # nothing runs it again

    async def test_quarantine_changes_nothing_on_another_lease_or_an_ended_run(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "r1")
        before = await seen(store, "r1")

        assert not await store.quarantine("r1", claim.run.fence + 1, T0 + 1, CORRUPT)
        assert not await store.quarantine("r1", None, T0 + 1, CORRUPT)  # leased: not without
        assert await seen(store, "r1") == before

        assert await store.quarantine("r1", claim.run.fence, T0 + 1, CORRUPT)
        ended = await seen(store, "r1")
        assert not await store.quarantine("r1", None, T0 + 2, CORRUPT)  # repeated
        assert not await store.quarantine("unknown", None, T0 + 2, CORRUPT)
        assert await seen(store, "r1") == ended

    async def test_quarantine_without_a_fence_fails_a_run_nobody_holds(self, store: Store) -> None:
        await store.create_run(new_run("r1"))

        assert await store.quarantine("r1", None, T0 + 1, CORRUPT)

        assert (await stored(store, "r1")).reason == "corrupt_record"
        assert await store.claim(OWNER, None, 1, T0 + 2, TTL) == []

    async def test_a_value_error_is_no_outage(self, store: Store) -> None:
        assert not store.is_unavailable(ValueError("a bug, not an outage"))
