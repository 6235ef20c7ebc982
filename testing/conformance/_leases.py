"""Leases: renewal, expiry, recovery, giving up after too many recoveries; `poll`."""

from __future__ import annotations

from sdk.store import Claim, Refusal, Refused, RunStatus, Store
from testing.conformance._support import (
    GO,
    OWNER,
    RECOVERY_ERROR,
    T0,
    TTL,
    async_checks,
    claim_ids,
    journal_of,
    new_run,
    start_and_claim,
    status_of,
    step_record,
    stored,
    tick,
)


async def poll(
    store: Store, now: float, *, limit: int = 10, queues: list[str] | None = None,
    max_recoveries: int = 10,
) -> tuple[list[str], int, int, float | None]:  # fmt: skip
    claims, result = await store.poll(
        OWNER, queues, limit, now, TTL, max_recoveries, RECOVERY_ERROR
    )
    return [c.run.run_id for c in claims], result.fired, result.recovered, result.next_due


@async_checks
class LeaseChecks:
    """`tick`, `renew`, `release` and `poll`: a lost lease fences its holder out."""

    async def test_tick_leaves_a_live_lease_alone(self, store: Store) -> None:
        await start_and_claim(store, "r1")

        result = await store.tick(T0 + TTL - 0.001, 10, RECOVERY_ERROR)

        assert (result.fired, result.recovered) == (0, 0)
        assert result.next_due == T0 + TTL  # when the lease ends
        assert await status_of(store, "r1") is RunStatus.RUNNING

    async def test_tick_recovers_an_expired_lease_and_fences_out_the_old_owner(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "r1")
        assert await store.record("r1", claim.run.fence, "a#1", step_record("a#1", 0, "a"))

        assert await tick(store, T0 + TTL) == (0, 1)

        run = await stored(store, "r1")
        assert (run.status, run.recoveries) == (RunStatus.REPLAYING, 1)
        assert run.fence != claim.run.fence
        assert not await store.record("r1", claim.run.fence, "b#1", step_record("b#1", 1, "x"))
        assert await store.finish(
            "r1", claim.run.fence, RunStatus.COMPLETED, T0 + TTL, result="1"
        ) == Refused(Refusal.FENCED)
        (again,) = await store.claim("worker-b", None, 1, T0 + TTL, TTL)
        assert (again.run.run_id, again.run.status) == ("r1", RunStatus.RUNNING)
        assert again.run.fence not in (claim.run.fence, run.fence)
        assert again.journal == {"a#1": step_record("a#1", 0, "a")}

    async def test_tick_recovers_each_expired_lease_once(self, store: Store) -> None:
        await start_and_claim(store, "r1")

        assert await tick(store, T0 + TTL) == (0, 1)
        assert await tick(store, T0 + TTL + 1) == (0, 0)

    async def test_too_many_recoveries_without_progress_fail_the_run(self, store: Store) -> None:
        now = T0
        await start_and_claim(store, "r1", now=now)
        for expected in (1, 2):
            now += TTL
            assert await tick(store, now, max_recoveries=2) == (0, 1)
            assert await status_of(store, "r1") is RunStatus.REPLAYING
            assert await claim_ids(store, now=now) == ["r1"]
            assert (await stored(store, "r1")).recoveries == expected

        now += TTL
        assert await tick(store, now, max_recoveries=2) == (0, 1)

        run = await stored(store, "r1")
        assert (run.status, run.reason) == (RunStatus.FAILED, "max_recoveries_exceeded")
        assert run.error == RECOVERY_ERROR  # the error JSON it was given, as it was
        assert run.finished_at == now
        assert await claim_ids(store, now=now) == []
        assert await store.wait_finished("r1", 0.05) is True

    async def test_progress_resets_the_recovery_count(self, store: Store) -> None:
        now = T0
        claim = await start_and_claim(store, "r1", now=now)
        for i in range(4):  # with max 2, four expiries without progress would fail it
            key = f"s#{i + 1}"
            assert await store.record("r1", claim.run.fence, key, step_record(key, i))
            now += TTL
            assert await tick(store, now, max_recoveries=2) == (0, 1)
            (claim,) = await store.claim("w", None, 1, now, TTL)

        assert await status_of(store, "r1") is RunStatus.RUNNING
        assert len(await journal_of(store, "r1")) == 4

    async def test_renew_extends_a_held_lease(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")

        assert await store.renew([("r1", claim.run.fence)], T0 + 3 * TTL) == []

        assert await tick(store, T0 + 2 * TTL) == (0, 0)
        assert await tick(store, T0 + 3 * TTL) == (0, 1)

    async def test_renew_returns_the_leases_that_are_lost(self, store: Store) -> None:
        for run_id in ("kept", "expired", "canceled", "finished"):
            await store.create_run(new_run(run_id))
        claims = {c.run.run_id: c.run.fence for c in await store.claim("w", None, 4, T0, TTL)}
        await store.cancel("canceled", "x", T0)
        await store.finish("finished", claims["finished"], RunStatus.COMPLETED, T0, result="1")
        await store.renew([("kept", claims["kept"])], T0 + 2 * TTL)
        await tick(store, T0 + TTL)  # "expired" loses its lease

        lost = await store.renew(list(claims.items()), T0 + 3 * TTL)

        assert sorted(lost) == ["canceled", "expired", "finished"]
        assert await status_of(store, "kept") is RunStatus.RUNNING
        assert await status_of(store, "expired") is RunStatus.REPLAYING

    async def test_renew_with_a_stale_fence_does_not_extend(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        await store.release("r1", claim.run.fence)
        (again,) = await store.claim("w", None, 1, T0, TTL)

        assert await store.renew([("r1", claim.run.fence)], T0 + 5 * TTL) == ["r1"]

        assert await tick(store, T0 + TTL) == (0, 1)
        assert again.run.fence != claim.run.fence

    async def test_release_requeues_the_run_and_fences_out_its_holder(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")

        await store.release("r1", claim.run.fence)

        assert await tick(store, T0 + TTL) == (0, 0)  # no lease left to expire
        assert not await store.record("r1", claim.run.fence, "a#1", step_record("a#1", 0))
        (again,) = await store.claim("w", None, 1, T0, TTL)
        assert again.run.fence != claim.run.fence
        await store.release("r1", claim.run.fence)  # a stale release is ignored
        assert await claim_ids(store) == []
        assert await store.record("r1", again.run.fence, "a#1", step_record("a#1", 0))

    async def test_a_lease_expiry_logs_run_lease_expired(self, store: Store) -> None:
        await start_and_claim(store, "r1")

        await tick(store, T0 + TTL + 1)

        last = (await store.events("r1", None, 100))[-1]
        assert (last.type, last.at, last.step_key, last.data) == (
            "run.lease_expired", T0 + TTL + 1, None, None,
        )  # fmt: skip
        assert [c.kind for c in await store.checkpoints("r1")] == ["run_started"]

    async def test_exceeding_max_recoveries_logs_run_failed_and_a_final_checkpoint(
        self, store: Store
    ) -> None:
        await start_and_claim(store, "r1")

        await tick(store, T0 + TTL + 1, max_recoveries=0)

        last = (await store.events("r1", None, 100))[-1]
        assert (last.type, last.at, last.data) == ("run.failed", T0 + TTL + 1, RECOVERY_ERROR)
        final = (await store.checkpoints("r1"))[-1]
        assert (final.kind, final.status) == ("run_finished", RunStatus.FAILED)

    # -- poll: tick, then claim -------------------------------------------------

    async def test_poll_claims_like_claim(self, store: Store) -> None:
        await store.create_run(new_run("low", priority=5, queue="qa"))
        await store.create_run(new_run("high", priority=-5, queue="qb"))
        await store.create_run(new_run("mid", queue="qc"))

        assert await poll(store, T0, queues=["qa", "qb"]) == (["high", "low"], 0, 0, None)
        # next_due is read before this poll's claims: here, the leases the first one took
        assert await poll(store, T0) == (["mid"], 0, 0, T0 + TTL)

    async def test_poll_claims_a_run_whose_timer_fired_in_the_same_call(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        await store.suspend("r1", claim.run.fence, T0, T0 + 30, RunStatus.WAITING_FOR_SIGNAL,
                            [], [])  # fmt: skip

        assert await poll(store, T0 + 29.999) == ([], 0, 0, T0 + 30)
        assert await poll(store, T0 + 30) == (["r1"], 1, 0, None)
        assert await status_of(store, "r1") is RunStatus.RUNNING

    async def test_poll_recovers_an_expired_lease_and_claims_the_run_again(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "r1")

        taken, fired, recovered, _ = await poll(store, T0 + TTL)

        assert (taken, fired, recovered) == (["r1"], 0, 1)
        run = await stored(store, "r1")
        assert run.status is RunStatus.RUNNING
        assert run.fence != claim.run.fence

    async def test_poll_with_no_free_slot_still_ticks(self, store: Store) -> None:
        await start_and_claim(store, "r1")
        await store.create_run(new_run("r2"))

        assert await poll(store, T0 + TTL, limit=0) == ([], 0, 1, None)

        assert await status_of(store, "r1") is RunStatus.REPLAYING
        assert await status_of(store, "r2") is RunStatus.PENDING

    async def test_poll_fails_a_run_recovered_too_often(self, store: Store) -> None:
        await start_and_claim(store, "r1")

        taken, _, recovered, _ = await poll(store, T0 + TTL, max_recoveries=0)

        assert (taken, recovered) == ([], 1)
        run = await stored(store, "r1")
        assert (run.status, run.reason) == (RunStatus.FAILED, "max_recoveries_exceeded")

    async def test_poll_with_flows_claims_only_runs_of_those_flows(self, store: Store) -> None:
        await store.create_run(new_run("other", flow="c.other", priority=-5))
        await store.create_run(new_run("mine", flow="c.mine"))

        claims, _ = await store.poll(OWNER, None, 10, T0, TTL, 10, RECOVERY_ERROR, flows=["c.mine"])

        assert [c.run.run_id for c in claims] == ["mine"]
        assert await claim_ids(store) == ["other"]

    async def test_poll_hands_out_the_mail_and_journal_like_claim(self, store: Store) -> None:
        claim: Claim = await start_and_claim(store, "r1")
        await store.record("r1", claim.run.fence, "a#1", step_record("a#1", 0, 1))
        await store.signal("r1", GO, "1", None)
        await store.release("r1", claim.run.fence)

        (again,), _ = await store.poll(OWNER, None, 1, T0, TTL, 10, RECOVERY_ERROR)

        assert again.journal == {"a#1": step_record("a#1", 0, 1)}
        assert again.mail == {GO}
