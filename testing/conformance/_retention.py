"""Deleting runs: `delete`, delete on success (tombstones), and retention deadlines.

A deleted run is gone for every read of the protocol, and its id starts over
clean: no journal, mail, dedup ids or lineage of the old run come back.
Deadlines are arguments (the caller's clock): a `tick` at or after one deletes,
one before keeps.
"""

from __future__ import annotations

import json

import pytest

from sdk.store import EventType, Mailbox, Parked, Refusal, Refused, RunStatus, Store
from testing.conformance._support import (
    GO,
    OWNER,
    T0,
    TTL,
    async_checks,
    claim_ids,
    new_run,
    recording,
    seen,
    start_and_claim,
    status_of,
    step_record,
    tick,
    together,
    types_of,
)

DAY = 86_400.0
ERROR = json.dumps({"type": "builtins:ValueError", "message": "bad", "reason": "step_failed"})


async def complete(
    store: Store, run_id: str, *, retention: float | None = None,
    delete_until: float | None = None,
) -> None:  # fmt: skip
    """Start, claim and complete a run at T0 + 1."""
    claim = await start_and_claim(store, run_id)
    await store.finish(
        run_id, claim.run.fence, RunStatus.COMPLETED, T0 + 1, result='{"n":1}',
        result_type="m:T", retention=retention, delete_until=delete_until,
    )  # fmt: skip


async def busy_finished_run(store: Store, run_id: str, status: RunStatus) -> None:
    """A derived run that used everything: journal, lineage, mail, dedup ids, events."""
    lineage = [("b#1", step_record("b#1", 1, "B"))]
    await store.derive_run(
        new_run(run_id, source_run_id="src", root_run_id="src"),
        [("a#0", step_record("a#0", 0, "A"))], lineage, EventType.RUN_REPLAYED, "{}",
    )  # fmt: skip
    (claim,) = await store.claim(OWNER, None, 1, T0, TTL)
    await store.record(run_id, claim.run.fence, "a#1", step_record("a#1", 2, 1), now=T0)
    await store.signal(run_id, Mailbox("unread"), '"x"', "dedup-1", now=T0)
    await store.signal(run_id, Mailbox("other", human=True), '"y"', None, now=T0)
    if status is RunStatus.CANCELED:
        await store.cancel(run_id, "no", T0 + 1)
    elif status is RunStatus.COMPLETED:
        await store.finish(run_id, claim.run.fence, status, T0 + 1, result="1")
    else:
        await store.finish(run_id, claim.run.fence, status, T0 + 1, error=ERROR)


async def gone(store: Store, run_id: str) -> bool:
    """Nothing of the run is left for any read of the protocol."""
    for status in [None, *RunStatus]:
        if run_id in [r.run_id for r in await store.list_runs(status, None, 10_000)]:
            return False
    return (
        await store.get_run(run_id) is None
        and await store.get_tombstone(run_id) is None
        and await store.read_lineage(run_id) is None
        and await store.intents(run_id) is None
        and await store.events(run_id, None, 10) == []
        and await store.checkpoints(run_id) == []
        and await store.correlation([run_id]) == {}
    )


