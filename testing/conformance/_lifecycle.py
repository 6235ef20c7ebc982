"""Ending a run (`finish`, `cancel`), continuing it (`resume`), and the blocking waits."""

from __future__ import annotations

import asyncio

import pytest

from sdk._core._journal import Kind, Record, State
from sdk.store import (
    CheckpointKind,
    EventType,
    Parked,
    Refusal,
    Refused,
    Rewind,
    RunStatus,
    StepEvent,
    Store,
)
from testing.conformance._support import (
    COMPLETED,
    GO,
    T0,
    TRICKY,
    TTL,
    async_checks,
    claim_ids,
    events_of,
    journal_of,
    lineage_of,
    new_run,
    pending_wait,
    seen,
    start_and_claim,
    status_of,
    step_record,
    stored,
    tick,
    types_of,
)

# Generous: these waits must be woken, not time out; nothing here measures speed.
WAKE_TIMEOUT = 5.0


async def parked(store: Store, run_id: str, deadline: float | None = None) -> None:
    claim = await start_and_claim(store, run_id)
    done = await store.suspend(
        run_id, claim.run.fence, T0, deadline, RunStatus.WAITING_FOR_SIGNAL,
        [("~wait:go#1", pending_wait("~wait:go#1", 0, deadline))], [GO],
    )  # fmt: skip
    assert done is Parked.PARKED