@async_checks
class RetentionChecks:
    """`delete`, `finish(delete_until=...)`, `finish(retention=...)` and `tick`'s deletions."""

    @pytest.mark.parametrize("end", [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED])
    async def test_delete_of_a_finished_run_leaves_nothing_of_it(
        self, store: Store, end: RunStatus
    ) -> None:
        async with recording(store) as feed:
            await busy_finished_run(store, "r-del", end)
            await store.create_run(new_run("other"))

            assert await store.delete("r-del", T0 + 2, event_data='{"actor":"ops"}') is None

            assert await gone(store, "r-del")
            assert await store.wait_finished("r-del", 0.05) is False
            assert await status_of(store, "other") is RunStatus.PENDING  # others untouched
            assert ("run.deleted", {"actor": "ops"}) in await feed.of("r-del")

    async def test_a_deleted_run_id_starts_over_clean(self, store: Store) -> None:
        await busy_finished_run(store, "r1", RunStatus.COMPLETED)
        await store.delete("r1", T0 + 2)

        outcome = await store.create_run(new_run("r1", created_at=T0 + 3))

        assert outcome.created
        (claim,) = await store.claim(OWNER, None, 1, T0 + 3, TTL)
        assert (claim.run.run_id, claim.journal, claim.lineage) == ("r1", {}, {})
        assert claim.mail == frozenset()
        assert (claim.run.source_run_id, claim.run.result, claim.run.finished_at) == (None,) * 3
        assert await types_of(store, "r1") == ["run.created", "run.started"]
        assert len(await store.checkpoints("r1")) == 1
        assert await store.signal("r1", Mailbox("unread"), "1", "dedup-1") is True

    @pytest.mark.parametrize("how", ["pending", "running", "waiting", "replaying"])
    async def test_delete_of_a_run_that_has_not_finished_is_refused_and_deletes_nothing(
        self, store: Store, how: str
    ) -> None:
        if how == "pending":
            await store.create_run(new_run("r1"))
        else:
            claim = await start_and_claim(store, "r1")
            if how == "waiting":
                parked = await store.suspend(
                    "r1", claim.run.fence, T0, None, RunStatus.WAITING_FOR_SIGNAL, [], [GO]
                )
                assert parked is Parked.PARKED
            elif how == "replaying":
                await tick(store, T0 + TTL + 1)
        status = await status_of(store, "r1")
        before = await seen(store, "r1")

        refused = await store.delete("r1", T0 + 5)

        assert refused == Refused(Refusal.NOT_FINISHED, status)
        assert await seen(store, "r1") == before

    async def test_delete_of_an_unknown_run_is_refused(self, store: Store) -> None:
        assert await store.delete("nope", T0) == Refused(Refusal.NOT_FOUND)

    async def test_a_deleted_run_refuses_late_writes_of_its_old_worker(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        await store.finish("r1", claim.run.fence, RunStatus.COMPLETED, T0, result="1")
        await store.delete("r1", T0)

        assert not await store.record("r1", claim.run.fence, "a#1", step_record("a#1", 0), now=T0)
        assert not await store.mark("r1", claim.run.fence, "a#1", T0)
        assert await store.renew([("r1", claim.run.fence)], T0 + TTL) == ["r1"]
        assert await gone(store, "r1")

    # -- delete on success --------------------------------------------------------

    async def test_finish_with_delete_until_leaves_only_a_tombstone(self, store: Store) -> None:
        async with recording(store) as feed:
            claim = await start_and_claim(store, "r-dos")
            await store.signal("r-dos", Mailbox("late"), '"x"', "d1", now=T0)
            await store.finish(
                "r-dos", claim.run.fence, RunStatus.COMPLETED, T0 + 1,
                result='{"total":12345678901234567890}', result_type="m:T",
                delete_until=T0 + 301,
            )  # fmt: skip

            assert await store.get_run("r-dos") is None
            assert await store.read_lineage("r-dos") is None
            assert await store.events("r-dos", None, 10) == []
            assert await store.list_runs(None, None, 100) == []
            tomb = await store.get_tombstone("r-dos")
            assert tomb is not None
            assert (tomb.status, tomb.result, tomb.result_type) == (
                RunStatus.COMPLETED, '{"total":12345678901234567890}', "m:T",
            )  # fmt: skip
            assert tomb.args == ""  # the arguments are not kept
            assert await store.wait_finished("r-dos", 1.0) is True
            types = [t for t, _ in await feed.of("r-dos")]
            assert types[-2:] == ["run.completed", "run.deleted"]

    async def test_a_tombstone_goes_when_its_grace_ends(self, store: Store) -> None:
        await complete(store, "r-dos", delete_until=T0 + 301)

        await tick(store, T0 + 300)
        assert await store.get_tombstone("r-dos") is not None

        await tick(store, T0 + 301)
        assert await gone(store, "r-dos")
        assert await store.wait_finished("r-dos", 0.05) is False

    async def test_delete_until_does_not_delete_a_failed_run(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        await store.finish(
            "r1", claim.run.fence, RunStatus.FAILED, T0 + 1, error=ERROR, delete_until=T0 + 2
        )

        await tick(store, T0 + 10 * DAY)

        assert await status_of(store, "r1") is RunStatus.FAILED
        assert await store.get_tombstone("r1") is None

    async def test_starting_a_run_id_again_clears_the_tombstone_of_its_deleted_run(
        self, store: Store
    ) -> None:
        await complete(store, "r1", delete_until=T0 + 301)

        assert (await store.create_run(new_run("r1", created_at=T0 + 2))).created

        assert await store.get_tombstone("r1") is None
        assert await store.wait_finished("r1", 0.05) is False  # the new run has not finished
        await tick(store, T0 + 400)  # the old grace deadline passes
        assert await status_of(store, "r1") is RunStatus.PENDING
        assert await claim_ids(store, now=T0 + 400) == ["r1"]

    # -- retention ------------------------------------------------------------------

    async def test_a_completed_run_is_deleted_at_its_retention_deadline_not_before(
        self, store: Store
    ) -> None:
        async with recording(store) as feed:
            await complete(store, "r-exp", retention=DAY)

            await tick(store, T0 + DAY)
            assert await status_of(store, "r-exp") is RunStatus.COMPLETED

            await tick(store, T0 + 1 + DAY)
            assert await gone(store, "r-exp")
            assert "run.deleted" in [t for t, _ in await feed.of("r-exp")]

    async def test_a_failed_run_never_expires(self, store: Store) -> None:
        await store.create_run(new_run("r1", retention=60.0))
        (claim,) = await store.claim(OWNER, None, 1, T0, TTL)
        await store.finish(
            "r1", claim.run.fence, RunStatus.FAILED, T0 + 1, error=ERROR, retention=60.0
        )

        await tick(store, T0 + 10 * DAY)

        assert await status_of(store, "r1") is RunStatus.FAILED

    async def test_a_run_failed_by_lease_recoveries_never_expires(self, store: Store) -> None:
        await store.create_run(new_run("r1", retention=60.0))
        await store.claim(OWNER, None, 1, T0, TTL)

        await tick(store, T0 + TTL + 1, max_recoveries=0)  # fails at once
        await tick(store, T0 + 10 * DAY, max_recoveries=0)

        assert await status_of(store, "r1") is RunStatus.FAILED

    async def test_a_canceled_run_expires_after_the_retention_recorded_at_start(
        self, store: Store
    ) -> None:
        await store.create_run(new_run("r1", retention=60.0))
        await store.create_run(new_run("r2"))  # no retention: kept
        await store.cancel("r1", "no", T0 + 5)
        await store.cancel("r2", "no", T0 + 5)

        await tick(store, T0 + 64)
        assert await status_of(store, "r1") is RunStatus.CANCELED

        await tick(store, T0 + 65)
        assert await gone(store, "r1")
        assert await status_of(store, "r2") is RunStatus.CANCELED

    async def test_the_retention_given_at_finish_applies_when_none_was_recorded_at_start(
        self, store: Store
    ) -> None:
        await complete(store, "r1", retention=10.0)  # started without a retention

        await tick(store, T0 + 10.5)
        assert await status_of(store, "r1") is RunStatus.COMPLETED
        await tick(store, T0 + 11)
        assert await gone(store, "r1")

    async def test_unfinished_runs_never_expire(self, store: Store) -> None:
        await store.create_run(new_run("waiting", retention=1.0, created_at=T0))
        await store.create_run(new_run("pending", retention=1.0, created_at=T0 + 1))
        (claim,) = await store.claim(OWNER, None, 1, T0 + 1, TTL)  # FIFO: "waiting"
        await store.suspend(
            "waiting", claim.run.fence, T0, None, RunStatus.WAITING_FOR_SIGNAL, [], [GO]
        )

        await tick(store, T0 + 10 * DAY)

        assert await status_of(store, "waiting") is RunStatus.WAITING_FOR_SIGNAL
        assert await status_of(store, "pending") is RunStatus.PENDING

    async def test_resuming_a_canceled_run_cancels_its_expiry(self, store: Store) -> None:
        await store.create_run(new_run("r1", retention=60.0))
        await store.cancel("r1", "oops", T0 + 1)

        await store.resume("r1", None, now=T0 + 2)
        await tick(store, T0 + DAY)

        assert await status_of(store, "r1") is RunStatus.RUNNING

    async def test_a_resumed_run_that_finishes_again_gets_a_new_deadline(
        self, store: Store
    ) -> None:
        await store.create_run(new_run("r1", retention=60.0))
        await store.cancel("r1", "oops", T0 + 1)  # due at T0 + 61
        await store.resume("r1", None, now=T0 + 2)

        await store.cancel("r1", "now really", T0 + 50)  # due at T0 + 110

        await tick(store, T0 + 61)
        assert await status_of(store, "r1") is RunStatus.CANCELED
        await tick(store, T0 + 110)
        assert await gone(store, "r1")

    async def test_one_tick_deletes_at_most_its_limit(self, store: Store) -> None:
        # (the limit is per partition: the runs are in one)
        r = together(store, *(f"r{i}" for i in range(5)))
        for run_id in r:
            await store.create_run(new_run(run_id, retention=1.0))
            await store.cancel(run_id, "no", T0)

        await store.tick(T0 + 2, 10, "{}", limit=3)
        left = [run_id for run_id in r if await store.get_run(run_id) is not None]
        assert len(left) == 2

        await store.tick(T0 + 2, 10, "{}", limit=3)
        assert [run_id for run_id in r if await store.get_run(run_id) is not None] == []