@async_checks
class LifecycleChecks:
    """`finish`, `cancel`, `resume`, `wait_finished` and `wait_ready`."""

    async def test_finish_completes_the_run_with_its_result(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")

        refused = await store.finish(
            "r1", claim.run.fence, RunStatus.COMPLETED, T0 + 2,
            result='{"total":12345678901234567890}', result_type="m:T",
        )  # fmt: skip

        assert refused is None
        run = await stored(store, "r1")
        assert run.status is RunStatus.COMPLETED
        assert (run.result, run.result_type) == ('{"total":12345678901234567890}', "m:T")
        assert run.finished_at == T0 + 2
        assert await tick(store, T0 + TTL + 1) == (0, 0)  # the lease went with it
        assert await claim_ids(store, now=T0 + TTL + 1) == []

    async def test_finish_failed_keeps_the_error_and_logs_it_as_the_event_data(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "r1")

        await store.finish(
            "r1", claim.run.fence, RunStatus.FAILED, T0 + 4, error=TRICKY, reason="flow_error"
        )

        run = await stored(store, "r1")
        assert (run.status, run.error, run.reason) == (RunStatus.FAILED, TRICKY, "flow_error")
        last = (await events_of(store, "r1"))[-1]
        assert (last.type, last.at, last.data) == ("run.failed", T0 + 4, TRICKY)
        cp = (await store.checkpoints("r1"))[-1]
        assert (cp.kind, cp.status, cp.at) == ("run_finished", RunStatus.FAILED, T0 + 4)

    async def test_finish_completed_logs_run_completed_and_a_final_checkpoint(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "r1")

        await store.finish("r1", claim.run.fence, RunStatus.COMPLETED, T0 + 1, result="1")

        assert await types_of(store, "r1") == ["run.created", "run.started", "run.completed"]
        assert [(c.kind, c.status) for c in await store.checkpoints("r1")] == [
            ("run_started", RunStatus.RUNNING), ("run_finished", RunStatus.COMPLETED),
        ]  # fmt: skip

    async def test_finishing_twice_is_refused(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        await store.finish("r1", claim.run.fence, RunStatus.COMPLETED, T0, result="1")

        refused = await store.finish("r1", claim.run.fence, RunStatus.FAILED, T0, error="{}")

        assert refused == Refused(Refusal.FENCED)
        assert await status_of(store, "r1") is RunStatus.COMPLETED

    async def test_finish_to_a_status_the_table_forbids_is_refused(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")

        refused = await store.finish("r1", claim.run.fence, RunStatus.PENDING, T0)

        assert refused == Refused(Refusal.TRANSITION, RunStatus.RUNNING, RunStatus.PENDING)
        assert await status_of(store, "r1") is RunStatus.RUNNING

    # -- cancel -------------------------------------------------------------------

    async def test_cancel_of_a_pending_run(self, store: Store) -> None:
        await store.create_run(new_run("r1"))

        assert await store.cancel("r1", "customer asked", T0 + 1, event_data=TRICKY) is None

        run = await stored(store, "r1")
        assert (run.status, run.reason, run.finished_at) == (
            RunStatus.CANCELED, "customer asked", T0 + 1,
        )  # fmt: skip
        assert await claim_ids(store) == []
        assert await store.wait_finished("r1", 0.05) is True
        last = (await events_of(store, "r1"))[-1]
        assert (last.type, last.at, last.data) == ("run.canceled", T0 + 1, TRICKY)
        (cp,) = await store.checkpoints("r1")  # never started: only the final one
        assert (cp.checkpoint_id, cp.kind, cp.status) == (1, "run_finished", RunStatus.CANCELED)

    async def test_cancel_of_a_waiting_run_removes_its_timer(self, store: Store) -> None:
        await parked(store, "r1", deadline=T0 + 5)

        assert await store.cancel("r1", "stop", T0 + 1) is None

        assert await tick(store, T0 + 6) == (0, 0)
        assert await status_of(store, "r1") is RunStatus.CANCELED
        assert await claim_ids(store, now=T0 + 6) == []

    async def test_cancel_of_a_running_run_fences_out_its_activation(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")

        assert await store.cancel("r1", "stop", T0 + 1) is None

        assert not await store.record("r1", claim.run.fence, "a#1", step_record("a#1", 0))
        assert await store.finish(
            "r1", claim.run.fence, RunStatus.COMPLETED, T0 + 2, result="1"
        ) == Refused(Refusal.FENCED)
        assert await store.renew([("r1", claim.run.fence)], T0 + 100) == ["r1"]
        assert await journal_of(store, "r1") == {}
        assert await tick(store, T0 + 100) == (0, 0)  # no lease left to recover
        assert await status_of(store, "r1") is RunStatus.CANCELED

    @pytest.mark.parametrize("end", [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED])
    async def test_cancel_of_a_finished_run_is_refused(self, store: Store, end: RunStatus) -> None:
        claim = await start_and_claim(store, "r1")
        if end is RunStatus.CANCELED:
            await store.cancel("r1", "first", T0)
        else:
            await store.finish("r1", claim.run.fence, end, T0)
        before = await seen(store, "r1")

        refused = await store.cancel("r1", "second", T0 + 1)

        assert refused == Refused(Refusal.TRANSITION, end, RunStatus.CANCELED)
        assert await seen(store, "r1") == before

    async def test_cancel_of_an_unknown_run_is_refused(self, store: Store) -> None:
        assert await store.cancel("nope", "x", T0) == Refused(Refusal.NOT_FOUND)
        assert await store.get_run("nope") is None

    # -- resume -------------------------------------------------------------------

    async def test_resume_of_a_failed_run_discards_the_given_record_only(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "r1")
        fence = claim.run.fence
        await store.record("r1", fence, "a#1", step_record("a#1", 0, "kept"))
        failed = Record("b#1", 1, Kind.STEP, State.FAILED, error={"type": "x:E"}).to_json()
        await store.record("r1", fence, "b#1", failed)
        await store.finish("r1", fence, RunStatus.FAILED, T0, reason="step_failed",
                           error='{"type":"x:E","message":"m","step_key":"b#1"}')  # fmt: skip

        assert await store.resume("r1", "b#1", now=T0 + 1, event_data=TRICKY) is None

        run = await stored(store, "r1")
        assert run.status is RunStatus.RUNNING
        assert (run.error, run.reason, run.finished_at, run.result) == (None,) * 4
        last = (await events_of(store, "r1"))[-1]
        assert (last.type, last.at, last.data) == ("run.resumed", T0 + 1, TRICKY)
        (again,) = await store.claim("worker-b", None, 1, T0 + 1, TTL)
        assert again.journal == {"a#1": step_record("a#1", 0, "kept")}

    async def test_resume_with_a_version_moves_a_queued_run_and_keeps_its_place(
        self, store: Store
    ) -> None:
        await store.create_run(new_run("stuck", flow="c.f", flow_version="1", created_at=T0))
        await store.create_run(new_run("next", flow="c.f", flow_version="2", created_at=T0 + 1))

        assert await store.resume("stuck", None, now=T0 + 2, event_data=TRICKY, version="2") is None

        run = await stored(store, "stuck")
        assert (run.status, run.flow_version) == (RunStatus.PENDING, "2")
        last = (await events_of(store, "stuck"))[-1]
        assert (last.type, last.at, last.data) == ("run.resumed", T0 + 2, TRICKY)
        assert await claim_ids(store, flows=[("c.f", "2")], limit=5) == ["stuck", "next"]

    async def test_resume_with_a_version_refuses_a_leased_run_and_keeps_its_version(
        self, store: Store
    ) -> None:
        await store.create_run(new_run("r1", flow="c.f", flow_version="1", created_at=T0))
        await store.claim("worker-a", None, 1, T0, TTL)

        refused = await store.resume("r1", None, now=T0, version="2")

        assert refused is not None and refused.why is Refusal.TRANSITION
        assert (await stored(store, "r1")).flow_version == "1"

    async def test_resume_with_a_version_moves_a_run_whose_lease_expired(
        self, store: Store
    ) -> None:
        await store.create_run(new_run("r1", flow="c.f", flow_version="1", created_at=T0))
        await store.claim("worker-a", None, 1, T0, TTL)
        await tick(store, T0 + TTL + 1)  # the lease expired: queued again, replaying

        assert await store.resume("r1", None, now=T0 + TTL + 2, version="2") is None

        run = await stored(store, "r1")
        assert (run.status, run.flow_version) == (RunStatus.REPLAYING, "2")
        assert await claim_ids(store, flows=[("c.f", "1")], now=T0 + TTL + 2) == []
        assert await claim_ids(store, flows=[("c.f", "2")], now=T0 + TTL + 2) == ["r1"]

    async def test_resume_of_a_failed_run_with_a_version_moves_it(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        await store.finish("r1", claim.run.fence, RunStatus.FAILED, T0, reason="x")

        assert await store.resume("r1", None, now=T0 + 1, version="v2") is None

        run = await stored(store, "r1")
        assert (run.status, run.flow_version) == (RunStatus.RUNNING, "v2")

    async def test_resume_clears_the_finish_notice(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        await store.finish("r1", claim.run.fence, RunStatus.FAILED, T0, reason="x")
        assert await store.wait_finished("r1", 0.05) is True

        await store.resume("r1", None)

        assert await store.wait_finished("r1", 0.05) is False

    async def test_resume_of_a_failed_run_continues_from_before_its_finish(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "r1")  # checkpoint 1
        fence = claim.run.fence
        await store.record("r1", fence, "s#1", step_record("s#1", 0), now=T0, event=COMPLETED)
        await store.finish("r1", fence, RunStatus.FAILED, T0, error="{}")  # checkpoint 3
        assert (await stored(store, "r1")).checkpoint_head == 3

        await store.resume("r1", None, now=T0)

        run = await stored(store, "r1")
        assert run.resume_from_checkpoint == 2
        assert run.checkpoint_head == 3  # resuming takes no checkpoint

    async def test_resume_that_discards_a_failure_continues_from_before_it(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "r1")  # checkpoint 1
        fence = claim.run.fence
        await store.record("r1", fence, "a#1", step_record("a#1", 0), now=T0, event=COMPLETED)
        failed = Record("b#1", 1, Kind.STEP, State.FAILED, error={"type": "x:E"}).to_json()
        failure = StepEvent(EventType.STEP_FAILED, "{}", CheckpointKind.STEP_COMPLETED)
        await store.record("r1", fence, "b#1", failed, now=T0, event=failure)  # checkpoint 3
        await store.finish("r1", fence, RunStatus.FAILED, T0, error="{}")  # checkpoint 4

        await store.resume("r1", "b#1", now=T0 + 1)

        assert (await stored(store, "r1")).resume_from_checkpoint == 2  # a#1's, before b#1's
        lineage = await lineage_of(store, "r1")
        assert lineage.journal == {"a#1": step_record("a#1", 0)}
        assert list(lineage.written) == ["a#1"]

    async def test_resume_of_a_canceled_run_keeps_its_journal(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        await store.record("r1", claim.run.fence, "a#1", step_record("a#1", 0, 1))
        await store.cancel("r1", "oops", T0)

        assert await store.resume("r1", None) is None

        (again,) = await store.claim("worker-b", None, 1, T0 + 1, TTL)
        assert again.run.status is RunStatus.RUNNING
        assert again.journal == {"a#1": step_record("a#1", 0, 1)}

    async def test_resume_with_a_rewind_drops_its_records_and_keeps_their_checkpoints(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "r1")  # checkpoint 1
        fence = claim.run.fence
        await store.record("r1", fence, "a#1", step_record("a#1", 0), now=T0, event=COMPLETED)
        await store.record("r1", fence, "~cancel", step_record("~cancel", -1), now=T0)
        await store.record("r1", fence, "c#1", step_record("c#1", 1), now=T0 + 1, event=COMPLETED)
        await store.cancel("r1", "stop", T0 + 2)  # checkpoint 4
        before = await store.checkpoints("r1")
        assert [(c.checkpoint_id, c.step_key) for c in before] == [
            (1, None), (2, "a#1"), (3, "c#1"), (4, None),
        ]  # fmt: skip
        rewind = Rewind((await stored(store, "r1")).fence, ("~cancel", "c#1"), 2)

        assert await store.resume("r1", None, now=T0 + 3, event_data=TRICKY, rewind=rewind) is None

        run = await stored(store, "r1")
        assert (run.status, run.resume_from_checkpoint) == (RunStatus.RUNNING, 2)
        lineage = await lineage_of(store, "r1")
        assert lineage.journal == {"a#1": step_record("a#1", 0)}
        assert list(lineage.written) == ["a#1"]
        assert await store.checkpoints("r1") == before  # the dropped step's is still listed
        (again,) = await store.claim("worker-b", None, 1, T0 + 3, TTL)
        assert again.journal == {"a#1": step_record("a#1", 0)}

    async def test_resume_with_a_rewind_of_a_run_that_changed_is_refused(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "r1")
        await store.record("r1", claim.run.fence, "~cancel", step_record("~cancel", -1), now=T0)
        await store.cancel("r1", "stop", T0 + 1)
        fence = (await stored(store, "r1")).fence
        before = await seen(store, "r1")

        # read at an older fence (since then, resumed, claimed and canceled again)
        refused = await store.resume("r1", None, rewind=Rewind(fence - 1, ("~cancel",), 1))

        assert refused == Refused(Refusal.CHANGED, RunStatus.CANCELED)
        assert await seen(store, "r1") == before

    async def test_resume_of_a_waiting_run_requeues_it_and_drops_its_timer(
        self, store: Store
    ) -> None:
        await parked(store, "r1", deadline=T0 + 5)

        assert await store.resume("r1", None) is None

        run = await stored(store, "r1")
        assert run.status is RunStatus.RUNNING
        assert run.resume_from_checkpoint == run.checkpoint_head == 2  # the wait's checkpoint
        assert await tick(store, T0 + 6) == (0, 0)
        assert await claim_ids(store) == ["r1"]

    @pytest.mark.parametrize("setup", ["pending", "running", "completed"])
    async def test_resume_of_a_run_that_has_not_stopped_is_refused(
        self, store: Store, setup: str
    ) -> None:
        if setup == "pending":
            await store.create_run(new_run("r1"))
        else:
            claim = await start_and_claim(store, "r1")
            if setup == "completed":
                await store.finish("r1", claim.run.fence, RunStatus.COMPLETED, T0, result="1")
        before = await seen(store, "r1")

        refused = await store.resume("r1", None)

        assert isinstance(refused, Refused)
        assert (refused.why, refused.status) == (Refusal.TRANSITION, RunStatus(setup))
        assert await seen(store, "r1") == before

    async def test_resume_of_an_unknown_run_is_refused(self, store: Store) -> None:
        assert await store.resume("nope", None) == Refused(Refusal.NOT_FOUND)

    # -- blocking waits -----------------------------------------------------------

    async def test_wait_finished_times_out_until_the_run_finishes(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        assert await store.wait_finished("r1", 0.05) is False
        assert await store.wait_finished("unknown", 0.05) is False

        await store.finish("r1", claim.run.fence, RunStatus.COMPLETED, T0, result="1")

        assert await store.wait_finished("r1", 0.05) is True
        assert await store.wait_finished("r1", 0.05) is True  # reading does not consume it

    async def test_wait_finished_wakes_every_waiter(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        waiters = [asyncio.create_task(store.wait_finished("r1", WAKE_TIMEOUT)) for _ in range(3)]
        await asyncio.sleep(0.05)  # let them block (a later start sees the notice anyway)

        await store.finish("r1", claim.run.fence, RunStatus.FAILED, T0, reason="x")

        assert await asyncio.gather(*waiters) == [True, True, True]

    async def test_wait_finished_is_woken_by_cancel(self, store: Store) -> None:
        await store.create_run(new_run("r1"))
        waiter = asyncio.create_task(store.wait_finished("r1", WAKE_TIMEOUT))
        await asyncio.sleep(0)

        await store.cancel("r1", "stop", T0)

        assert await waiter is True

    async def test_wait_ready_is_woken_by_a_new_run(self, store: Store) -> None:
        waiter = asyncio.create_task(store.wait_ready(None, WAKE_TIMEOUT))
        await asyncio.sleep(0)

        await store.create_run(new_run("r1"))

        assert await waiter is True  # False would mean it ran into its timeout

    async def test_wait_ready_for_a_queue_is_woken_by_a_run_on_it(self, store: Store) -> None:
        waiter = asyncio.create_task(store.wait_ready(["mail"], WAKE_TIMEOUT))
        await asyncio.sleep(0)

        await store.create_run(new_run("r1", queue="mail"))

        assert await waiter is True

    async def test_wait_ready_times_out_when_nothing_is_ready(self, store: Store) -> None:
        assert await store.wait_ready(None, 0.05) is False
        await store.create_run(new_run("r1", queue="other"))
        assert await store.wait_ready(["mail"], 0.05) is False

    async def test_wait_ready_is_woken_by_a_signal_that_wakes_a_run(self, store: Store) -> None:
        await parked(store, "r1")
        while await store.wait_ready(None, 0.01):  # drain what the start left
            pass
        waiter = asyncio.create_task(store.wait_ready(None, WAKE_TIMEOUT))
        await asyncio.sleep(0)

        await store.signal("r1", GO, "1", None)

        assert await waiter is True
